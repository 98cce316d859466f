-- Three steps, each appending a line to a witness file, with a durable sleep
-- between the second and the third. `hold` makes the second step slow, so a
-- test can kill the process inside it.
local moor = require "moor"
local s = moor.schema

local function witness(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:close()
end

local one = moor.step("one", function(path) witness(path, "one"); return 1 end)
local two = moor.step("two", function(path, hold)
  if hold > 0 then
    witness(path, "two:start")
    os.execute("sleep " .. hold)
  end
  witness(path, "two")
  return 2
end)
local three = moor.step("three", function(path) witness(path, "three"); return 3 end)

return moor.defineWorkflowTool {
  description = "Test tool: three witnessed steps with a sleep before the third.",
  inputSchema = s.object {
    witness = s.string { minLength = 1 },
    sleep = s.string(),
    hold = s.optional(s.integer { minimum = 0 }),
  },
  execute = function(input)
    local a = one(input.witness)
    local b = two(input.witness, input.hold or 0)
    moor.sleep(input.sleep)
    local c = three(input.witness)
    return { sum = a + b + c, steps = { a, b, c } }
  end,
}
