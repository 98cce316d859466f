-- Test tool: a step races a timer. The step's first attempt fails with a
-- long retryAfter, so the timer wins; a restart must replay the same winner.
local moor = require "moor"
local s = moor.schema

local slow = moor.step("slow", function(path)
  local f = assert(io.open(path, "a"))
  f:write("slow\n")
  f:close()
  if moor.stepInfo().attempt == 1 then
    error(moor.RetryableError { message = "not yet", retryAfter = "5s" })
  end
  return "step"
end)

return moor.defineWorkflowTool {
  description = "Test tool: race a step against a timer.",
  inputSchema = s.object { witness = s.string(), timer = s.string(), after = s.string() },
  execute = function(input)
    local value, winner = moor.race { moor.async(slow, input.witness), moor.timer(input.timer) }
    moor.sleep(input.after)
    return { winner = winner, value = value }
  end,
}
