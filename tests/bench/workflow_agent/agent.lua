-- Benchmark agent for the workflow tool (issue 10): the root agent only
-- declares the subagent a program may call; the figures call the tool with
-- moor_call (no root model involved).
local moor = require "moor"

return moor.defineAgent {
  instructions = "bench",
  model = moor.testing.script(function() return "ok" end),
}
