--- moor__task_cancel: the built-in tool a model calls to stop a task (seed
-- 000 "Run calls as tasks"). It aborts the task's abortSignal; the task's
-- cleanup runs within the cancel grace (30 s) and the task never reports
-- back. A serve task's waiting calls settle as cancelled and the task stays
-- available, idle. Offered to the model only when the agent has a task,
-- serve or background tool; it runs in the session's own run and reads the
-- session's tasks as ctx.session.tasks. Written only on the public API.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Stop one of your tasks. It won't report back.",
  inputSchema = s.object {
    taskId = s.string { minLength = 1, description = "the task's id, from its receipt or the [Tasks] note" },
  },
  execute = function(input, ctx)
    local tasks = ctx.session.tasks
    if not tasks then error(moor.FatalError("moor__task_cancel runs only in a session")) end
    local text, code, message = tasks.cancel(input.taskId)
    if not text then error(moor.FatalError(("%s: %s"):format(code, message))) end
    return text
  end,
}
