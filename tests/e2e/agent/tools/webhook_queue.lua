-- Test tool: create a webhook, publish its URL as a progress snapshot, then
-- park on a hook that never comes, so deliveries to the webhook queue up.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Test tool: a webhook whose run waits elsewhere.",
  inputSchema = s.object {},
  execute = function()
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    return moor.createHook():await()
  end,
}
