-- Benchmark tool: n trivial durable steps, then an optional long sleep (so a
-- run can be left parked with a long log, for the replay figure).
local moor = require "moor"
local s = moor.schema

local inc = moor.step("inc", function(x) return x + 1 end)

return moor.defineWorkflowTool {
  description = "Benchmark: n trivial steps, then optionally park.",
  inputSchema = s.object { n = s.integer { minimum = 0 }, park = s.optional(s.string()) },
  execute = function(input)
    local x = 0
    for _ = 1, input.n do x = inc(x) end
    if input.park then moor.sleep(input.park) end
    return x
  end,
}
