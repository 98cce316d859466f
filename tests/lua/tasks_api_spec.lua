-- Tasks as the API shows them (issue 9 item 9): GET /v1/sessions/{id}/tasks
-- (moor.session.tasks), and a task tool called on its own (moor call).
local moor = require "moor"
local session = require "moor.session"
local tasktext = require "moor.session.tasktext"
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local t = moor.testing
local s = moor.schema

local register = support.register

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

describe("tasks: odd input", function()
  register("api_plan", moor.defineWorkflowTool {
    description = "Plans.", inputSchema = s.object { request = s.string() },
    serve = function(receive, ctx)
      while true do
        local call = receive()
        ctx.reply("planned " .. call.input.request)
      end
    end,
  })
  register("api_chatty", moor.defineWorkflowTool {
    description = "Posts a huge message.", inputSchema = s.object {},
    task = function(_, _, task)
      coroutine.yield(task.postMessage(("x"):rep(100) .. ("\n"):rep(3000)))
      return "done"
    end,
  })

  it("takes \"taskId\": null as no taskId (a new task), and clips a huge task message", function()
    local seen = {}
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      seen[turn.n] = { table.unpack(turn.messages) }
      if turn.n == 1 then
        return { toolCalls = { { name = "api_plan", input = { request = "a", taskId = moor.json.null } },
                               { name = "api_chatty", input = {} } } }
      end
      return "ok"
    end) }
    local c = t.converse(agent, { "go" })
    local receipts, message = {}, nil
    for _, turn in pairs(seen) do
      for _, m in ipairs(turn) do
        if m.role == "tool" then receipts[m.content] = true end
        if m.role == "user" and m.content:find("[Message from task api_chatty-", 1, true) then message = m.content end
      end
    end
    local started = 0
    for r in pairs(receipts) do if r:find("^Started task api_plan%-") then started = started + 1 end end
    assert.are.equal(1, started)
    assert.is_string(message)
    local _, lines = message:gsub("\n", "")
    assert.is_true(lines <= tasktext.MAX_LINES, tostring(lines)) -- (the clipped text and its header line)
    assert.matches("%[truncated%]$", message)
    assert.is_table(session.tasks(c.sessionId))
  end)
end)

describe("tasks: a held turn and maxSteps", function()
  register("api_ticker", moor.defineWorkflowTool {
    description = "Posts three messages.", inputSchema = s.object {},
    task = function(_, _, task)
      for i = 1, 3 do
        moor.sleep("5ms")
        coroutine.yield(task.postMessage("tick " .. i))
      end
      return "ticked"
    end,
  })

  it("gives each wake of a held turn a new maxSteps count, so a long task does not fail its turn", function()
    local agent = moor.defineAgent { instructions = "x", maxSteps = 2, model = t.script(function(turn)
      if turn.n == 1 then return { toolCalls = { { name = "api_ticker", input = {} } } } end
      return "noted " .. turn.n
    end) }
    local c = t.converse(agent, { "tick" })
    local done, failed
    for _, e in ipairs(c.events) do
      if e.kind == "turn.completed" then done = e.payload end
      if e.kind == "turn.failed" then failed = e.payload end
    end
    assert.is_nil(failed)
    assert.is_table(done)
    assert.is_nil(done.reason)
    assert.is_true(done.steps > 2, tostring(done.steps))
    local list = session.tasks(c.sessionId).tasks
    assert.are.equal("completed", list[1].status)
  end)
end)
