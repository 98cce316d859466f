-- Embedding example tool: n trivial durable steps, then an optional sleep.
local moor = require "moor"
local s = moor.schema

local inc = moor.step("inc", function(x) return x + 1 end)

return moor.defineWorkflowTool {
  description = "n trivial steps, then optionally sleep for `nap` (a duration).",
  inputSchema = s.object { n = s.integer { minimum = 0 }, nap = s.optional(s.string()) },
  execute = function(input)
    local x = 0
    for _ = 1, input.n do x = inc(x) end
    if input.nap then moor.sleep(input.nap) end
    return x
  end,
}
