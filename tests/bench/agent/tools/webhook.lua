-- Benchmark tool: create a webhook and publish its URL as a progress
-- snapshot, then await one delivery and return (mode "once"), take every
-- delivery for the run's lifetime (mode "loop"), or park on a hook that
-- never comes so deliveries queue (mode "queue").
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Benchmark: a webhook that one or many deliveries reach.",
  inputSchema = s.object { mode = s.optional(s.enum { "once", "loop", "queue" }) },
  execute = function(input)
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    local mode = input.mode or "once"
    if mode == "once" then
      local request = wh:await()
      return { bytes = #request.body }
    elseif mode == "loop" then
      local n = 0
      for _ in wh:requests() do n = n + 1 end
      return n
    end
    return moor.createHook():await()
  end,
}
