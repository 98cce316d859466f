local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"
local core = require "moor.core"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

describe("replay of an op that has no record yet", function()
  it("a pending hook:await followed by recorded ops replays", function()
    local sa = moor.step("k_a", function() return 1 end)
    local id = assert(t.start(workflow(function()
      local h = moor.createHook { token = "k-gap-hook" }
      local f = moor.async(h.await, h)
      sa()
      sa() -- recorded after the branch's hook.await was issued
      return moor.await(f)
    end)))
    t.drive(id)
    t.restart(id)
    assert.are.equal("running", engine.run_status(id))
    assert.is_truthy(t.deliver("k-gap-hook", { ok = 1 }))
    t.drive(id)
    assert.are.same({ ok = 1 }, (t.outcome(id)))
  end)

  it("a step still in I/O while a later step is recorded replays", function()
    local slow = moor.step("k_slow", function()
      engine.io(function(resume) core.after(300, resume) end)
      return "slow"
    end)
    local fast = moor.step("k_fast", function() return "fast" end)
    local id = assert(t.start(workflow(function()
      local f = moor.async(slow)
      fast()
      fast() -- recorded after the branch's slow step was issued
      return moor.await(f)
    end)))
    engine.tick() -- fast is recorded; slow waits on its I/O (a crash now)
    t.restart(id)
    local status = engine.run_status(id)
    core.wait(400) -- let the abandoned I/O timer fire (a pending core.after at exit segfaults the host)
    assert.are.equal("completed", status)
  end)
end)
