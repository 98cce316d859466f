-- Issue 13: a budgeted tick never exceeds its budget by more than one step's
-- work, and Lua's collector was what made its long blocks (a cycle's end in
-- the middle of a step). A budgeted round holds the automatic collector and
-- gives it its work at the round's end, in slices (lua/moor/engine/gc.lua);
-- memory stays bounded when the budget is always spent; unbudgeted rounds,
-- and a program that stopped its collector, keep it as it was.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local gc = require "moor.engine.gc"
local t = moor.testing
local s = moor.schema

local inside = false      -- a step is making its garbage
local running_in_step = {} -- collectgarbage("isrunning") as each step saw it

-- Each step makes some 100 KiB of garbage (a hundred 1 KiB strings).
local churn = moor.step("gc_churn", function(x)
  inside = true
  running_in_step[#running_in_step + 1] = collectgarbage("isrunning")
  local junk = {}
  for k = 1, 100 do junk[k] = ("x"):rep(1000 + k) end
  inside = false
  return x + #junk - 99
end)

local function churn_tool(n)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = function()
    local x = 0
    for _ = 1, n do x = churn(x) end
    return x
  end }
end

-- Counts the collector's cycles (a finalizer runs at the end of each), by
-- whether one ended while a step was making its garbage.
local function watch_cycles()
  local seen = { inside = 0, outside = 0, on = true }
  local function arm()
    setmetatable({}, { __gc = function()
      if not seen.on then return end
      if inside then seen.inside = seen.inside + 1 else seen.outside = seen.outside + 1 end
      arm()
    end })
  end
  arm()
  return seen
end

-- Budgeted ticks until the run ends, then (with seen) idle ones until two
-- cycles have ended; returns the ticks taken and the most KiB in use seen
-- after one.
local function drive_budgeted(id, budget_us, seen)
  local ticks, most = 0, 0
  local function tick()
    engine.tick(budget_us)
    ticks = ticks + 1
    local kib = collectgarbage("count")
    if kib > most then most = kib end
  end
  while engine.run_status(id) == "running" and ticks < 200000 do tick() end
  for _ = 1, 20000 do
    if not seen or seen.outside + seen.inside >= 2 then break end
    tick()
  end
  return ticks, most
end

local TUNABLES = { "GC_PAUSE", "GC_LIMIT", "GC_SHARE", "GC_STEPSIZE", "GC_STEPSIZE_AUTO" }

describe("the collector under a budgeted tick", function()
  local saved
  before_each(function()
    saved = {}
    for _, k in ipairs(TUNABLES) do saved[k] = conf[k] end
    running_in_step = {}
    collectgarbage("collect")
  end)
  after_each(function()
    for _, k in ipairs(TUNABLES) do conf[k] = saved[k] end
    collectgarbage("restart") -- (a failed spec must not leave it stopped)
  end)

  it("is held while a budgeted round runs steps, and runs again after it", function()
    local id = assert(t.start(churn_tool(200)))
    local ticks = drive_budgeted(id, 2000)
    assert.are.equal("completed", engine.run_status(id))
    assert.is_true(ticks > 1, tostring(ticks))
    assert.are.equal(200, #running_in_step)
    for i, r in ipairs(running_in_step) do assert.is_false(r, "the collector ran automatically in step " .. i) end
    assert.is_true(collectgarbage("isrunning"))
  end)

  it("ends its cycles in the rounds' slices, never inside a step", function()
    local seen = watch_cycles()
    local id = assert(t.start(churn_tool(2000))) -- some 200 MiB of garbage
    drive_budgeted(id, 2000, seen)
    seen.on = false
    assert.are.equal("completed", engine.run_status(id))
    assert.are.equal(0, seen.inside, "cycles that ended inside a step")
    assert.is_true(seen.outside >= 2, "cycles ended: " .. seen.outside)
  end)

  it("keeps memory bounded when every round spends its whole budget", function()
    -- No share of the budget for the collector: only the limit makes it work.
    conf.GC_SHARE, conf.GC_PAUSE, conf.GC_LIMIT = 0, 150, 200
    local live = collectgarbage("count")
    local seen = watch_cycles()
    local id = assert(t.start(churn_tool(2000)))
    local _, most = drive_budgeted(id, 500, seen)
    seen.on = false
    assert.are.equal("completed", engine.run_status(id))
    assert.is_true(seen.outside >= 2, "cycles ended: " .. seen.outside)
    assert.are.equal(0, seen.inside)
    -- (a round allocates what its steps make in 0.5 ms: far less than 16 MiB)
    assert.is_true(most < live * 2 + 16 * 1024,
      ("%.0f KiB in use at most, from %.0f KiB live"):format(most, live))
  end)

  it("is left as it is by unbudgeted rounds", function()
    local slices = gc.stats().slices
    local id = assert(t.start(churn_tool(300)))
    engine.tick() -- drains: the automatic collector works inside the steps, as before
    assert.are.equal("completed", engine.run_status(id))
    assert.are.equal(300, #running_in_step)
    for i, r in ipairs(running_in_step) do assert.is_true(r, "the collector was held in step " .. i) end
    assert.are.equal(slices, gc.stats().slices)
  end)

  it("stays stopped through budgeted rounds when the program stopped it", function()
    collectgarbage("stop")
    local before = collectgarbage("count")
    local id = assert(t.start(churn_tool(50)))
    drive_budgeted(id, 2000)
    assert.are.equal("completed", engine.run_status(id))
    assert.is_false(collectgarbage("isrunning"))
    assert.is_true(collectgarbage("count") > before + 50 * 100) -- (nothing collected the steps' garbage)
    collectgarbage("restart")
  end)
end)
