-- Benchmark tool: ask a question and return the answer (runs park on it).
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Benchmark: park on a question.",
  inputSchema = s.object { n = s.optional(s.integer()) },
  execute = function(input, ctx)
    return ctx.ask {
      prompt = ("Question %d?"):format(input.n or 0),
      options = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } },
    }
  end,
}
