--- The collector under a budgeted round (engine.tick(budget_us),
-- moor_tick_budget; issue 13: a budgeted tick never exceeds its budget by
-- more than one step's work). Left to itself, Lua's incremental collector
-- works wherever an allocation finds it in debt, in steps of some 8 KiB of
-- work: a cycle's sweep, its finalizers and its atomic phase then took a
-- millisecond or more inside one step's resume. A budgeted round holds the
-- automatic collector for its length (collectgarbage "stop") and gives it its
-- work at the end, in slices of 2^conf.GC_STEPSIZE bytes' worth
-- (collectgarbage "step"), while what is left of the budget lasts; while a
-- cycle is due or under way, the round keeps conf.GC_SHARE of its budget for
-- them. Then the collector runs again as the round found it, with the pause
-- it would have had (the Lua module shares the program's state: what the
-- program allocates between ticks is collected as before).
--
-- A cycle is due once the heap is conf.GC_PAUSE percent of what it was after
-- the last one (Lua's own pause); past conf.GC_LIMIT percent (budgets always
-- spent, a program allocating between ticks) the round finishes the cycle
-- whatever its budget, so memory stays bounded. A slice is indivisible when
-- it meets the atomic phase (it goes over every live coroutine: 0.3-0.6 µs a
-- run kept in memory; conf.MAX_PARKED_LIVE bounds them) or one large table.
-- An unbudgeted round, and a program that stopped the collector itself or
-- runs the generational one, leave it alone.
local conf = require "moor.conf"

local M = {}

M.held = false -- this round stopped the collector (it was running); loop.lua reads it

local gc = collectgarbage
local off = false     -- the program runs the generational collector: left alone
local checked = false -- the collector's mode was looked at
local open = false    -- a cycle the rounds' slices began is not over yet
local base = false    -- KiB in use after the last cycle
local ended = false   -- a cycle ended (wherever) since base was taken
local stats = { cycles = 0, forced = 0, slices = 0 }

-- A table whose finalizer runs at the end of every cycle (the automatic
-- collector's too), so the next round notes what the heap came down to
-- (collectgarbage answers nothing inside a finalizer); it arms the next.
local function arm()
  setmetatable({}, { __gc = function()
    ended, open = true, false
    stats.cycles = stats.cycles + 1
    arm()
  end })
end
arm()

--- At a round's start: with a budget, hold the automatic collector. Returns
-- the µs of the budget kept for the collector (0 when no cycle is due).
function M.hold(budget_us)
  if M.held then M.held = false; gc("restart") end -- (the last round raised before its end)
  if not budget_us or off or not gc("isrunning") then return 0 end
  if not checked then
    checked = true
    if gc("incremental", 0, 0, 0) == "generational" then off = true; gc("generational"); return 0 end
  end
  gc("stop")
  M.held = true
  local kib = gc("count")
  if not base then open = true end -- (the first: a cycle of the slices' own gives the heap's size)
  if ended or not base then base, ended = kib, false end
  if open or kib * 100 >= base * conf.GC_PAUSE then return math.floor(budget_us * conf.GC_SHARE) end
  return 0
end

-- One slice of the cycle; true when it ended it.
local function slice()
  open = true
  stats.slices = stats.slices + 1
  if gc("step", 0) then
    open, base, ended = false, gc("count"), false
    return true
  end
  return false
end

--- At the round's end (deadline: the core.mono() µs at which its budget
-- ends): the collector's slices, then it runs again.
function M.release(deadline, mono)
  if not M.held then return end
  M.held = false
  local kib = gc("count")
  if kib * 100 >= base * conf.GC_LIMIT then
    stats.forced = stats.forced + 1
    for _ = 1, 1e7 do if slice() then break end end -- (in the automatic collector's steps; far fewer)
  elseif open or kib * 100 >= base * conf.GC_PAUSE then
    gc("incremental", 0, 0, conf.GC_STEPSIZE)
    while mono() < deadline and not slice() do end
    gc("incremental", 0, 0, conf.GC_STEPSIZE_AUTO)
  end
  gc("restart") -- (which leaves it in debt: it would take a step at the next allocation)
  if open then  -- mid-cycle: its next step after one step's worth of allocation, as Lua paces it
    gc("step", -(1 << math.max(conf.GC_STEPSIZE_AUTO - 10, 0)))
  else          -- else what is left of the pause (collectgarbage("step", -n) takes n KiB of debt off)
    local left = base * conf.GC_PAUSE / 100 - gc("count")
    if left >= 1 then gc("step", -(left // 1)) end
  end
end

--- What the collector did: cycles ended (by any collector), cycles rounds
-- finished past their budget (GC_LIMIT), and slices the rounds ran.
function M.stats() return { cycles = stats.cycles, forced = stats.forced, slices = stats.slices } end

return M
