--- Every text the model reads about tasks (issue 9), word for word as eve's:
-- receipts (task ids are the engine's: engine.task_id), the <task_result> message with its shared budget,
-- moor__task_wait's and moor__task_cancel's answers, the TOO_MANY_TASKS and
-- UNKNOWN_TASK messages, the [Tasks] context note and what a serve tool adds
-- to its input schema and description. Pure functions of their arguments: no
-- engine, no clock, no I/O. Tables use named fields (taskId, tool, status,
-- body), as the task.* events do.
local M = {}

local type = type
local tostring = tostring
local pairs = pairs
local ipairs = ipairs
local concat = table.concat
local floor = math.floor
local tonumber = tonumber
local getmetatable = getmetatable
local setmetatable = setmetatable

M.MAX_BYTES = 50 * 1024   -- one task.result message, tags included
M.MAX_LINES = 2000
M.MAX_IDLE = 10           -- idle tasks listed by the [Tasks] note
M.TRUNCATED = "[truncated]"
M.SERVE_SENTENCE = "To send more input to a task this tool started, pass its taskId;"
  .. " leave taskId out to start a new task."

--- The tool result of a task call. serve_tool (the tool's name) adds how to
-- send the task another message.
function M.receipt(task_id, serve_tool)
  local s = ("Started task %s. Its result will arrive in a <task_result> message."):format(task_id)
  if serve_tool then
    s = s .. (" To send it another message, call %s again with taskId %s."):format(serve_tool, task_id)
  end
  return s
end

--- The tool result of a call that names a serve task by taskId.
function M.sent(task_id)
  return ("Sent to task %s. Its reply will arrive in a <task_result> message."):format(task_id)
end

--- A body cannot close its block: every "</task_result" (any case) becomes
-- "<\/task_result" (its case kept).
function M.escape(body)
  return (body:gsub("</([Tt][Aa][Ss][Kk]_[Rr][Ee][Ss][Uu][Ll][Tt])", "<\\/%1"))
end

local ENTITIES = { ['&'] = "&amp;", ['"'] = "&quot;", ['<'] = "&lt;", ['>'] = "&gt;" }

local function attr(v)
  return (tostring(v):gsub('[&"<>]', ENTITIES))
end

local function count_lines(s)
  local _, n = s:gsub("\n", "")
  return n + 1
end

-- The longest prefix of s with at most max_bytes bytes and max_lines lines,
-- never ending inside a UTF-8 sequence.
local function cut(s, max_bytes, max_lines)
  local n = max_bytes < #s and max_bytes or #s
  local pos, seen = 0, 0
  while true do
    pos = s:find("\n", pos + 1, true)
    if not pos or pos > n then break end
    seen = seen + 1
    if seen == max_lines then n = pos - 1; break end
  end
  -- back off over continuation bytes (10xxxxxx) so byte n+1 starts a character
  local back = 0
  while n > 0 and back < 3 do
    local b = s:byte(n + 1)
    if not b or b < 0x80 or b >= 0xC0 then break end
    n, back = n - 1, back + 1
  end
  return s:sub(1, n)
end

--- A task's message (task.postMessage) within the same budget as a
-- result message: cut and ended with "[truncated]" when it passes it.
function M.clip(s)
  if #s <= M.MAX_BYTES and count_lines(s) <= M.MAX_LINES then return s end
  return cut(s, M.MAX_BYTES - #M.TRUNCATED - 1, M.MAX_LINES - 1) .. "\n" .. M.TRUNCATED
end

--- moor__task_cancel's UNKNOWN_TASK: no such unfinished task in the session.
function M.unknown_cancel(task_id)
  return ("no unfinished task '%s' in this session; the [Tasks] note lists the working ones"):format(task_id)
end

--- One user-role text for settled tasks: one <task_result> block per result
-- ({ taskId, tool, status = "completed"|"failed", body }), joined by "\n".
-- The message shares one budget of MAX_BYTES and MAX_LINES, tags included:
-- a body that would pass what is left is cut and ends with a line
-- "[truncated]"; once the budget is gone later blocks keep their tags and
-- carry only "[truncated]". Every result appears exactly once.
function M.result_message(results)
  local blocks = {}
  local bytes, lines = M.MAX_BYTES, M.MAX_LINES
  local marker = M.TRUNCATED
  for i, r in ipairs(results) do
    local head = ('<task_result id="%s" tool="%s" status="%s">\n'):format(
      attr(r.taskId), attr(r.tool), attr(r.status))
    local tail = "\n</task_result>"
    local sep = i > 1 and 1 or 0
    local body = M.escape(r.body == nil and "" or tostring(r.body))
    local room_b = bytes - sep - #head - #tail   -- for the body
    local room_l = lines - 2                     -- head and tail lines
    if #body > room_b or count_lines(body) > room_l then
      -- keep what fits before "\n[truncated]"
      local keep = ""
      if room_b > #marker + 1 and room_l > 1 then
        keep = cut(body, room_b - #marker - 1, room_l - 1)
      end
      body = keep == "" and marker or keep .. "\n" .. marker
    end
    local block = head .. body .. tail
    blocks[i] = block
    bytes = bytes - sep - #block
    lines = lines - count_lines(block)
  end
  return concat(blocks, "\n")
end

--- ms as "40s", "5m", "1m30s", "2h", "1h5m" (whole seconds, rounded down;
-- zero parts dropped; under a second is "0s").
function M.duration(ms)
  local s = floor((tonumber(ms) or 0) / 1000)
  if s <= 0 then return "0s" end
  local h = s // 3600
  local m = (s % 3600) // 60
  s = s % 60
  local out = {}
  if h > 0 then out[#out + 1] = ("%dh"):format(h) end
  if m > 0 then out[#out + 1] = ("%dm"):format(m) end
  if s > 0 then out[#out + 1] = ("%ds"):format(s) end
  return concat(out)
end

--- "1 task is still working: a." / "2 tasks are still working: a, b." /
-- "No other tasks are working."
function M.working_list(ids)
  local n = #ids
  if n == 0 then return "No other tasks are working." end
  if n == 1 then return ("1 task is still working: %s."):format(ids[1]) end
  return ("%d tasks are still working: %s."):format(n, concat(ids, ", "))
end

-- "a", "a and b", "a, b and c"
local function and_list(items)
  local n = #items
  if n == 1 then return items[1] end
  return concat(items, ", ", 1, n - 1) .. " and " .. items[n]
end

-- the working list after "; " (a sentence that starts with a letter goes lowercase)
local function after_semicolon(ids)
  return (M.working_list(ids):gsub("^%u", string.lower))
end

--- moor__task_wait's answer. reason is "results", "timeout", "message" or
-- "none"; t = { ready = { { taskId, status }, ... }, working = { ids },
-- elapsed_ms }.
function M.wait_text(reason, t)
  t = t or {}
  local working = t.working or {}
  if reason == "results" then
    local ready = {}
    for i, r in ipairs(t.ready or {}) do
      ready[i] = ("%s %s"):format(r.taskId, r.status)
    end
    local follows = #ready == 1 and "its result follows" or "their results follow"
    return ("%s; %s. %s"):format(and_list(ready), follows, M.working_list(working))
  elseif reason == "timeout" then
    return ("Stopped waiting after %s; %s"):format(M.duration(t.elapsed_ms), after_semicolon(working))
  elseif reason == "message" then
    return ("A new message arrived, so the wait ended after %s; %s"):format(
      M.duration(t.elapsed_ms), after_semicolon(working))
  elseif reason == "none" then
    return "No tasks are working."
  end
  error(("unknown wait reason %q: expected \"results\", \"timeout\", \"message\" or \"none\""):format(
    tostring(reason)), 2)
end

--- moor__task_cancel's answer: had_work says whether a stretch was stopped.
function M.cancel_text(task_id, had_work)
  if had_work then
    return ("Stopped %s; it won't report back."):format(task_id)
  end
  return ("%s had no work to stop."):format(task_id)
end

--- The message of the TOO_MANY_TASKS error.
function M.too_many(limit)
  return ("%d tasks are already working in this session, the most it allows; wait for one with"
    .. " moor__task_wait or stop one with moor__task_cancel, then call again."):format(limit)
end

--- The message of the UNKNOWN_TASK error.
function M.unknown_task(task_id, tool)
  return ("no unfinished task '%s' of %s: taskId must name a task this tool started that has not"
    .. " finished; call %s without taskId to start a new task."):format(task_id, tool, tool)
end

local function named(list, max)
  local out = {}
  for i, t in ipairs(list) do
    if max and i > max then break end
    out[i] = ("%s (%s)"):format(t.taskId, t.tool)
  end
  return concat(out, ", ")
end

--- The [Tasks] context note. working and idle are lists of { taskId, tool };
-- idle comes most recently used first and at most MAX_IDLE of it is listed.
function M.tasks_note(working, idle)
  working, idle = working or {}, idle or {}
  if #working == 0 and #idle == 0 then return "[Tasks]\nNo tasks are working." end
  local out = { "[Tasks]" }
  if #working > 0 then out[#out + 1] = "Working: " .. named(working) end
  if #idle > 0 then out[#out + 1] = "Idle, resumable with taskId: " .. named(idle, M.MAX_IDLE) end
  return concat(out, "\n")
end

-- A copy that shares no table with v (metatables, such as an array mark, kept).
local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for k, x in pairs(v) do c[deep_copy(k)] = deep_copy(x) end
  return setmetatable(c, getmetatable(v))
end

--- A serve tool's model-facing input schema: a deep copy of the object
-- schema with an optional taskId property added. The argument is untouched.
-- (A schema that declares its own taskId is refused at load, by the caller.)
function M.serve_input_schema(schema)
  local s = deep_copy(schema or { type = "object" })
  s.properties = s.properties or {}
  s.properties.taskId = {
    type = "string",
    description = "The id of a task this tool started (from its receipt), to send it this call.",
  }
  return s
end

--- A serve tool's model-facing description.
function M.serve_description(desc)
  if desc == nil or desc == "" then return M.SERVE_SENTENCE end
  return desc .. " " .. M.SERVE_SENTENCE
end

return M
