--- Read-only views of runs for the API and the CLI: a run's row as the API
-- shows it, its status and outcome, the list of runs and a run's log as
-- `moor runs` and `moor logs` print them.
local store = require "moor.store"
local json = require "moor.json"
local S = require "moor.engine.state"

local M = {}

local encode, decode = json.encode, json.decode

local function iso(ms)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", ms // 1000)
end

--- Events of a run as a list of { seq, op, kind, name, payload, time } tables.
M.events = store.events

--- A run's status and its result or error as JSON text, or nil and a message.
function M.run_info(id)
  local row = store.run(id)
  if not row then return nil, ("unknown run '%s'"):format(id) end
  return row.status, row.result or row.error or "null"
end

--- A run's status (from memory when it is held there), or nil.
function M.run_status(id)
  local r = S.runs[id]
  if r then return r.status end
  local row = store.run(id)
  return row and row.status
end

--- A run's row as the API shows it, or nil.
function M.run_details(id)
  local row = store.run(id)
  if not row then return nil end
  return {
    id = row.id, tool = row.tool, status = row.status, callId = row.call_id,
    result = row.result and decode(row.result) or nil, error = row.error and decode(row.error) or nil,
    started = iso(row.started), updated = iso(row.updated), cancelRequested = row.cancel_requested == 1,
  }
end

--- Rows { id, tool, status, started, updated } as `moor runs` prints them.
function M.format_runs(rows, as_json)
  if as_json then
    for _, row in ipairs(rows) do
      row.started, row.updated = iso(row.started), iso(row.updated)
    end
    return encode(json.array(rows)) .. "\n"
  end
  local out = { ("%-32s %-24s %-10s %-20s %s"):format("ID", "TOOL", "STATUS", "STARTED", "UPDATED") }
  for _, row in ipairs(rows) do
    out[#out + 1] = ("%-32s %-24s %-10s %-20s %s"):format(row.id, row.tool, row.status,
      iso(row.started), iso(row.updated))
  end
  return table.concat(out, "\n") .. "\n"
end

--- `moor runs [--json]`.
function M.list_runs(as_json) return M.format_runs(store.list_runs(), as_json) end

--- `moor logs RUN [--json]`, or nil and a message for an unknown run.
function M.list_events(as_json, id)
  if not store.run(id) then
    return nil, ("unknown run '%s'; 'moor runs' lists the runs"):format(id)
  end
  local events = store.events(id)
  if as_json then
    for _, ev in ipairs(events) do
      ev.payload = decode(ev.payload)
      ev.time = iso(ev.time)
    end
    return encode(json.array(events)) .. "\n"
  end
  local out = {}
  for _, ev in ipairs(events) do
    out[#out + 1] = ("%4d  %s  %-6s %-16s %-18s %s"):format(ev.seq, iso(ev.time),
      ev.op and ("op " .. ev.op) or "", ev.kind, ev.name or "", ev.payload)
  end
  return table.concat(out, "\n") .. "\n"
end

return M
