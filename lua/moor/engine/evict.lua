--- Eviction: parked runs leave memory (issue 13; DESIGN.md "Durability").
-- A run that is parked (nothing ready, no step on I/O, not replaying, not
-- paused, not cancelling, no sign-in or harness turn under way) for longer
-- than conf.EVICT_IDLE_MS, or any parked run beyond conf.MAX_PARKED_LIVE runs
-- in memory (the least recently active first), is dropped from memory as
-- t.restart drops it: its coroutines go, its row and log stay. What is left
-- is an entry in S.evicted and, when it waits on a timer, one timer entry
-- (its earliest, reused: the others are neutralised).
--
-- It is loaded again from its log (replay.load_run), as after a restart,
-- when something reaches it: its timer falls due, an answer or a cancel or
-- steer is appended to its log (waits.answer, runs' signal_run), a delivery
-- is queued for one of its hooks (waits' insert_delivery: hooks, webhooks, a
-- session's messages, a task's report), a child it waits on settles (runs'
-- notify_parent). Those call S.wake(id), which queues the run; the queue is
-- loaded at the start of the next scheduler round, after the commit that
-- made the cause durable, so the replay reads it from the log or the store.
-- Both paths give the same events and result (tests/lua/evict_spec.lua).
local clock = require "moor.clock"
local core = require "moor.core"
local conf = require "moor.conf"
local store = require "moor.store"
local log = require "moor.engine.log"
local timers = require "moor.engine.timers"
local runs = require "moor.engine.runs"
local replay = require "moor.engine.replay"
local S = require "moor.engine.state"

local M = {}

local now_ms = clock.now
local mono_us = core.mono

-- Runs in memory, least recently active first: a list linked through side
-- tables (a run's own table keeps its size), touched at every resume.
local nxt, prv, act = {}, {}, {}

-- Activity times are on a clock of their own: the virtual clock while it is
-- on (specs), else the monotonic one in ms, so a wall clock stepped back (an
-- NTP correction) never leaves runs looking active in the future and
-- eviction stalled until it catches up. Timers stay on the engine's clock.
-- A switch of clock (clock.gen; several between two reads are one) counts
-- every run in memory active now.
local gen_last = nil
local round_at = 0 -- eclock ms: the scheduler round's start (a resume between rounds uses the last)
local stamped = false -- round_at read this round (an idle round reads no clock for it)
local function eclock()
  local t = clock.is_virtual() and now_ms() or mono_us() // 1000
  local g = clock.gen
  if g ~= gen_last then
    if gen_last ~= nil then
      for r in pairs(act) do act[r] = t end
      round_at, stamped = t, true
    end
    gen_last = g
  end
  return t
end
local head, tail = nil, nil

local queue, queued = {}, {} -- evicted runs to load at the next round, in the order asked
-- Evicted runs the store could not read: tried again a second later (at
-- once, every tick returned 0 and a host spun while the store was failing);
-- M.retry_at (ms, the engine's clock, or false) is when, read by loop.lua.
local retry = {}
M.retry_at = false
local evictions, wakes = 0, 0


local function unlink(r)
  local p, n = prv[r], nxt[r]
  if p then nxt[p] = n else head = n end
  if n then prv[n] = p else tail = p end
  prv[r], nxt[r], act[r] = nil, nil, nil
end

local function push_tail(r, t)
  if tail then nxt[tail] = r; prv[r] = tail else head = r end
  tail = r
  act[r] = t
end

--- Run r was resumed (it is active now): last in the list.
function M.touch(r)
  if not stamped then round_at, stamped = eclock(), true end
  if tail == r then act[r] = round_at; return end
  if act[r] ~= nil then unlink(r) end
  push_tail(r, round_at)
end

--- Run r left memory (it ended, or is to be loaded again): out of the list.
function M.forget(r)
  if act[r] ~= nil then unlink(r) end
end

local function retry_later(id)
  if queued[id] then return end
  queued[id] = true
  retry[#retry + 1] = id
  M.retry_at = M.retry_at or now_ms() + 1000
end

-- Load evicted run id from its log now. Returns whether it was loaded.
local function load(id)
  if S.runs[id] then S.unevict(id); return false end
  local row = store.run(id)
  if not (row and row.status == "running") then S.unevict(id); return false end
  local r = replay.load_run(row) -- (it takes the run out of S.evicted)
  if not r then retry_later(id); return false end -- the store cannot read it now: tried a second later
  wakes = wakes + 1
  return true
end

--- Evicted run id is reached: load it from its log now (a no-op for a run
-- that is not evicted: in memory, ended, or driven by nobody here). Its body
-- replays in the scheduler round, as a run loaded after a restart does; what
-- reached it is in its log already (an answer, a cancel: the caller wakes it
-- after that commit) or is read live by the replayed body (a delivery, a
-- settled child, a timer that fell due).
function M.wake(id)
  if S.evicted[id] == nil then return end
  load(id)
end

--- Whether run id is evicted now (out of memory, to be loaded when reached).
function M.is_evicted(id) return S.evicted[id] ~= nil end

--- Load the runs that could not be loaded when reached (loop.tick, after the
-- due timers fired). Returns whether any was loaded.
function M.load_woken()
  if M.retry_at and now_ms() >= M.retry_at then
    for _, id in ipairs(retry) do queue[#queue + 1] = id end
    retry, M.retry_at = {}, false
  end
  if not queue[1] then return false end
  local ids = queue
  queue, queued = {}, {}
  local loaded = false
  for _, id in ipairs(ids) do
    if S.evicted[id] ~= nil and load(id) then loaded = true end
  end
  return loaded
end

-- Whether run r holds nothing that its log cannot give back, and no timer of
-- it falls due now. Returns the earliest pending timer entry (or false) too.
local function evictable(r, now)
  if r.settled or r.nready ~= 0 or r.cancelling or r.held or (r.paused and r.paused > 0)
      or r.rpos <= r.nreplay or r.deferred[1] or (r.io and r.io > 0) or S.pinned[r.id]
      or (r.auths and next(r.auths)) or next(r.waiters) == nil then
    return false
  end
  local first = timers.earliest(r)
  if first and first.due <= now then return false end -- it fires at the next round
  return true, first or false
end

local function evict(r, first)
  local id = r.id
  if first then
    -- The earliest timer entry stays, handed to a stand-in for the run (its
    -- others leave the heap as it is dropped): it wakes the run when it
    -- falls due.
    local wake = first
    timers.rehome(first, { settled = false, id = id }, function()
      if S.evicted[id] == wake then M.wake(id) end
    end)
    S.evicted[id] = wake
  else
    S.evicted[id] = true
  end
  S.nevicted = S.nevicted + 1
  evictions = evictions + 1
  runs.end_run(r, "running") -- (as t.restart drops a run: no cleanup runs, nobody is told)
end

--- At the end of a round: evict what has been parked too long, or the
-- least recently active parked runs while more than MAX_PARKED_LIVE are in
-- memory; at most EVICT_BATCH runs looked at, and none after mono() (µs)
-- reaches budget_end (a budgeted tick's end; else EVICT_SLICE_US from the
-- first eviction) once one was evicted (an eviction costs 5-12 µs: 1,024 in
-- one tick paused a host for 5-50 ms), or after every 32nd busy run looked
-- at. Returns the ms from now until the next eviction falls due, or nil;
-- and true when it evicted and stopped (its slice or EVICT_BATCH spent) with
-- more due now (the next round goes on at once).
function M.sweep(budget_end, mono)
  local idle, max = conf.EVICT_IDLE_MS, conf.MAX_PARKED_LIVE
  if not idle or idle < 0 or not head then return nil end
  if log.store_error or S.npending > 0 then return nil end -- (a failed commit: the round is retried)
  local enow = eclock()
  if S.nruns <= max and act[head] + idle > enow then -- (an idle round: nothing due, one clock read)
    local wait = act[head] + idle - enow
    return wait > 1000 and wait or 1000
  end
  local now = now_ms() -- (for the runs' timers)
  local budget = conf.EVICT_BATCH
  local r = head
  local evicted, cut, until_us, busy = 0, false, budget_end, 0
  while r and budget > 0 do
    if S.nruns <= max and act[r] + idle > enow then break end
    budget = budget - 1
    local n = nxt[r]
    local ok, first = evictable(r, now)
    local over
    if ok then
      until_us = until_us or mono() + conf.EVICT_SLICE_US
      evict(r, first)
      evicted = evicted + 1
      over = mono() >= until_us
    else
      -- Busy, or it will be soon: looked at again once it has been idle as long.
      unlink(r)
      push_tail(r, enow)
      busy = busy + 1
      if busy % 32 == 0 then -- (looking is cheap, but not free: the slice bounds it too, read now and then)
        until_us = until_us or mono() + conf.EVICT_SLICE_US
        over = mono() >= until_us
      end
    end
    if n == nil or act[n] == nil then break end
    r = n
    -- (more due: the next in line is; said only after an eviction, so that runs
    -- none of which can leave never make rounds follow at once)
    if over or budget == 0 then
      cut = evicted > 0 and (S.nruns > max or act[r] + idle <= enow)
      break
    end
  end
  if cut then return 0, true end
  if not head then return nil end
  if S.nruns > max and evicted > 0 then return 0 end
  -- (at most a round a second for this: a head that cannot leave yet is looked at again then)
  local wait = act[head] + idle - enow
  return wait > 1000 and wait or 1000
end

--- A scheduler round starts.
function M.round() stamped = false end

--- Whether evicted runs wait to be loaded again (the next round comes soon).
function M.pending() return queue[1] ~= nil end

--- engine.stats(): t with evicted (runs out of memory now), evictions and wakes (since the start).
function M.stats(t)
  t.evicted, t.evictions, t.wakes = S.nevicted, evictions, wakes
  return t
end

--- engine.outside(delta, run_id): outside work that reports into run_id
-- (a harness agent's turn) starts or ends; the run stays in memory meanwhile.
function M.outside(delta, run_id)
  S.outside = S.outside + delta
  if run_id then
    local n = (S.pinned[run_id] or 0) + delta
    S.pinned[run_id] = n > 0 and n or nil
  end
end

S.wake, S.forget = M.wake, M.forget

return M
