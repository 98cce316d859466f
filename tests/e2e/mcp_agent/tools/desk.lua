-- MCP test tool: a serve tool; called over MCP it is a task of its own, and
-- its first reply is the result.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "A help desk that answers one question per call.",
  inputSchema = s.object { q = s.string() },
  serve = function(receive, ctx)
    while true do
      local call = receive()
      ctx.reply { answer = "you asked: " .. call.input.q }
    end
  end,
}
