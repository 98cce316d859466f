-- Test tool: a durable sleep, then a step that holds the host for a while
-- (os.execute sleep), witnessed before and after.
local moor = require "moor"
local s = moor.schema

local function witness(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:close()
end

local hold = moor.step("hold", function(path, seconds)
  witness(path, "hold:start")
  os.execute("sleep " .. seconds)
  witness(path, "hold")
  return seconds
end)

return moor.defineWorkflowTool {
  description = "Test tool: sleep, then a slow step.",
  inputSchema = s.object { witness = s.string { minLength = 1 }, sleep = s.string(), hold = s.integer { minimum = 0 } },
  execute = function(input)
    moor.sleep(input.sleep)
    return { held = hold(input.witness, input.hold) }
  end,
}
