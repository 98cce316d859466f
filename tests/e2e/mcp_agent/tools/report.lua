-- MCP test tool: a task (an MCP task over the tasks extension): a step,
-- then a question, then the result; hold = true parks it on a webhook instead.
local moor = require "moor"
local s = moor.schema

local gather = moor.step("gather", function(n) return n * 2 end)

return moor.defineWorkflowTool {
  description = "Write a report in the background.",
  inputSchema = s.object { n = s.integer(), hold = s.optional(s.boolean()) },
  outputSchema = s.object { value = s.integer(), format = s.string() },
  task = function(input, ctx)
    local v = gather(input.n)
    if input.hold then moor.createWebhook():await() end
    local a = ctx.ask { prompt = "Which format?",
      options = { { id = "pdf", label = "PDF" }, { id = "html", label = "HTML" } } }
    return { value = v, format = a.optionId or a.status }
  end,
}
