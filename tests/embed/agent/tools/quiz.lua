-- Embedding example tool: ask a question, sleep a little, return the answer.
local moor = require "moor"
local s = moor.schema

local note = moor.step("note", function(answer) return "answered " .. answer end)

return moor.defineWorkflowTool {
  description = "Ask which way, then nap and say what was answered.",
  inputSchema = s.object { n = s.integer() },
  execute = function(input, ctx)
    local a = ctx.ask {
      prompt = ("Question %d: left or right?"):format(input.n),
      options = { { id = "left", label = "Left" }, { id = "right", label = "Right" } },
    }
    moor.sleep("30ms")
    return note(a.optionId or a.status)
  end,
}
