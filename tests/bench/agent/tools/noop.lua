-- Benchmark tool: does nothing, so a turn measures the host's own overhead.
local moor = require "moor"

return moor.defineTool {
  description = "Do nothing.",
  inputSchema = moor.schema.object { n = moor.schema.integer() },
  execute = function(input) return { n = input.n } end,
}
