-- Benchmark task tool: returns at once (no waits), or parks on a sleep first.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Benchmark: a task that returns at once, or after a sleep.",
  inputSchema = s.object { n = s.integer(), park = s.optional(s.string()) },
  task = function(input)
    if input.park then moor.sleep(input.park) end
    return { n = input.n }
  end,
}
