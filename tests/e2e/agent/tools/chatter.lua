-- Test tool: a stream of events for a while: `rounds` rounds of `burst`
-- small steps, each round followed by a short durable sleep, so SSE clients
-- see events flow for about rounds × pause.
local moor = require "moor"
local s = moor.schema

local tick = moor.step("tick", function(i) return i end)

return moor.defineWorkflowTool {
  description = "Test tool: many small steps with short sleeps between bursts.",
  inputSchema = s.object {
    rounds = s.integer { minimum = 1, maximum = 1000 },
    burst = s.optional(s.integer { minimum = 1, maximum = 100 }),
    pause = s.optional(s.string()),
  },
  execute = function(input)
    local n = 0
    for _ = 1, input.rounds do
      for _ = 1, input.burst or 10 do n = tick(n + 1) end
      moor.sleep(input.pause or "20ms")
    end
    return { ticks = n }
  end,
}
