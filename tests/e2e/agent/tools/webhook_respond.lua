-- Test tool: a webhook whose respondWith carries the headers given in the
-- input (so a test can try CR/LF in a header or the content type); the URL
-- goes out as progress, then the run awaits `deliveries` requests.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Test tool: a webhook answering with chosen respondWith headers.",
  inputSchema = s.object {
    headers = s.any(),
    status = s.optional(s.integer { minimum = 200, maximum = 599 }),
    deliveries = s.optional(s.integer { minimum = 1, maximum = 10 }),
  },
  execute = function(input)
    local wh = moor.createWebhook {
      respondWith = { status = input.status or 200, headers = input.headers, body = "ok" },
    }
    coroutine.yield { url = wh.url }
    for _ = 1, input.deliveries or 1 do wh:await() end
    return { done = true }
  end,
}
