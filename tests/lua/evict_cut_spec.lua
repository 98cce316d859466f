local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

describe("cut", function()
  it("says more is due only when it is", function()
    local sleeper = support.register("spec_cut", moor.defineWorkflowTool { description = "x",
      inputSchema = s.object {}, execute = function() moor.sleep("1h"); return true end })
    t.useVirtualClock(1700000000000)
    engine.EVICT_IDLE_MS = -1
    local a = assert(t.start(sleeper, {})); t.drive(a)
    t.advance("10s")
    local b = assert(t.start(sleeper, {})); t.drive(b)
    t.advance("2s") -- a is due (idle 12 s), b is not (idle 2 s)
    engine.EVICT_IDLE_MS = 5000
    assert.is_false(engine.evicted(a))
    local saved = conf.EVICT_SLICE_US
    conf.EVICT_SLICE_US = 0
    local due = engine.tick()
    conf.EVICT_SLICE_US = saved
    assert.is_true(engine.evicted(a))
    assert.is_false(engine.evicted(b))
    assert.is_true(due > 0, "due " .. tostring(due) .. " with nothing due")
  end)
end)
