-- MCP test tool: a workflow of three steps, a progress snapshot after each
-- (and a short durable sleep, so each snapshot reaches the client on its own:
-- the SDK client drops a notification that shares a read with the result).
local moor = require "moor"
local s = moor.schema

local work = moor.step("work", function(i) return i * 10 end)

return moor.defineWorkflowTool {
  description = "Count to three in durable steps, reporting progress.",
  inputSchema = s.object {},
  destructiveHint = false,
  execute = function()
    local total = 0
    for i = 1, 3 do
      total = total + work(i)
      coroutine.yield { done = i, of = 3 }
      moor.sleep("200ms")
    end
    return { total = total }
  end,
}
