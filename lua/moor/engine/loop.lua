--- The scheduler round (engine.tick): fire due timers, run every ready
-- thread until all are parked, hand replaying runs their next logged
-- result, commit the batch and deliver its results one at a time, then hand
-- committed events to their listeners. Returns when to call it again.
-- A budgeted round (engine.tick(budget_us), moor_tick_budget) stops once
-- its budget is spent, checked after each thread it resumes and each timer
-- it fires, and leaves the rest as it was (the ready queue, results
-- committed but not handed over yet) for the next round to go on with, in
-- the same order an unbudgeted round would have taken. Meanwhile the
-- automatic collector is held; it works at the round's end, in slices, with
-- what is left of the budget (moor.engine.gc).
local core = require "moor.core"
local clock = require "moor.clock"
local conf = require "moor.conf"
local errors = require "moor.errors"
local log = require "moor.engine.log"
local timers = require "moor.engine.timers"
local replay = require "moor.engine.replay"
local evict = require "moor.engine.evict"
local gc = require "moor.engine.gc"
local ops = require "moor.engine.ops"
local sched = require "moor.engine.sched"
local S = require "moor.engine.state"

local M = {}

local now_ms = clock.now -- (the virtual clock of moor.testing when a spec asks for it)
local mono = core.mono   -- (a budget is real time)
local resume_thread = ops.resume_thread

-- core.mono() (µs) at which a budgeted round stops; false while it drains.
local deadline = false

local function spent() return deadline and mono() >= deadline end

-- Run every ready thread until all are parked; false when the budget ran
-- out first (the rest stay queued).
local function drain()
  local runq = S.runq
  while S.qhead <= S.qtail do
    local th = runq[S.qhead]
    runq[S.qhead] = nil
    S.qhead = S.qhead + 1
    resume_thread(th)
    if deadline and S.qhead <= S.qtail and mono() >= deadline then return false end
  end
  S.qhead, S.qtail = 1, 0
  return true
end

-- Commit the batch, then hand its results over one at a time, running to
-- quiescence after each: exactly what replay does with the same log, so the
-- branches wake in the same order (and issue their ops in the same order).
-- Returns whether the commit went through, and whether the budget ran out
-- first: the results not handed over yet then go back to the front of the
-- pending ones (committed already; a failed commit drops those of the runs
-- it takes back, which replay them from their logs).
local function commit_and_deliver()
  if not log.commit() then return false end
  local n = S.npending
  local list = S.pending
  S.pending, S.npending = {}, 0
  for i = 1, n do
    local p = list[i]
    replay.deliver(p[1], p[2], p[3], p[4], p[5])
    if not drain() or (i < n and spent()) then
      if i < n then
        local rest = table.move(list, i + 1, n, 1, {})
        table.move(S.pending, 1, S.npending, n - i + 1, rest)
        S.pending, S.npending = rest, S.npending + n - i
      end
      return true, true
    end
  end
  return true, false
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
-- a time, running to quiescence after each. Returns whether any was handed,
-- and whether the budget ran out first (what is left is held again, in
-- order: after what a run that paused again meanwhile held of the same).
local function deliver_held()
  local holding = S.holding
  if #holding == 0 then return false end
  local ready_runs, keep = {}, {}
  for _, r in ipairs(holding) do
    if r.paused > 0 then keep[#keep + 1] = r else ready_runs[#ready_runs + 1] = r end
  end
  S.holding = keep -- (a run that pauses again while taking them holds the rest anew)
  for j, r in ipairs(ready_runs) do
    local h = r.held
    r.held = nil
    for i = 1, #h do
      local x = h[i]
      replay.deliver(r, x[1], x[2], x[3], x[4])
      if not drain() or ((i < #h or j < #ready_runs) and spent()) then
        local back = {}
        if i < #h then
          if r.held then -- (paused again: it is in S.holding already)
            table.move(h, i + 1, #h, #r.held + 1, r.held)
          else
            r.held = table.move(h, i + 1, #h, 1, {})
            back[1] = r
          end
        end
        table.move(ready_runs, j + 1, #ready_runs, #back + 1, back)
        table.move(S.holding, 1, #S.holding, #back + 1, back)
        S.holding = back
        return true, true
      end
    end
  end
  return #ready_runs > 0, false
end

--- Run everything that is ready; returns ms until the next timer (or nil),
-- the cause when a commit of this round failed (the host retries after a
-- backoff), and whether the store is known to work (a commit succeeded since
-- the last failure). With budget_us (> 0) the round returns once that many
-- microseconds are spent (one thread's resume or one timer's firing past it
-- at most), with 0 as the due time when work was left.
function M.tick(budget_us)
  deadline = budget_us and budget_us > 0 and mono() + budget_us or false
  local gc_end = deadline -- (the collector, held meanwhile, gets the budget's end: moor.engine.gc)
  if deadline then deadline = deadline - gc.hold(budget_us) elseif gc.held then gc.hold() end
  local reloads = log.take_reloads()
  if reloads then replay.reload_discarded(reloads) end
  local now = now_ms()
  evict.round()
  local left = timers.fire_due(now, deadline, mono)
  evict.load_woken() -- (evicted runs a timer or the world reached: replayed from their logs)
  release_paused()
  local failed = false
  while not left do
    if not drain() then left = true; break end
    local held, held_left = deliver_held()
    if held_left then left = true; break end
    local progressed = #S.replaying > 0 and replay.round() or held
    if S.npending > 0 then
      -- A failed commit ends the round: what it took back waits for the retry.
      local ok, rest = commit_and_deliver()
      if not ok then failed = true; break end
      if rest then left = true; break end
    elseif not progressed then
      break
    end
    if spent() then
      left = S.qhead <= S.qtail or S.npending > 0 or #S.holding > 0 or #S.replaying > 0
      break
    end
  end
  local budget_end = deadline -- (the sweep gets what is left of the budget)
  deadline = false
  if not failed and not log.commit() then failed = true end -- run starts and ends, progress, schedules
  log.flush()
  local evict_wait, evict_left = evict.sweep(budget_end, mono) -- (runs parked too long leave memory)
  if gc_end then gc.release(gc_end, mono) end
  local due, t = timers.next_due(), nil -- (t: now, read once and only when needed)
  -- a paused thread, work left, runs reached during the round (loaded at the next): the next tick goes on
  if #S.later > 0 or left or evict_left or evict.pending() then t = now_ms(); due = t end
  if evict_wait and conf.evict_rounds then
    t = t or now_ms()
    if not due or t + evict_wait < due then due = t + evict_wait end
  end
  local retry = evict.retry_at -- (evicted runs the store could not read)
  if retry and (not due or retry < due) then due = retry end
  local store_error = failed and log.store_error or nil
  if due then
    local d = due - (t or now_ms())
    if d < 0 then d = 0 end
    if (S.io_inflight > 0 or S.outside > 0) and d > 1000 then d = 1000 end
    return d, store_error, log.store_error == nil
  end
  -- Steps waiting on I/O: the loop wakes when it completes.
  if S.io_inflight > 0 or S.outside > 0 then return 1000, store_error, log.store_error == nil end
  return nil, store_error, log.store_error == nil
end

return M
