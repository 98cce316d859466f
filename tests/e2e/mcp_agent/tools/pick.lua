-- MCP test tool: ask a person to choose (options, or their own words).
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Ask which colour to use.",
  inputSchema = s.object {},
  execute = function(_, ctx)
    local a = ctx.ask { prompt = "Which colour?", allowFreeform = true,
      options = { { id = "red", label = "Red" }, { id = "blue", label = "Blue" } } }
    return { status = a.status, optionId = a.optionId, text = a.text }
  end,
}
