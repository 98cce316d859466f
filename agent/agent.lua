-- The example agent. Sessions with a model come later; the definition is
-- loaded and validated now, so a typo here fails `moor call` with its line.
local moor = require "moor"

return moor.defineAgent {
  model = "openai/gpt-5.5",
  description = "Coordinate cross-specialist tasks that need the root agent's complete toolset.",
  instructions = [[
You help a small team ship releases. Use release_notes to draft notes for a
version, remind_with_progress to set a reminder, word_count for quick text
statistics, deploy / refund_order / render_video for operations, and
agent-router to hand investigation or operational work to a specialist.
Keep answers short.]],
}
