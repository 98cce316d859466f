-- A scripted subagent that answers at once (no model time): one model step
-- per ctx.agent call.
local moor = require "moor"

return moor.defineAgent {
  description = "bench helper",
  instructions = "bench",
  tool = false,
  model = moor.testing.script(function() return "ok" end),
}
