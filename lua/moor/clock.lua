--- The one clock the engine reads (ms since the epoch): the wall clock
-- (core.now), or a virtual one that moor.testing switches on for a spec
-- (t.useVirtualClock) and moves only when told (t.advance). Every time the
-- engine records or waits on goes through clock.now: events' times (so a
-- run's r.now, which os.time and os.date read in a body), timers' due
-- times, step retries' backoff, run and question timestamps.
local core = require "moor.core"

local M = {}

local wall = core.now
local virtual = false -- ms, or false: the wall clock

-- Bumped at every switch (to the virtual clock, back, or to another start):
-- what keeps times of its own (eviction's activity times) reads it.
M.gen = 0

--- Now, in ms since the epoch.
function M.now()
  if virtual then return virtual end
  return wall()
end

--- Whether the virtual clock is on.
function M.is_virtual() return virtual ~= false end

--- Switch to the virtual clock, starting at start_ms (default: the wall clock's now).
function M.use_virtual(start_ms)
  virtual = math.tointeger(start_ms) or wall()
  M.gen = M.gen + 1
end

--- Set the virtual clock to ms (never backwards).
function M.set(ms)
  if not virtual then error("the virtual clock is off", 2) end
  if ms > virtual then virtual = ms end
end

--- Back to the wall clock.
function M.use_wall()
  virtual = false
  M.gen = M.gen + 1
end

return M
