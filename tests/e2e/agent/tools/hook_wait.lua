-- Test tool: create a hook with the given token and return the payload of
-- its first delivery.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Test tool: await one delivery to a hook with a chosen token.",
  inputSchema = s.object { token = s.string { minLength = 1 } },
  execute = function(input)
    local hook = moor.createHook { token = input.token }
    local request = hook:await()
    return { got = request }
  end,
}
