-- A hidden specialist for changes; it has the root's tools (no tools/ folder).
local moor = require "moor"

return moor.defineAgent {
  description = "Execution and operational changes: deploy services, refund orders, render videos",
  model = "openai/gpt-5.5",
  instructions = "You carry out operational changes with the tools you have, asking before anything risky.",
  tool = false,
}
