--- The task argument of a task's body (seed 003 §3.1; part of the authoring
-- API): `task = { taskId, postMessage }`, the third argument of a `task`
-- body and of a background tool's execute, and `ctx.task` in a `serve`
-- body. task.postMessage(msg) only makes a tagged value and does no I/O, so
-- it is safe in a replayed body; `coroutine.yield(task.postMessage(msg))`
-- hands it to the engine, which posts it to the parent session once
-- (engine/ops.lua, engine/steps.lua). Any other yield is progress.
local engine = require "moor.engine"

local M = {}

local MESSAGE = engine.TASK_MESSAGE

--- A task's task argument.
function M.new(task_id)
  local task = { taskId = task_id }
  --- task.postMessage(msg) (or task:postMessage(msg)) -> a message to yield.
  function task.postMessage(a, b)
    local msg = a
    if a == task then msg = b end
    if type(msg) ~= "string" or msg == "" then
      error("task.postMessage needs a message (a non-empty string)", 2)
    end
    return setmetatable({ message = msg, taskId = task_id }, MESSAGE)
  end
  return task
end

--- Is v a task message (what task.postMessage returns)?
function M.is_message(v) return getmetatable(v) == MESSAGE end

return M
