-- The example agent. Sessions with a model come later; the definition is
-- loaded and validated now, so a typo here fails `moor call` with its line.
local moor = require "moor"

return moor.defineAgent {
  model = "openai/gpt-5.5",
  description = "A release helper: drafts release notes, sets reminders, counts words.",
  instructions = [[
You help a small team ship releases. Use release_notes to draft notes for a
version, remind_with_progress to set a reminder, and word_count for quick text
statistics. Keep answers short.]],
}
