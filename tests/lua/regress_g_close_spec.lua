local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

describe("restart", function()
  it("does not run a parked body's to-be-closed cleanup when the run is only reloaded", function()
    local cleaned = 0
    local cleanup = moor.step("g_cleanup", function() cleaned = cleaned + 1 end)
    local id = assert(t.start(workflow(function()
      local _guard <close> = setmetatable({}, { __close = function() cleanup() end }) -- luacheck: ignore
      moor.sleep("1h")
      return "ok"
    end)))
    t.drive(id)
    t.restart(id)
    assert.are.equal("running", engine.run_status(id))
    assert.are.equal(0, cleaned)
  end)

  it("timers of a settled run do not stay in the heap behind a live run's timer", function()
    local base = engine.stats().timers
    local parked = assert(t.start(workflow(function() moor.sleep("30m") end)))
    t.drive(parked)
    local id = assert(t.start(workflow(function()
      return (moor.race { moor.async(function() return "now" end), moor.timer("1h") })
    end)))
    t.drive(id)
    assert.are.equal("completed", engine.run_status(id))
    assert.are.equal(base + 1, engine.stats().timers) -- only the parked run's sleep
  end)
end)
