--- The scheduler round (engine.tick): fire due timers, run every ready
-- thread until all are parked, hand replaying runs their next logged
-- result, commit the batch and deliver its results one at a time, then hand
-- committed events to their listeners. Returns when to call it again.
local core = require "moor.core"
local conf = require "moor.conf"
local errors = require "moor.errors"
local log = require "moor.engine.log"
local timers = require "moor.engine.timers"
local replay = require "moor.engine.replay"
local evict = require "moor.engine.evict"
local ops = require "moor.engine.ops"
local sched = require "moor.engine.sched"
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

-- Threads paused by moor.pause go on now that the loop has turned.
local function release_paused()
  local later = S.later
  if #later == 0 then return end
  S.later = {}
  for _, th in ipairs(later) do
    local r = th.run
    r.paused = r.paused - 1
    r.nready = r.nready - 1
    if th.pause_cancelled then
      th.pause_cancelled = nil
      if not r.settled and not th.dead then sched.ready(th, false, errors.Cancelled("the run was cancelled")) end
    elseif not r.settled and not th.dead then
      sched.ready(th, true)
    end
  end
end

-- Hand runs whose paused threads went on the results they held back, one at
-- a time, running to quiescence after each. Returns whether any was handed.
local function deliver_held()
  local holding = S.holding
  if #holding == 0 then return false end
  local ready_runs, keep = {}, {}
  for _, r in ipairs(holding) do
    if r.paused > 0 then keep[#keep + 1] = r else ready_runs[#ready_runs + 1] = r end
  end
  S.holding = keep -- (a run that pauses again while taking them holds the rest anew)
  for _, r in ipairs(ready_runs) do
    local h = r.held
    r.held = nil
    for i = 1, #h do
      local x = h[i]
      replay.deliver(r, x[1], x[2], x[3], x[4])
      drain()
    end
  end
  return #ready_runs > 0
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
  evict.round(now)
  timers.fire_due(now)
  evict.load_woken() -- (evicted runs a timer or the world reached: replayed from their logs)
  release_paused()
  local failed = false
  while true do
    drain()
    local held = deliver_held()
    local progressed = #S.replaying > 0 and replay.round() or held
    if S.npending > 0 then
      -- A failed commit ends the round: what it took back waits for the retry.
      if not commit_and_deliver() then failed = true; break end
    elseif not progressed then
      break
    end
  end
  if not failed and not log.commit() then failed = true end -- run starts and ends, progress, schedules
  log.flush()
  local evict_due = evict.sweep() -- (runs parked too long leave memory)
  local due = timers.next_due()
  if #S.later > 0 then due = now_ms() end -- a paused thread goes on at the next tick
  ticks = ticks + 1
  if ticks % conf.COMPACT_EVERY == 0 then timers.compact(); due = timers.next_due() end
  if evict.pending() then due = now_ms() end -- (runs reached during the round: loaded at the next)
  if evict_due and conf.evict_rounds and (not due or evict_due < due) then due = evict_due end
  local store_error = failed and log.store_error or nil
  if due then
    local d = due - now_ms()
    if d < 0 then d = 0 end
    if (S.io_inflight > 0 or S.outside > 0) and d > 1000 then d = 1000 end
    return d, store_error, log.store_error == nil
  end
  -- Steps waiting on I/O: the loop wakes when it completes.
  if S.io_inflight > 0 or S.outside > 0 then return 1000, store_error, log.store_error == nil end
  return nil, store_error, log.store_error == nil
end

return M
