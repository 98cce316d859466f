-- Benchmark tool: schema patterns that backtrack catastrophically on a string
-- that almost matches (issue 8), for the figure of the worst validation.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Benchmark: strings checked against hostile patterns.",
  inputSchema = s.object {
    plus = s.optional(s.string { pattern = "^(a+)+$" }),
    slug = s.optional(s.string { pattern = "^([a-z0-9]+-?)*$" }),
  },
  execute = function() return true end,
}
