--- ask_question: the built-in tool that asks the user a question and
-- waits for the answer: a workflow tool built on ctx.ask (seed 000, "Ask a
-- human"). Its input is ctx.ask's request { prompt, display?, options?,
-- allowFreeform? }; its result is ctx.ask's answer:
-- { status = "answered", optionId?, text? } | { status = "cancelled" }
-- | { status = "unavailable" }. A steering message aborts the call's
-- ctx.abortSignal, which withdraws the question (status "cancelled").
-- Written only on the public API; hide it with agent/tools/ask_question.lua
-- returning moor.disableTool(), or replace it with a tool of the same name.
local moor = require "moor"
local s = moor.schema

local option = s.object {
  id = s.string { minLength = 1, description = "what the answer carries; make it read well on its own" },
  label = s.string { description = "what the person sees" },
  description = s.optional(s.string()),
  style = s.optional(s.enum { "primary", "danger", "default" }),
}

return moor.defineWorkflowTool {
  description = "Ask the user a question and wait for the answer: a confirmation, a choice among "
    .. "options, or free text. Returns { status = \"answered\", optionId?, text? }, or status "
    .. "\"cancelled\" or \"unavailable\".",
  inputSchema = s.object {
    prompt = s.string { minLength = 1, description = "the question" },
    display = s.optional(s.enum { "confirmation", "select", "text" }),
    options = s.optional(s.array(option)),
    allowFreeform = s.optional(s.boolean { description = "accept a typed answer as well as the options" }),
  },
  execute = function(input, ctx)
    return ctx.ask {
      prompt = input.prompt, display = input.display, options = input.options,
      allowFreeform = input.allowFreeform,
    }
  end,
}
