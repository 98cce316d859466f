--- Timers: a binary heap by due time (ms). Durable sleeps, step retries and
-- cancel grace periods all wait here. A timer leaves the heap when it fires,
-- when it is cancelled (timers.cancel), and when its run settles: dropping a
-- settled run (state.lua's S.drop) takes its timers out, each in O(log n)
-- (every entry knows its place in the heap), so that no round ever passes
-- over the heap and a settled run's memory is not held until its timers
-- fall due. A timer whose run settled without being dropped is skipped when
-- it surfaces.
local M = {}

local heap, nheap = {}, 0
-- run -> its timer, or a list of its timers when it has several
local of_run = {}

local function dead(t) return t.run.settled end

local function sift_up(i)
  local t = heap[i]
  local due = t.due
  while i > 1 do
    local p = i // 2
    local pt = heap[p]
    if pt.due <= due then break end
    heap[i] = pt
    pt.i = i
    i = p
  end
  heap[i] = t
  t.i = i
  return i
end

local function sift_down(i)
  local t = heap[i]
  local due = t.due
  while true do
    local l, s, sd = i * 2, i, due
    if l <= nheap and heap[l].due < sd then s, sd = l, heap[l].due end
    if l + 1 <= nheap and heap[l + 1].due < sd then s = l + 1 end
    if s == i then break end
    local st = heap[s]
    heap[i] = st
    st.i = i
    i = s
  end
  heap[i] = t
  t.i = i
end

-- Take entry i out of the heap (the last one fills its place).
local function remove_at(i)
  local t = heap[i]
  t.i = nil
  local last = heap[nheap]
  heap[nheap] = nil
  nheap = nheap - 1
  if i > nheap then return t end
  heap[i] = last
  last.i = i
  if sift_up(i) == i then sift_down(i) end
  return t
end

-- Forget t in its run's entry of of_run.
local function unlink(t)
  local r = t.run
  local e = of_run[r]
  if e == t then
    of_run[r] = nil
  elseif e then
    for k = 1, #e do
      if e[k] == t then
        table.remove(e, k)
        break
      end
    end
    if #e == 1 then of_run[r] = e[1] elseif #e == 0 then of_run[r] = nil end
  end
end

-- Note t in r's entry of of_run.
local function link(r, t)
  local e = of_run[r]
  if not e then
    of_run[r] = t
  elseif e.due then
    of_run[r] = { e, t }
  else
    e[#e + 1] = t
  end
end

local function pop()
  local top = remove_at(1)
  unlink(top)
  return top
end

--- Call fire() at due (ms) unless run r has settled by then (or the timer
-- was cancelled). Returns the timer.
function M.add(r, due, fire)
  local t = { due = due, run = r, fire = fire }
  nheap = nheap + 1
  heap[nheap] = t
  sift_up(nheap)
  link(r, t)
  return t
end

--- Timer t never fires: it leaves the heap now.
function M.cancel(t)
  if t.i then
    remove_at(t.i)
    unlink(t)
  end
end

--- Run r's earliest pending timer, or nil (eviction reads it: engine/evict.lua).
function M.earliest(r)
  local e = of_run[r]
  if not e or e.due then return e end
  local first = e[1]
  for k = 2, #e do
    if e[k].due < first.due then first = e[k] end
  end
  return first
end

--- Timer t, still pending, now belongs to owner and calls fire (an evicted
-- run's stand-in takes over its earliest timer: no new entry, no removal).
function M.rehome(t, owner, fire)
  unlink(t)
  t.run, t.fire = owner, fire
  link(owner, t)
end

--- Take run r's timers out of the heap (r settled: they would never fire).
function M.drop_run(r)
  local e = of_run[r]
  if not e then return end
  of_run[r] = nil
  if e.due then
    if e.i then remove_at(e.i) end
  else
    for k = 1, #e do
      if e[k].i then remove_at(e[k].i) end
    end
  end
end

--- Fire every timer due at or before now; with a deadline (clock() µs,
-- clock = core.mono), stop once it has passed after a timer fired. What is
-- left fires next round. Returns whether a due timer was left for later.
function M.fire_due(now, deadline, clock)
  while nheap > 0 and heap[1].due <= now do
    local t = pop()
    if not dead(t) then
      t.fire()
      if deadline and clock() >= deadline then return nheap > 0 and heap[1].due <= now end
    end
  end
  return false
end

--- Drop timers of settled runs from the top; the due time of the next one, or nil.
function M.next_due()
  while nheap > 0 and dead(heap[1]) do pop() end
  return nheap > 0 and heap[1].due or nil
end

--- Timers of runs that have not settled: an exact count, a pass over the
-- heap (engine.stats; never on the tick path).
function M.count()
  local n = 0
  for i = 1, nheap do
    if not dead(heap[i]) then n = n + 1 end
  end
  return n
end

--- Entries in the heap (timers of settled runs not dropped yet included).
function M.size() return nheap end

--- Whether the heap holds together (for specs): true, or false and the
-- index of an entry due before its parent or not knowing its place.
function M.valid()
  for i = 1, nheap do
    local t = heap[i]
    if t.i ~= i or (i > 1 and t.due < heap[i // 2].due) then return false, i end
  end
  return true
end

return M
