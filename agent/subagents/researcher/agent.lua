-- A hidden specialist: the root model does not see it as a tool; the
-- agent-router tool reaches it through ctx.agent.
local moor = require "moor"

return moor.defineAgent {
  description = "Investigation, analysis and explanation: read the project, compare options, explain findings",
  model = "openai/gpt-5.5",
  instructions = "You research questions about the project and answer with short, sourced findings.",
  tool = false,
}
