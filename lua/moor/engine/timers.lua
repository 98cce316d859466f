--- Timers: a binary heap by due time (ms). Durable sleeps, step retries and
-- cancel grace periods all wait here. A timer is dead once its run has
-- settled (a lost race against a long timer, a cancel's grace) or it was
-- cancelled (timers.cancel); dead timers never fire and leave the heap
-- lazily, with no pass over the whole heap on the tick path: when they
-- surface at the top, and by sweep, which each round examines a bounded
-- number of entries (conf.TIMER_SWEEP) from a cursor that walks the heap.
local conf = require "moor.conf"

local M = {}

local heap, nheap = {}, 0
local cursor = 1  -- where the next sweep goes on
local swept = 0   -- entries the last sweep examined (engine.stats)

local function dead(t) return t.cancelled or t.run.settled end

local function sift_up(i)
  local t = heap[i]
  while i > 1 do
    local p = i // 2
    if heap[p].due <= t.due then break end
    heap[i] = heap[p]
    i = p
  end
  heap[i] = t
  return i
end

local function sift_down(i)
  local t = heap[i]
  while true do
    local l, s, sd = i * 2, i, t.due
    if l <= nheap and heap[l].due < sd then s, sd = l, heap[l].due end
    if l + 1 <= nheap and heap[l + 1].due < sd then s = l + 1 end
    if s == i then break end
    heap[i] = heap[s]
    i = s
  end
  heap[i] = t
end

local function push(t)
  nheap = nheap + 1
  heap[nheap] = t
  sift_up(nheap)
end

-- Take entry i out of the heap (the last one fills its place).
local function remove_at(i)
  local last = heap[nheap]
  heap[nheap] = nil
  nheap = nheap - 1
  if i > nheap then return end
  heap[i] = last
  if sift_up(i) == i then sift_down(i) end
end

local function pop()
  local top = heap[1]
  remove_at(1)
  return top
end

--- Call fire() at due (ms) unless run r has settled by then (or the timer
-- was cancelled). Returns the timer.
function M.add(r, due, fire)
  local t = { due = due, run = r, fire = fire }
  push(t)
  return t
end

--- Timer t never fires; it leaves the heap lazily, as a settled run's do.
function M.cancel(t) t.cancelled = true end

--- Fire every timer due at or before now; with a deadline (clock() µs,
-- clock = core.mono), stop once it has passed: after a timer fired, or
-- every conf.TIMER_SWEEP dead ones dropped. What is left fires next round.
-- Returns whether a due timer was left for later.
function M.fire_due(now, deadline, clock)
  local skipped = 0
  while nheap > 0 and heap[1].due <= now do
    local t = pop()
    if not dead(t) then
      t.fire()
      if deadline and clock() >= deadline then return nheap > 0 and heap[1].due <= now end
    elseif deadline then
      skipped = skipped + 1
      if skipped % conf.TIMER_SWEEP == 0 and clock() >= deadline then
        return nheap > 0 and heap[1].due <= now
      end
    end
  end
  return false
end

--- The due time of the next timer, or nil. Dead timers at the top are
-- dropped first, at most conf.TIMER_SWEEP of them: beyond that the due
-- time of a dead one may be answered (the round it wakes for drops more).
function M.next_due()
  local n = 0
  while nheap > 0 and dead(heap[1]) and n < conf.TIMER_SWEEP do
    pop()
    n = n + 1
  end
  return nheap > 0 and heap[1].due or nil
end

--- Examine up to k entries (default conf.TIMER_SWEEP) from the cursor and
-- drop the dead ones; the cursor wraps at the end of the heap. An entry
-- moved by a removal may be passed over once, and is met on a later pass.
function M.sweep(k)
  k = k or conf.TIMER_SWEEP
  local n = 0
  if cursor > nheap then cursor = 1 end
  while n < k and cursor <= nheap do
    n = n + 1
    if dead(heap[cursor]) then remove_at(cursor) else cursor = cursor + 1 end
  end
  swept = n
  return n
end

--- Timers of runs that have not settled (not cancelled): an exact count, a
-- pass over the heap without allocating (engine.stats; not the tick path).
function M.count()
  local n = 0
  for i = 1, nheap do
    if not dead(heap[i]) then n = n + 1 end
  end
  return n
end

--- Entries in the heap, dead ones included; what the last sweep examined.
function M.size() return nheap, swept end

--- Whether the heap property holds (for specs): true, or false and the
-- index of an entry due before its parent.
function M.valid()
  for i = 2, nheap do
    if heap[i].due < heap[i // 2].due then return false, i end
  end
  return true
end

return M
