local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"
local core = require "moor.core"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

describe("child runs", function()
  it("a restart between the child's commit and child.started does not start a second child", function()
    local child = workflow(function() moor.sleep("1h"); return "child done" end)
    moor._bind(child, "h_child", "h2")
    engine.register("h_child", child)
    local parent_id = assert(t.start(workflow(function()
      local ok, st = engine.op("child", "h_child", { tool = "h_child", input = {} })
      assert(ok and st.runId)
      local _, settled = engine.op("child.await", "await", { runId = st.runId })
      return settled
    end)))
    t.drive(parent_id)
    -- The crash window: M.call commits the child's row (start_child), then the process dies
    -- before the parent's child.started is committed. Simulate by dropping that event.
    core.exec("DELETE FROM events WHERE run_id=? AND kind='child.started'", parent_id)
    t.restart(parent_id)
    local kids = core.query("SELECT id FROM runs WHERE parent_id=? AND parent_op=1", parent_id)
    assert.are.equal(1, #kids)
  end)
end)
