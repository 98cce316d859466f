--- Events as lines for a terminal (moor chat in process, and the text
-- event stream a moor chat reads from a running moor dev).
local json = require "moor.json"

local M = {}

local encode, decode = json.encode, json.decode

--- One readable line for event (kind, payload) of run_id, or nil.
function M.format_event(run_id, kind, payload)
  local p = decode(payload) or {}
  if kind == "message.completed" then return "agent: " .. tostring(p.text) end
  -- streamed text, as it is (moor chat prints it on the open "agent: " line)
  if kind == "message.delta" then return type(p.text) == "string" and p.text or nil end
  if kind == "message.restarted" then return "  (the model's answer was cut off; it is asked again)" end
  if kind == "action.started" then
    return ("  -> %s %s"):format(p.toolName, encode(p.input))
  elseif kind == "action.result" then
    if p.denied then return ("  <- %s: denied"):format(p.toolName) end
    if p.isError then return ("  <- %s failed: %s"):format(p.toolName, tostring(p.error)) end
    local out = encode(p.output) or ""
    if #out > 200 then out = out:sub(1, 200) .. "..." end
    return ("  <- %s: %s"):format(p.toolName, out)
  elseif kind == "action.partial" then
    return ("  .. %s"):format(encode(p.output))
  elseif kind == "turn.failed" then
    return ("turn failed: %s"):format(p.error and p.error.message or "?")
  elseif kind == "agent.started" then
    return ("  (agent %s joined)"):format(p.name)
  elseif kind == "task.started" then
    return ("  [task %s (%s) started]"):format(p.taskId, p.name)
  elseif kind == "task.settled" then
    return ("  [task %s %s]"):format(p.taskId, p.status)
  elseif kind == "task.message" then
    return ("  [task %s: %s]"):format(p.taskId, tostring(p.text))
  elseif kind == "turn.held" then
    return "  (waiting for tasks: " .. table.concat(p.taskIds or {}, ", ") .. ")"
  elseif kind == "authorization.required" and type(p.authorization) == "table" then
    return ("[sign in to %s: open %s]"):format(tostring(p.name), tostring(p.authorization.url))
  elseif kind == "authorization.completed" then
    return ("[sign-in to %s: %s]"):format(tostring(p.connection), tostring(p.outcome))
  elseif kind == "input.resolved" and p.outcome == "cancelled" then
    return "  (question withdrawn)"
  end
  return nil, run_id
end

return M
