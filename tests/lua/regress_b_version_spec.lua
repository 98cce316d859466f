local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

describe("moor.version", function()
  it("gives min to a run parked past the marker (ops recorded after it, no completion yet)", function()
    local new_code = false
    local sa = moor.step("a", function() return 1 end)
    local sb = moor.step("b", function() return 2 end)
    local id = assert(t.start(workflow(function()
      sa()
      if new_code and moor.version("add-b", 1, 2) == 2 then sb() end
      moor.sleep("1h")
      return "ok"
    end)))
    t.drive(id)
    new_code = true -- deploy the patched code, then restart
    local _, err = t.restart(id)
    assert.is_nil(err and err.message)
    assert.are.equal("running", engine.run_status(id))
  end)
end)
