-- The baseline of the workflow figures: an authored task tool making n
-- ctx.agent calls to the helper one after another, as a workflow program's
-- calls are made but with no sandbox, no recorded call step and no race
-- (the difference is the workflow tool's own share of a call).
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Benchmark: n ctx.agent calls to the helper subagent, one after another.",
  inputSchema = s.object { n = s.integer() },
  task = function(input, ctx)
    local ok = 0
    for i = 1, input.n do
      local r = ctx.agent("helper"):send("m" .. i):result()
      if r.message == "ok" then ok = ok + 1 end
    end
    return { output = "", result = ok }
  end,
}
