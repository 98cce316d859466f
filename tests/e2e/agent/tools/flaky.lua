-- Test tool for the CLI: fails fatally, or reports progress.
local moor = require "moor"
local s = moor.schema

local fatal = moor.step("charge", function() error(moor.FatalError("card declined")) end)

return moor.defineWorkflowTool {
  description = "Test tool: fails or reports progress.",
  inputSchema = s.object { mode = s.enum { "fatal", "progress" } },
  execute = function(input)
    if input.mode == "fatal" then return fatal() end
    for n = 1, 3 do coroutine.yield { n = n } end
    return { done = true, n = 3 }
  end,
}
