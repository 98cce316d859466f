--- What the CLI shows people beyond a run's row and log (host/waiting.c calls
-- these through moor.host): `moor inputs` (the pending questions with their
-- request ids), `moor runs --status/--tool/--limit`, and what one run waits
-- on (`moor call`'s "waiting: ..." line and its report of a parked run).
-- Read-only: every query is moor.store's.
local core = require "moor.core"
local store = require "moor.store"
local json = require "moor.json"
local inspect = require "moor.engine.inspect"

local M = {}

local encode, decode = json.encode, json.decode

local STATUSES = { running = true, waiting = true, completed = true, failed = true, cancelled = true }

local function iso(ms)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", ms // 1000)
end

-- A question's kind as a person reads it.
local function kind_of(req)
  if req.kind == "authorization" then return "sign-in" end
  if type(req.approval) == "table" then return "approval" end
  return "question"
end

-- The first line of a prompt, at most n characters, for one table row.
local function first_line(text, n)
  text = tostring(text or ""):match("^[^\r\n]*")
  if #text > n then text = text:sub(1, n - 3) .. "..." end
  return text
end

--- `moor inputs [--json]`: every pending question, oldest first, with its
-- request id, run and tool. JSON: [{requestId, runId, tool, kind, request, created}].
function M.list_inputs(as_json)
  local rows = store.pending_inputs()
  local tools = {}
  local out = {}
  for i, row in ipairs(rows) do
    local tool = tools[row.run_id]
    if not tool then
      local run = store.run(row.run_id)
      tool = run and run.tool or "?"
      tools[row.run_id] = tool
    end
    local req = decode(row.request)
    out[i] = { requestId = row.request_id, runId = row.run_id, tool = tool, kind = kind_of(req), request = req,
      created = iso(row.created) }
  end
  if as_json then return encode(json.array(out)) .. "\n" end
  if #out == 0 then return "no pending questions\n" end
  -- (columns as wide as their longest value)
  local w = { #"REQUEST", #"RUN", #"TOOL" }
  for _, q in ipairs(out) do
    w[1], w[2], w[3] = math.max(w[1], #q.requestId), math.max(w[2], #q.runId), math.max(w[3], #q.tool)
  end
  local row = ("%%-%ds  %%-%ds  %%-%ds  %%-9s %%s"):format(w[1], w[2], w[3])
  local lines = { row:format("REQUEST", "RUN", "TOOL", "KIND", "PROMPT") }
  for _, q in ipairs(out) do
    local req = q.request
    local prompt = q.kind == "sign-in" and ("sign in to " .. tostring(req.name)) or req.prompt
    lines[#lines + 1] = row:format(q.requestId, q.runId, q.tool, q.kind, first_line(prompt, 72))
  end
  lines[#lines + 1] = "answer with: moor answer REQUEST OPTION (or REQUEST --text TEXT)"
  return table.concat(lines, "\n") .. "\n"
end

--- `moor runs [--status S] [--tool NAME] [--limit N] [--json]`; nil and
-- { code, message } for a status moor has not got.
function M.list_runs(as_json, status, tool, limit)
  if not status and not tool and not limit then return inspect.list_runs(as_json) end
  if status and not STATUSES[status] then
    return nil, { code = "bad_request", message = ("--status must be running, waiting, completed, failed or "
      .. "cancelled, not '%s'"):format(status) }
  end
  local rows = store.list_runs_where(status, tool, limit)
  return inspect.format_runs(rows, as_json)
end

-- A span of milliseconds as a person says it: 45s, 12m, 4h, 2h30m, 3d.
local function span(ms)
  local s = math.max(0, (ms + 500) // 1000)
  if s < 60 then return s .. "s" end
  local m = (s + 30) // 60
  if m < 60 then return m .. "m" end
  local h, rm = m // 60, m % 60
  if h < 48 then return rm == 0 and (h .. "h") or (h .. "h" .. rm .. "m") end
  return (h + 12) // 24 .. "d"
end

-- When a timer falls due, in local time: 18:30 today, 18:30:05 within the
-- minute, a date beyond the day.
local function clock(due, now)
  if due - now < 60000 then return os.date("%H:%M:%S", due // 1000) end
  if due - now < 86400000 then return os.date("%H:%M", due // 1000) end
  return os.date("%Y-%m-%d %H:%M", due // 1000)
end

--- What run id (and the runs under it) waits on, one line each, or nil
-- when nothing (it is runnable, or settled): "approval req_x (tool T)",
-- "question req_x", "sign-in req_x", "sleep until 18:30 (4h)", "a webhook
-- delivery (...)", "a hook delivery (...)", "child run run_x (tool)".
function M.run_waiting(id)
  local now = core.now()
  local lines = {}
  for _, row in ipairs(store.pending_inputs_under(id) or {}) do
    local input = store.input(row.request_id)
    local req = input and decode(input.request) or {}
    local kind = kind_of(req)
    local what = ("%s %s"):format(kind, row.request_id)
    if kind == "approval" then what = what .. (" (tool %s)"):format(tostring(req.approval.toolName)) end
    lines[#lines + 1] = what
  end
  for _, t in ipairs(store.pending_timers(id) or {}) do
    local due = (decode(t.payload) or {}).due
    if math.type(due) == "integer" then
      lines[#lines + 1] = ("sleep until %s (%s)"):format(clock(due, now), span(due - now))
    end
  end
  for _, h in ipairs(store.open_hooks(id) or {}) do
    lines[#lines + 1] = h.kind == "webhook" and "a webhook delivery (moor dev serves its URL)"
      or "a hook delivery (POST /v1/hooks/TOKEN to moor dev)"
  end
  for _, c in ipairs(store.running_children(id) or {}) do
    local child = store.run(c.id)
    lines[#lines + 1] = ("child run %s (%s)"):format(c.id, child and child.tool or "?")
  end
  if #lines == 0 then return nil end
  return table.concat(lines, "\n")
end

return M
