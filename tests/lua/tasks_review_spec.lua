-- Tasks (issue 9), defects a review found: the limit of 32 with continuation
-- calls in one model step, GET /v1/sessions/{id}/tasks for a cancelled task
-- still unwinding, a joined message ending moor__task_wait, and a task whose
-- tool is gone after a restart reporting its failure to its session.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local session = require "moor.session"
local agent_api = require "moor.authoring.agent"
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local t = moor.testing
local s = moor.schema

local register = support.register

local function tool_messages(messages)
  local out = {}
  for _, m in ipairs(messages or {}) do if m.role == "tool" then out[#out + 1] = m end end
  return out
end

-- The first task id a receipt gave (of tool `name` when given).
local function receipt_id(messages, name)
  for _, m in ipairs(tool_messages(messages)) do
    local id = tostring(m.content):match("^Started task (%S+)%.")
    if id and (name == nil or id:sub(1, #name + 1) == name .. "-") then return id end
  end
end

register("rv_park", moor.defineWorkflowTool {
  description = "Parks for an hour.", inputSchema = s.object {},
  task = function() moor.sleep("1h") return 1 end,
})

register("rv_plan", moor.defineWorkflowTool {
  description = "Drafts at once; each revision takes an hour.", inputSchema = s.object { request = s.string() },
  serve = function(receive, ctx)
    receive()
    ctx.reply("drafted")
    while true do
      receive()
      moor.sleep("1h")
      ctx.reply("revised")
    end
  end,
})

local attempts = 0
local slow_cleanup = moor.step("rv_slow_cleanup", function()
  attempts = attempts + 1
  if attempts == 1 then error("not yet") end
  return true
end, { retries = 1, backoff = 60000 })

register("rv_slow", moor.defineWorkflowTool {
  description = "Parks; its cleanup takes a while.", inputSchema = s.object {},
  task = function()
    pcall(moor.sleep, "1h")
    slow_cleanup()
    return "x"
  end,
})

local function with_agent(agent, fn)
  local saved = engine.agent
  engine.agent = agent
  local ok, err = pcall(fn)
  engine.agent = saved
  if not ok then error(err, 0) end
end

describe("tasks (review)", function()
  it("counts idle serve tasks continued in one model step toward the limit of 32", function()
    local counted
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local ids, two = {}, false
      for _, m in ipairs(tool_messages(turn.messages)) do
        local id = tostring(m.content):match("^Started task (rv_plan%-%w+)")
        if id then ids[#ids + 1] = id end
      end
      for _, m in ipairs(turn.messages) do if m.role == "user" and m.content == "two" then two = true end end
      if #ids == 0 then
        return { toolCalls = { { name = "rv_plan", input = { request = "a" } },
          { name = "rv_plan", input = { request = "b" } } } }
      end
      if two and not counted then
        counted = true
        -- two idle tasks woken and 31 new ones: 33 working, one too many
        local calls = { { name = "rv_plan", input = { request = "c", taskId = ids[1] } },
          { name = "rv_plan", input = { request = "d", taskId = ids[2] } } }
        for _ = 1, conf.MAX_TASKS - 1 do calls[#calls + 1] = { name = "rv_park", input = {} } end
        return { toolCalls = calls }
      end
      if two and counted == true then
        counted = { accepted = 0, refused = 0 }
        for _, m in ipairs(tool_messages(turn.messages)) do
          local text = tostring(m.content)
          if text:find("^Sent to task") or text:find("^Started task rv_park") then
            counted.accepted = counted.accepted + 1
          elseif text:find("^TOO_MANY_TASKS: ") then
            counted.refused = counted.refused + 1
          end
        end
      end
      return "ok"
    end) }
    local c = t.converse(agent, { "one", "two" })
    assert.are.same({ accepted = conf.MAX_TASKS, refused = 1 }, counted)
    assert.is_true(t.cancel(c.sessionId))
    t.drive(c.sessionId)
  end)

  it("lists a task cancelled and still unwinding as cancelled, not idle", function()
    attempts = 0
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      if turn.n == 1 then return { toolCalls = { { name = "rv_slow", input = {} } } } end
      if turn.n == 2 then
        return { toolCalls = { { name = "moor__task_cancel", input = { taskId = receipt_id(turn.messages) } } } }
      end
      return "stopped"
    end) }
    local c = t.converse(agent, { "go" })
    local list = session.tasks(c.sessionId)
    assert.are.equal(1, #list.tasks)
    assert.are.equal("running", engine.run_status(list.tasks[1].runId)) -- its cleanup waits on a retry
    assert.are.equal("cancelled", list.tasks[1].calls[1].status)
    assert.are.equal("cancelled", list.tasks[1].status)
    assert.is_true(t.cancel(c.sessionId))
    t.drive(c.sessionId)
  end)

  it("ends moor__task_wait when a message joins the turn", function()
    local log = {}
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      log[turn.n] = { table.unpack(turn.messages) }
      if turn.n == 1 then return { toolCalls = { { name = "rv_park", input = {} } } } end
      if turn.n == 2 then return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 3600 } } } } end
      return "noted"
    end) }
    local c = t.converse(agent, { "go" })
    assert.are.equal(2, #log)
    -- (what ctx.agent's send delivers while the session's turn runs)
    with_agent(agent, function()
      assert(engine.deliver(agent_api.inbox_token(c.sessionId), { message = "one more thing", turnPolicy = "join" }))
      t.drive(c.sessionId)
    end)
    assert.is_table(log[3])
    local m = tool_messages(log[3])
    assert.matches("^A new message arrived, so the wait ended after %d+s; 1 task is still working: rv_park%-%w+%.$",
      m[#m].content)
    local joined = false
    for _, x in ipairs(log[3]) do if x.role == "user" and x.content == "one more thing" then joined = true end end
    assert.is_true(joined)
    assert.is_true(t.cancel(c.sessionId))
    t.drive(c.sessionId)
  end)

  it("reports to its session a task that fails on restart because its tool is gone", function()
    local log = {}
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      log[turn.n] = { table.unpack(turn.messages) }
      if turn.n == 1 then return { toolCalls = { { name = "rv_park", input = {} } } } end
      return "waiting " .. turn.n
    end) }
    local c = t.converse(agent, { "go" })
    assert.are.equal(2, #log) -- the turn is held while the task works
    local run_id
    for _, e in ipairs(c.events) do if e.kind == "task.started" then run_id = e.payload.runId end end
    local tool = engine.tools.rv_park
    engine.tools.rv_park = nil
    local ok, err = pcall(with_agent, agent, function()
      t.restart(run_id)
      assert.are.equal("failed", engine.run_status(run_id))
      t.drive(c.sessionId)
    end)
    engine.tools.rv_park = tool
    assert(ok, err)
    assert.is_table(log[3]) -- the held turn goes on with the failure
    local found
    for _, m in ipairs(log[3]) do
      if m.role == "user" and tostring(m.content):find('status="failed"', 1, true) then found = m.content end
    end
    assert.matches("is not in this build", tostring(found), 1, true)
    local completed = 0
    for _, e in ipairs(t.events(c.sessionId)) do if e.kind == "turn.completed" then completed = completed + 1 end end
    assert.are.equal(1, completed) -- and the turn ends
    assert.is_true(t.cancel(c.sessionId))
    t.drive(c.sessionId)
  end)
end)

