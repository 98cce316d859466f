--- sleep: the built-in tool that waits, durably, for a number of seconds
-- (seed 000, "Stop early for a new message"). It races a durable timer
-- against ctx.abortSignal, so a steering message stops it early: it returns
-- { waitedSeconds = seconds } when the time is up, { interrupted = true }
-- when the signal aborted first. While it waits it holds no compute and no
-- polling: one timer, recorded in the run's log, survives a restart.
-- Written only on the public API; hide it with agent/tools/sleep.lua
-- returning moor.disableTool(), or replace it with a tool of the same name.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Wait for the given number of seconds, then continue. A new message from the user "
    .. "stops the wait early.",
  inputSchema = s.object {
    seconds = s.number { minimum = 0, description = "how long to wait, in seconds" },
  },
  execute = function(input, ctx)
    local elapsed = moor.timer(math.floor(input.seconds * 1000))
    local _, which = moor.race { elapsed, ctx.abortSignal }
    if which == 1 then return { waitedSeconds = input.seconds } end
    return { interrupted = true }
  end,
}
