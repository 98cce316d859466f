-- An eviction round cut short by its time slice asks for the next round at
-- once (due 0) only when the next run in line is due too. And activity times
-- are on eviction's own clock: runs touched while the clock read later than
-- it does now (a wall clock stepped back) still leave memory.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local core = require "moor.core"
local store = require "moor.store"
local S = require "moor.engine.state"
local t = moor.testing
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

-- A workflow tool that sleeps for d: a fresh name each time.
local function sleeper_for(d)
  return support.workflow("spec_sleeper", function() moor.sleep(d); return true end)
end

describe("an eviction round cut short", function()
  local saved_idle, saved_slice, saved_batch
  before_each(function() saved_idle, saved_slice, saved_batch = engine.EVICT_IDLE_MS, conf.EVICT_SLICE_US,
    conf.EVICT_BATCH end)
  after_each(function() engine.EVICT_IDLE_MS, conf.EVICT_SLICE_US, conf.EVICT_BATCH = saved_idle, saved_slice,
    saved_batch end)

  it("says more is due only when it is", function()
    local sleeper = sleeper_for("1h")
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

  it("says more is due when EVICT_BATCH ran out with due runs left (not a second later)", function()
    local sleeper = sleeper_for("1h")
    engine.EVICT_IDLE_MS = -1
    local ids = {}
    for i = 1, 5 do
      ids[i] = assert(t.start(sleeper, {}))
      t.drive(ids[i], 0)
    end
    engine.EVICT_IDLE_MS = 0
    conf.EVICT_SLICE_US = 1000000 -- (only the batch stops a round)
    conf.EVICT_BATCH = 2
    local dues = {}
    for _ = 1, 100 do
      dues[#dues + 1] = engine.tick()
      local all = true
      for i = 1, 5 do all = all and engine.evicted(ids[i]) end
      if all then break end
    end
    for i = 1, 5 do assert.is_true(engine.evicted(ids[i]), "run " .. i) end
    for i = 1, #dues - 1 do assert.are.equal(0, dues[i], "round " .. i .. " of " .. #dues) end
    engine.EVICT_IDLE_MS = -1
    for i = 1, 5 do
      t.cancel(ids[i])
      t.drive(ids[i])
    end
  end)

  it("evicts runs after clock switches no sweep saw (ahead, wall, back to now): a restarted virtual clock too",
    function()
    local sleeper = sleeper_for("30d")
    engine.EVICT_IDLE_MS = -1
    local ok, err = pcall(function()
      t.useVirtualClock(core.now() + 86400000)
      local a = assert(t.start(sleeper, {}))
      t.drive(a, 0)
      t.useRealClock()
      t.useVirtualClock(core.now()) -- (no sweep between the switches)
      local b = assert(t.start(sleeper, {}))
      t.drive(b, 0)
      engine.EVICT_IDLE_MS = 1000
      t.advance(10000)
      for _ = 1, 100 do
        engine.tick()
        if engine.evicted(a) and engine.evicted(b) then break end
      end
      assert.is_true(engine.evicted(a), "the run stamped a day ahead")
      assert.is_true(engine.evicted(b), "the run behind it")
      engine.EVICT_IDLE_MS = -1
      for _, id in ipairs { a, b } do
        t.cancel(id)
        t.drive(id)
      end
    end)
    t.useRealClock()
    assert(ok, err)
  end)

  it("tries an evicted run whose log the store cannot read again a second later, not at every tick", function()
    local sleeper = sleeper_for("1h")
    engine.EVICT_IDLE_MS = -1
    local id = assert(t.start(sleeper, {}))
    t.drive(id, 0)
    engine.EVICT_IDLE_MS = 0
    for _ = 1, 100 do
      engine.tick()
      if engine.evicted(id) then break end
    end
    assert.is_true(engine.evicted(id))
    engine.EVICT_IDLE_MS = -1
    local read_log = store.read_log
    store.read_log = function() return nil, "disk I/O error" end
    local ok, err = pcall(function()
      S.wake(id)
      for i = 1, 5 do
        local due = engine.tick()
        assert.is_true(due ~= nil and due > 0, "tick " .. i .. " asked for the next at once: " .. tostring(due))
      end
      assert.is_true(engine.evicted(id))
    end)
    store.read_log = read_log
    assert(ok, err)
    core.wait(1100)
    engine.tick()
    assert.is_false(engine.evicted(id), "loaded once the store reads again")
    t.cancel(id)
    t.drive(id)
    assert.are.equal("cancelled", engine.run_status(id))
  end)

  it("evicts a run last active while the clock read a day later than it does now", function()
    local sleeper = sleeper_for("30d")
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
