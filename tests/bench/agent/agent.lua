-- Benchmark agent: a scripted model (no model time) that calls one tool and
-- then answers, so a turn is two model steps and one tool call.
local moor = require "moor"

return moor.defineAgent {
  instructions = "bench",
  model = moor.testing.script(function(turn)
    if turn.n % 2 == 1 then return { toolCalls = { { name = "noop", input = { n = turn.n } } } } end
    return "ok"
  end),
}
