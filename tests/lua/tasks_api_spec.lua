-- Tasks as the API shows them (issue 9 item 9): GET /v1/sessions/{id}/tasks
-- (moor.session.tasks), and a task tool called on its own (moor call).
local moor = require "moor"
local engine = require "moor.engine"
local session = require "moor.session"
local tasktext = require "moor.session.tasktext"
local t = moor.testing
local s = moor.schema

local function register(name, tool)
  moor._bind(tool, name, "spec")
  engine.register(name, tool)
  return tool
end

register("api_build", moor.defineWorkflowTool {
  description = "Build.", inputSchema = s.object { n = s.integer() },
  task = function(input) moor.sleep("10ms"); return { built = input.n } end,
})

describe("tasks through the API", function()
  it("lists a session's tasks with their calls and status", function()
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      if turn.n == 1 then
        return { toolCalls = { { name = "api_build", input = { n = 1 } }, { name = "api_build", input = { n = 2 } } } }
      end
      return "ok"
    end) }
    local c = t.converse(agent, { "build" })
    local list = session.tasks(c.sessionId)
    assert.are.equal(2, #list.tasks)
    for _, task in ipairs(list.tasks) do
      assert.matches("^api_build%-" .. ("[0-9a-hjkmnp-tv-z]"):rep(6) .. "$", task.taskId)
      assert.are.equal("completed", task.status)
      assert.are.equal("task", task.kind)
      assert.are.equal(1, #task.calls)
      assert.are.equal("completed", task.calls[1].status)
      assert.are.equal("turn_1", task.calls[1].turnId)
    end
    assert.is_nil(session.tasks("run_nope"))
  end)

  it("a task tool called on its own has a task id and the same receipt a model reads", function()
    local result, err, id = t.call("api_build", { n = 3 })
    assert.is_nil(err)
    assert.are.same({ built = 3 }, result)
    local started
    for _, e in ipairs(t.events(id)) do if e.kind == "task.started" then started = e.payload end end
    assert.is_table(started)
    assert.are.equal(tasktext.receipt(started.taskId), started.receipt)
  end)
end)
