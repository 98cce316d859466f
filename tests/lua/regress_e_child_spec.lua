local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

describe("child runs", function()
  it("restarting a child does not tell its parent that the child settled", function()
    local child = workflow(function() moor.sleep("1h"); return "child done" end)
    moor._bind(child, "e_child", "h1")
    engine.register("e_child", child)
    local parent_id = assert(t.start(workflow(function()
      local ok, st = engine.op("child", "e_child", { tool = "e_child", input = {} })
      assert(ok and st.runId)
      local _, settled = engine.op("child.await", "await", { runId = st.runId })
      return settled
    end)))
    t.drive(parent_id)
    local kid = require("moor.core").query("SELECT id FROM runs WHERE parent_id=?", parent_id)[1].id
    t.restart(kid)
    t.drive(parent_id)
    print(require("moor.json").encode((t.outcome(parent_id))))
    assert.are.equal("running", engine.run_status(kid))
    assert.are.equal("running", engine.run_status(parent_id)) -- the parent still waits
  end)
end)
