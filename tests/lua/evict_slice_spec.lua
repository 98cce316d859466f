local moor = require "moor"
local engine = require "moor.engine"
local core = require "moor.core"
local conf = require "moor.conf"
local log = require "moor.engine.log"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

describe("eviction slice", function()
  local saved_idle
  before_each(function() saved_idle = engine.EVICT_IDLE_MS end)
  after_each(function() engine.EVICT_IDLE_MS = saved_idle end)

  it("is not spent by the round's commit and listeners", function()
    local sleeper = support.register("spec_sleeper", moor.defineWorkflowTool { description = "x",
      inputSchema = s.object {}, execute = function() moor.sleep("1h"); return true end })
    local other = support.register("spec_other", moor.defineWorkflowTool { description = "x",
      inputSchema = s.object {}, execute = function() return 1 end })
    engine.EVICT_IDLE_MS = 3600000
    for _ = 1, 100 do assert(t.start(sleeper, {})) end
    for _ = 1, 20 do engine.tick() end
    local saved = conf.EVICT_SLICE_US
    conf.EVICT_SLICE_US = 20000 -- 20 ms for the sweep
    local slow = true
    local unsub = log.subscribe(function()
      if slow then local t0 = core.mono(); while core.mono() - t0 < 30000 do end end -- a 30 ms listener
    end)
    engine.EVICT_IDLE_MS = 0
    assert(t.start(other, {})) -- (its events are flushed in the next round)
    local before = engine.stats().evictions
    engine.tick()
    slow = false
    unsub()
    conf.EVICT_SLICE_US = saved
    local n = engine.stats().evictions - before
    assert.is_true(n > 1, "a 20 ms slice evicted " .. n .. ": the listener's 30 ms counted against it")
  end)
end)
