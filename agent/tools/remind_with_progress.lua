-- Seed 000's remind_with_progress: a progress snapshot, then a durable sleep.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Schedule a reminder: reports that it is scheduled, then waits durably and returns the note.",
  inputSchema = s.object {
    note = s.string { minLength = 1 },
    delay = s.string { description = "how long to wait, as \"30s\", \"20m\" or \"4h\"" },
  },
  execute = function(input)
    coroutine.yield { status = "scheduled", note = input.note, delay = input.delay }
    moor.sleep(input.delay)
    return { status = "reminded", note = input.note, at = os.date("!%Y-%m-%dT%H:%M:%SZ") }
  end,
}
