-- Seed 000's approve-with-deadline-and-escalation, as a task: the same body
-- as `deploy` (agent/tools/deploy.lua), defined with task instead of
-- execute. The model gets a receipt at once and the conversation goes on
-- while the one question stays open (4 h, then on-call is paged, then 20 h
-- more: 24 h in all); a steering message never withdraws it, and the result
-- arrives later as a <task_result> message.
local moor = require "moor"
local deploy = require "tools.deploy" -- (the agent folder is on the module path)

return moor.defineWorkflowTool {
  description = "Deploy a service to production in the background: a person approves the plan (the question "
    .. "stays open up to 24 hours) while the conversation continues.",
  inputSchema = deploy.inputSchema,
  task = deploy.execute,
}
