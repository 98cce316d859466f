--- Timers: a binary heap by due time (ms). Durable sleeps, step retries and
-- cancel grace periods all wait here; a timer of a run that has settled is
-- skipped when it surfaces and swept now and then (compact).
local M = {}

local heap, nheap = {}, 0

local function push(t)
  nheap = nheap + 1
  local i = nheap
  heap[i] = t
  while i > 1 do
    local p = i // 2
    if heap[p].due <= t.due then break end
    heap[i], heap[p] = heap[p], t
    i = p
  end
end

local function pop()
  local top = heap[1]
  local last = heap[nheap]
  heap[nheap] = nil
  nheap = nheap - 1
  if nheap > 0 then
    local i = 1
    heap[1] = last
    while true do
      local l, s = i * 2, i
      if l <= nheap and heap[l].due < heap[s].due then s = l end
      if l + 1 <= nheap and heap[l + 1].due < heap[s].due then s = l + 1 end
      if s == i then break end
      heap[i], heap[s] = heap[s], heap[i]
      i = s
    end
  end
  return top
end

--- Call fire() at due (ms) unless run r has settled by then. The run keeps
-- its timers (r.timers, fired ones pruned now and then) for eviction.
function M.add(r, due, fire)
  local t = { due = due, run = r, fire = fire }
  push(t)
  local ts = r.timers
  if not ts then
    r.timers = { t }
  else
    local n = #ts
    if n >= 8 then
      local k = 0
      for i = 1, n do
        local x = ts[i]
        ts[i] = nil
        if not x.fired then k = k + 1; ts[k] = x end
      end
      n = k
    end
    ts[n + 1] = t
  end
  return t
end

--- Fire every timer due at or before now.
function M.fire_due(now)
  while nheap > 0 and heap[1].due <= now do
    local t = pop()
    t.fired = true
    if not t.run.settled then t.fire() end
  end
end

--- Drop settled runs' timers from the top; the due time of the next one, or nil.
function M.next_due()
  while nheap > 0 and heap[1].run.settled do pop() end
  return nheap > 0 and heap[1].due or nil
end

--- Timers of settled runs (a lost race against a long timer, a cancel's
-- grace) are dropped now and then rather than kept until they fall due.
function M.compact()
  local keep = {}
  for i = 1, nheap do
    if not heap[i].run.settled then keep[#keep + 1] = heap[i] end
  end
  if #keep == nheap then return end
  heap, nheap = {}, 0
  for _, t in ipairs(keep) do push(t) end
end

function M.count() return nheap end

return M
