--- moor__task_wait: the built-in tool a model calls to wait for its tasks
-- (seed 000 "Run calls as tasks"). It parks the turn until a task has a
-- result (or posts a message), a new message arrives, or timeoutSeconds
-- pass (5 minutes unless given); it returns at once when a result is
-- already waiting, and it never stops a task. The results themselves follow
-- as a <task_result> message at the step boundary after it. Offered to the
-- model only when the agent has a task, serve or background tool; it runs in
-- the session's own run and reads the session's tasks as ctx.session.tasks.
-- Written only on the public API.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Wait until one of your tasks has a result, a new message arrives, or the timeout passes. "
    .. "Returns at once when a result is already waiting. Never stops a task.",
  inputSchema = s.object {
    timeoutSeconds = s.optional(s.number { minimum = 0, maximum = 86400,
      description = "how long to wait at most, in seconds (default 300)" }),
  },
  execute = function(input, ctx)
    local tasks = ctx.session.tasks
    if not tasks then error(moor.FatalError("moor__task_wait runs only in a session")) end
    return tasks.wait(input.timeoutSeconds)
  end,
}
