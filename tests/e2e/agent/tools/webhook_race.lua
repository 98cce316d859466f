-- Test tool: a webhook's await races a timer (moor.async(webhook.await,
-- webhook)); the timer wins, a step records it, then a durable sleep gives
-- a test time to kill the host before the end.
local moor = require "moor"
local s = moor.schema

local after = moor.step("after", function(path, winner)
  local f = assert(io.open(path, "a"))
  f:write("after " .. winner, "\n")
  f:close()
  return winner
end)

return moor.defineWorkflowTool {
  description = "Test tool: race a webhook against a timer, then sleep.",
  inputSchema = s.object { witness = s.string { minLength = 1 }, timer = s.string(), sleep = s.string() },
  execute = function(input)
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    local _, winner = moor.race { moor.async(wh.await, wh), moor.timer(input.timer) }
    local w = after(input.witness, winner)
    moor.sleep(input.sleep)
    return { winner = w }
  end,
}