-- The session body's task table (moor.session.tasks), found among the
-- locals of its parked coroutine.
local function task_table(session_id)
  local r = assert(require("moor.engine.state").runs[session_id], "the session is not in memory")
  local co = r.main.co
  for level = 0, 200 do
    if not debug.getinfo(co, level, "f") then break end
    for i = 1, 250 do
      local name, v = debug.getlocal(co, level, i)
      if name == nil then break end
      if name == "state" and type(v) == "table" and type(v.tasks) == "table" and v.tasks.byid then return v.tasks end
    end
  end
  error("no task table in session " .. session_id)
end

register("rv_quick", moor.defineTool {
  execution = "background",
  description = "Posts a message, then returns.", inputSchema = s.object {},
  execute = function(_, _, task)
    coroutine.yield(task.postMessage("halfway"))
    return "done"
  end,
})

describe("tasks (review): a long session", function()
  it("keeps no finished task in its table", function()
    local cancelled = {}
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local last = turn.messages[#turn.messages]
      if last.role == "user" and last.content:find("^go") then
        return { toolCalls = { { name = "rv_quick", input = {} }, { name = "rv_park", input = {} } } }
      end
      local park
      for _, m in ipairs(tool_messages(turn.messages)) do
        local id = tostring(m.content):match("^Started task (rv_park%-%w+)%.")
        if id and not cancelled[id] then park = id end
      end
      if park then
        cancelled[park] = true
        -- stop the parked one: a cancelled task finishes too
        return { toolCalls = { { name = "moor__task_cancel", input = { taskId = park } } } }
      end
      return "ok"
    end) }
    local messages = {}
    for i = 1, 5 do messages[i] = "go " .. i end
    local c = t.converse(agent, messages)
    local evs = t.events(c.sessionId)
    local started, results = 0, 0
    for _, e in ipairs(evs) do
      if e.kind == "task.started" then started = started + 1 end
      if e.kind == "task.result" then results = results + 1 end
    end
    assert.are.equal(10, started)
    assert.is_true(results >= 5)
    local tasks
    with_agent(agent, function() tasks = task_table(c.sessionId) end)
    assert.are.equal(0, tasks.nworking)
    assert.are.same({}, tasks.order)
    assert.is_nil(next(tasks.byid))
    assert.is_true(t.cancel(c.sessionId))
    t.drive(c.sessionId)
  end)
end)
