--- The scheduler round (engine.tick): fire due timers, run every ready
-- thread until all are parked, hand replaying runs their next logged
-- result, commit the batch and deliver its results one at a time, then hand
-- committed events to their listeners. Returns when to call it again.
local core = require "moor.core"
local conf = require "moor.conf"
local log = require "moor.engine.log"
local timers = require "moor.engine.timers"
local replay = require "moor.engine.replay"
local ops = require "moor.engine.ops"
local S = require "moor.engine.state"

local M = {}

local now_ms = core.now
local resume_thread = ops.resume_thread

-- Run every ready thread until all are parked.
local function drain()
  local runq = S.runq
  while S.qhead <= S.qtail do
    local th = runq[S.qhead]
    runq[S.qhead] = nil
    S.qhead = S.qhead + 1
    resume_thread(th)
  end
  S.qhead, S.qtail = 1, 0
end

-- Commit the batch, then hand its results over one at a time, running to
-- quiescence after each: exactly what replay does with the same log, so the
-- branches wake in the same order (and issue their ops in the same order).
local function commit_and_deliver()
  if not log.commit() then return false end
  local n = S.npending
  local list = S.pending
  S.pending, S.npending = {}, 0
  for i = 1, n do
    local p = list[i]
    replay.deliver(p[1], p[2], p[3], p[4], p[5])
    drain()
  end
  return true
end

local ticks = 0

--- Run everything that is ready; returns ms until the next timer (or nil),
-- the cause when a commit of this round failed (the host retries after a
-- backoff), and whether the store is known to work (a commit succeeded since
-- the last failure).
function M.tick()
  local reloads = log.take_reloads()
  if reloads then replay.reload_discarded(reloads) end
  local now = now_ms()
  timers.fire_due(now)
  local failed = false
  while true do
    drain()
    local progressed = #S.replaying > 0 and replay.round()
    if S.npending > 0 then
      -- A failed commit ends the round: what it took back waits for the retry.
      if not commit_and_deliver() then failed = true; break end
    elseif not progressed then
      break
    end
  end
  if not failed and not log.commit() then failed = true end -- run starts and ends, progress, schedules
  log.flush()
  local due = timers.next_due()
  ticks = ticks + 1
  if ticks % conf.COMPACT_EVERY == 0 then timers.compact(); due = timers.next_due() end
  local store_error = failed and log.store_error or nil
  if due then
    local d = due - now_ms()
    if d < 0 then d = 0 end
    if S.io_inflight > 0 and d > 1000 then d = 1000 end
    return d, store_error, log.store_error == nil
  end
  -- Steps waiting on I/O: the loop wakes when it completes.
  if S.io_inflight > 0 then return 1000, store_error, log.store_error == nil end
  return nil, store_error, log.store_error == nil
end

return M
