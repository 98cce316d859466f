local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

describe("replay order", function()
  it("replays a run whose branch settles a future in a group-committed round", function()
    local sa = moor.step("a", function() return 1 end)
    local sb = moor.step("b", function() return 2 end)
    local sw = moor.step("w", function() return 3 end)
    local sz = moor.step("z", function() return 4 end)
    local id = assert(t.start(workflow(function()
      local fa = moor.async(function() return sa() end)
      local fb = moor.async(function() sb(); return sw() end)
      moor.await(fa)
      sz()
      moor.await(fb)
      moor.sleep("1h")
      return "ok"
    end)))
    t.drive(id)
    assert.are.equal("running", engine.run_status(id))
    local _, err = t.restart(id)
    assert.is_nil(err and err.message)
    assert.are.equal("running", engine.run_status(id))
  end)
end)
