local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

describe("misc", function()
  it("two branches awaiting the same hook both get a delivery", function()
    local id = assert(t.start(workflow(function()
      local h = moor.createHook { token = "f-dup-hook" }
      local a = moor.async(h.await, h)
      local b = moor.async(h.await, h)
      return moor.all { a, b }
    end)))
    t.drive(id)
    assert.is_truthy(t.deliver("f-dup-hook", { n = 1 }))
    t.drive(id)
    assert.is_truthy(t.deliver("f-dup-hook", { n = 2 }))
    t.drive(id)
    assert.are.equal("completed", engine.run_status(id))
  end)

  it("os.clock in a body is the same after replay", function()
    local fast = moor.step("fast", function() return 1 end)
    local slow = moor.step("slow", function()
      local core = require "moor.core"
      local t0 = core.now(); while core.now() - t0 < 30 do end
      return 2
    end)
    local id = assert(t.start(workflow(function()
      local seen
      local a = moor.async(function() fast(); seen = os.clock(); return seen end)
      local b = moor.async(function() return slow() end)
      moor.all { a, b }
      coroutine.yield { clock = seen }
      moor.createHook { token = "f-clock" }:await()
      return { clock = seen }
    end)))
    t.drive(id)
    local live
    for _, e in ipairs(t.events(id)) do if e.kind == "progress" then live = e.payload.clock end end
    t.restart(id)
    t.deliver("f-clock", {})
    t.drive(id)
    local res = t.outcome(id)
    assert.are.equal(live, res.clock)
  end)
end)
