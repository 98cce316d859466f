-- Steps run in kept worker coroutines (issue 13, item 4: no coroutine made
-- and collected per step): consecutive steps share one; a kept worker holds
-- nothing of the step it ran; a step that raises, yields progress or parks
-- on I/O behaves as before; one abandoned on I/O is never handed out again.
local moor = require "moor"
local engine = require "moor.engine"
local core = require "moor.core"
local t = moor.testing
local s = moor.schema

local seen = {}
local where = moor.step("where", function(k)
  seen[#seen + 1] = coroutine.running()
  return k
end)

local two = moor.defineWorkflowTool {
  description = "spec tool", inputSchema = s.object {},
  execute = function() return where(1) + where(2) end,
}

describe("step workers", function()
  before_each(function() seen = {} end)

  it("run consecutive steps in one coroutine", function()
    assert.are.equal(3, (t.call(two)))
    assert.are.equal(2, #seen)
    assert.are.equal(seen[1], seen[2], "each step had a coroutine of its own")
  end)

  it("keep nothing of the step they ran: its function, arguments or result", function()
    local probe = setmetatable({}, { __mode = "v" })
    local tool = moor.defineWorkflowTool {
      description = "spec tool", inputSchema = s.object {},
      execute = function()
        local big = moor.step("big", function(arg)
          local out = { arg = arg }
          probe.result = out
          return #arg.list
        end)
        local arg = { list = { 1, 2, 3 } }
        probe.arg = arg
        return big(arg)
      end,
    }
    assert.are.equal(3, (t.call(tool)))
    collectgarbage()
    collectgarbage()
    assert.is_nil(probe.arg, "a kept worker still holds the step's argument")
    assert.is_nil(probe.result, "a kept worker still holds what the step built")
  end)

  it("give a step's error, progress and a later step's result as before", function()
    local n = 0
    local flaky = moor.step("flaky", function()
      n = n + 1
      coroutine.yield { done = n } -- a progress snapshot from inside the step
      if n == 1 then error(moor.FatalError("no")) end
      return n
    end, { retries = 0 })
    local tool = moor.defineWorkflowTool {
      description = "spec tool", inputSchema = s.object {},
      execute = function()
        local ok, err = pcall(flaky)
        assert(not ok and err.code == "FatalError", "wanted the step's FatalError")
        return flaky() + where(10)
      end,
    }
    assert.are.equal(12, (t.call(tool)))
  end)

  it("never hand out a worker left parked on I/O by a run that ended", function()
    local parked = {}
    local wait_io = moor.step("wait_io", function()
      parked[#parked + 1] = coroutine.running()
      return engine.io(function(resume) core.after(300, function() resume("late") end) end)
    end)
    local stuck = moor.defineWorkflowTool {
      description = "spec tool", inputSchema = s.object {},
      execute = function() return wait_io() end,
    }
    local id = assert(t.start(stuck))
    t.drive(id, 50)
    assert.are.equal(1, #parked)
    t.cancel(id)
    assert.are.equal("cancelled", t.drive(id, 50))
    assert.are.equal(3, (t.call(two))) -- (while the I/O is still out)
    assert.are_not.equal(parked[1], seen[1])
    local done = false
    core.after(400, function() done = true end)
    for _ = 1, 100 do
      if done then break end
      engine.tick()
      core.wait(10)
    end
    assert.is_true(done)
    seen = {}
    assert.are.equal(3, (t.call(two))) -- (after the I/O came back to a run that had ended)
    assert.are_not.equal(parked[1], seen[1])
    assert.are_not.equal(parked[1], seen[2])
  end)
end)
