-- An eviction round cut short by its time slice asks for the next round at
-- once (due 0) only when the next run in line is due too. And activity times
-- are on eviction's own clock: runs touched while the clock read later than
-- it does now (a wall clock stepped back) still leave memory.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local core = require "moor.core"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

describe("an eviction round cut short", function()
  local saved_idle, saved_slice
  before_each(function() saved_idle, saved_slice = engine.EVICT_IDLE_MS, conf.EVICT_SLICE_US end)
  after_each(function() engine.EVICT_IDLE_MS, conf.EVICT_SLICE_US = saved_idle, saved_slice end)

  it("says more is due only when it is", function()
    local sleeper = support.register("spec_cut", moor.defineWorkflowTool { description = "x",
      inputSchema = s.object {}, execute = function() moor.sleep("1h"); return true end })
    engine.EVICT_IDLE_MS = -1
    local a = assert(t.start(sleeper, {}))
    t.drive(a, 0)
    core.wait(1500)
    local b = assert(t.start(sleeper, {}))
    t.drive(b, 0)
    engine.EVICT_IDLE_MS = 1000 -- a is due (idle 1.5 s), b is not
    conf.EVICT_SLICE_US = 0 -- (one eviction a round: runs other specs left parked go first)
    local due
    for _ = 1, 10000 do
      due = engine.tick()
      if engine.evicted(a) then break end
    end
    assert.is_true(engine.evicted(a))
    assert.is_false(engine.evicted(b))
    assert.is_true(due > 0, "the round that evicted the last due run asked for the next at once")
    engine.EVICT_IDLE_MS = -1
    t.cancel(b)
    t.drive(b)
  end)

  it("evicts a run last active while the clock read a day later than it does now", function()
    local sleeper = support.register("spec_back", moor.defineWorkflowTool { description = "x",
      inputSchema = s.object {}, execute = function() moor.sleep("30d"); return true end })
    engine.EVICT_IDLE_MS = -1
    t.useVirtualClock(core.now() + 86400000) -- (a day ahead, then back to the wall clock)
    local id
    local ok, err = pcall(function()
      id = assert(t.start(sleeper, {}))
      t.drive(id, 0)
    end)
    t.useRealClock()
    assert(ok, err)
    engine.EVICT_IDLE_MS = 0
    for _ = 1, 10000 do
      engine.tick()
      if engine.evicted(id) then break end
    end
    assert.is_true(engine.evicted(id), "a run active 'in the future' stayed in memory")
    engine.EVICT_IDLE_MS = -1
    t.cancel(id)
    t.drive(id)
    assert.are.equal("cancelled", engine.run_status(id))
  end)
end)
