-- MCP test tool: always fails.
local moor = require "moor"
local s = moor.schema

return moor.defineTool {
  description = "Fail on purpose.",
  inputSchema = s.object {},
  execute = function() error("it broke on purpose") end,
}
