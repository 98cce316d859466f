-- serve(receive, ctx) (seed 000 "Resumable tasks: serve"; issue 9 items 6
-- and 8): receive(), ctx.reply, stretches and their abort signals, cancels
-- and the 30-second rule, the task's end, and agent tools as serve tools, in
-- sessions with scripted models.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local core = require "moor.core"
local json = require "moor.json"
local loader = require "moor.loader"
local tasktext = require "moor.session.tasktext"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local kinds = support.kinds

-- A serve tool under a fresh name (plan_<n>), taking { request }.
local registered = {}
local function serve_tool(serve, description)
  local name = "plan_" .. (#registered + 1)
  local tool = moor.defineWorkflowTool {
    description = description or "Draft a plan and revise it on request.",
    inputSchema = s.object { request = s.string() },
    serve = serve,
  }
  moor._bind(tool, name, "spec")
  engine.register(name, tool)
  registered[#registered + 1] = name
  return name, tool
end

-- The transcript's last message, the [Tasks] notes left out.
local function last(turn)
  for i = #turn.messages, 1, -1 do
    local m = turn.messages[i]
    if not (m.role == "user" and tostring(m.content):find("^%[Tasks%]")) then return m end
  end
end

local function is_user(m, text) return m.role == "user" and m.content == text end

-- The task id a receipt of tool `name` gave, in the transcript.
local function task_id(messages, name)
  for _, m in ipairs(messages) do
    local id = m.role == "tool" and tostring(m.content):match("^Started task (" .. name:gsub("%-", "%%-")
      .. "%-%w+)%.")
    if id then return id end
  end
end

local function call(name, input) return { toolCalls = { { name = name, input = input } } } end

local function tool_messages(messages)
  local out = {}
  for _, m in ipairs(messages) do if m.role == "tool" then out[#out + 1] = m end end
  return out
end

local function results_in(messages)
  local out = {}
  for _, m in ipairs(messages) do
    if m.role == "user" and tostring(m.content):find("<task_result", 1, true) then out[#out + 1] = m.content end
  end
  return out
end

local function count(str, pat)
  local _, n = str:gsub(pat, "")
  return n
end

describe("serve", function()
  after_each(function()
    for _, name in ipairs(registered) do engine.tools[name] = nil end
  end)

  it("receive(): the first call at once, then each call by taskId in arrival order; calls that arrive while "
    .. "the body is busy are kept; a pending receive() is shared", function()
    local got, first_ops, shared = {}, nil, nil
    local name
    name = serve_tool(function(receive, ctx)
      local c = receive()
      first_ops = engine.current().nops -- no op of the run before the first call
      got[#got + 1] = c
      moor.sleep("150ms") -- busy: two calls arrive meanwhile, and are kept
      ctx.reply("one done")
      got[#got + 1] = receive()
      got[#got + 1] = receive()
      ctx.reply("two and three done")
      local a, b = moor.async(receive), moor.async(receive) -- one pending receive(), shared
      shared = { moor.await(a), moor.await(b) }
      ctx.reply("four done")
      receive()
    end)
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local m = last(turn)
      local id = task_id(turn.messages, name)
      if is_user(m, "go") then return call(name, { request = "one" }) end
      if is_user(m, "four") then return call(name, { taskId = id, request = "four" }) end
      local n = #tool_messages(turn.messages)
      if m.role == "tool" and n == 1 then return call(name, { taskId = id, request = "two" }) end
      if m.role == "tool" and n == 2 then return call(name, { taskId = id, request = "three" }) end
      return "ok"
    end) }
    local c = t.converse(agent, { "go", "four" })
    assert.are.equal(0, first_ops)
    local reqs = {}
    for i, g in ipairs(got) do reqs[i] = g.input.request end
    assert.are.same({ "one", "two", "three" }, reqs)
    assert.are.same({ request = "two" }, got[2].input) -- (taskId is moor's, not the body's)
    -- each call's callId is the model's
    local started = kinds(c.events, "action.started")
    for i = 1, 3 do assert.are.equal(started[i].callId, got[i].callId) end
    assert.is_true(rawequal(shared[1], shared[2]))
    assert.are.equal("four", shared[1].input.request)
    assert.are.equal(started[4].callId, shared[1].callId)
    -- the serve run's first op is the body's own sleep: nothing was waited on before it
    local run = kinds(c.events, "task.started")[1].runId
    local first_op
    for _, e in ipairs(t.events(run)) do
      if e.op ~= nil and first_op == nil then first_op = e end
    end
    assert.are.equal("sleep", first_op.name)
    local outputs = {}
    for _, p in ipairs(kinds(c.events, "task.settled")) do outputs[#outputs + 1] = p.output end
    assert.are.same({ "one done", "two and three done", "two and three done", "four done" }, outputs)
  end)

  it("adds an optional taskId to the model's input and says so in the description; receipts and UNKNOWN_TASK",
    function()
      local name = serve_tool(function(receive, ctx)
        while true do
          local c = receive()
          if c.input.request == "last" then return "bye" end
          ctx.reply("ok " .. c.input.request)
        end
      end)
      local other = serve_tool(function(receive, ctx)
        receive()
        ctx.reply("other")
        receive()
      end)
      local seen, tools = {}, nil
      local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
        tools = tools or turn.tools
        local m = last(turn)
        local id = task_id(turn.messages, name)
        if is_user(m, "start") then return call(name, { request = "a" }) end
        if is_user(m, "again") then return call(name, { taskId = id, request = "b" }) end
        if is_user(m, "unknown") then return call(name, { taskId = name .. "-zzzzzz", request = "c" }) end
        if is_user(m, "other") then return call(other, { request = "x" }) end
        if is_user(m, "cross") then return call(other, { taskId = id, request = "d" }) end
        if is_user(m, "end") then return call(name, { taskId = id, request = "last" }) end
        if is_user(m, "after") then return call(name, { taskId = id, request = "e" }) end
        if m.role == "tool" then seen[#seen + 1] = { content = m.content, isError = m.isError, id = id } end
        return "ok"
      end) }
      t.converse(agent, { "start", "again", "unknown", "other", "cross", "end", "after" })
      local facing
      for _, tl in ipairs(tools) do if tl.name == name then facing = tl end end
      assert.are.same({ type = "string",
        description = "The id of a task this tool started (from its receipt), to send it this call." },
        facing.inputSchema.properties.taskId)
      for _, req in ipairs(facing.inputSchema.required or {}) do assert.are_not.equal("taskId", req) end
      assert.are.equal("string", facing.inputSchema.properties.request.type)
      local sentence = tasktext.SERVE_SENTENCE
      assert.are.equal("Draft a plan and revise it on request. " .. sentence, facing.description)
      assert.are.equal(sentence, facing.description:sub(-#sentence))
      local id = seen[1].id
      assert.are.equal(("Started task %s. Its result will arrive in a <task_result> message. To send it another "
        .. "message, call %s again with taskId %s."):format(id, name, id), seen[1].content)
      assert.are.equal(("Sent to task %s. Its reply will arrive in a <task_result> message."):format(id),
        seen[2].content)
      assert.is_true(seen[3].isError)
      assert.are.equal("UNKNOWN_TASK: " .. tasktext.unknown_task(name .. "-zzzzzz", name), seen[3].content)
      assert.matches("^Started task " .. other .. "%-", seen[4].content)
      -- another tool's task is unknown to this one
      assert.is_true(seen[5].isError)
      assert.are.equal("UNKNOWN_TASK: " .. tasktext.unknown_task(id, other), seen[5].content)
      assert.are.equal(("Sent to task %s. Its reply will arrive in a <task_result> message."):format(id),
        seen[6].content)
      -- the body returned: the task is finished
      assert.is_true(seen[7].isError)
      assert.are.equal("UNKNOWN_TASK: " .. tasktext.unknown_task(id, name), seen[7].content)
      -- an inputSchema with its own taskId is refused at load
      local ok, err = pcall(moor.defineWorkflowTool, { description = "x",
        inputSchema = s.object { taskId = s.string() }, serve = function() end })
      assert.is_false(ok)
      assert.truthy(tostring(err.message or err):find("must not declare taskId", 1, true))
    end)

  it("is continued by taskId in a later turn; calls that arrive while it works are settled by one reply; ctx "
    .. "and agent.started follow the call being served", function()
    local served = {}
    local helper = moor.defineAgent { instructions = "help", description = "Helps.", tool = false,
      model = t.script(function() return "helped" end) }
    local name = serve_tool(function(receive, ctx)
      local pending
      while true do
        local c = pending and moor.await(pending) or receive()
        pending = nil
        served[#served + 1] = { call = c, callId = ctx.callId, turnId = ctx.session.turnId }
        if c.input.request == "delegate" then ctx.agent("helper"):send("help me"):result() end
        -- keep a receive() pending while working: a call that comes now is received
        local more = moor.async(receive)
        moor.sleep("150ms")
        if more.done then
          local m = moor.await(more)
          served[#served + 1] = { call = m, callId = ctx.callId, turnId = ctx.session.turnId }
        else
          pending = more
        end
        ctx.reply("revised for " .. c.input.request)
      end
    end)
    local turn2
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local m = last(turn)
      local id = task_id(turn.messages, name)
      if is_user(m, "plan") then return call(name, { request = "draft" }) end
      if is_user(m, "revise") then return call(name, { taskId = id, request = "delegate" }) end
      if m.role == "tool" and m.content:find("^Sent to task") and #tool_messages(turn.messages) == 2 then
        return call(name, { taskId = id, request = "also" })
      end
      turn2 = { table.unpack(turn.messages) }
      return "ok"
    end) }
    support.with_agents(agent, { helper = helper }, function()
      local c = t.converse(agent, { "plan", "revise" })
      assert.are.equal(3, #served)
      local started = kinds(c.events, "action.started")
      assert.are.equal("turn_1", served[1].turnId)
      assert.are.equal(started[1].callId, served[1].callId)
      assert.are.equal("delegate", served[2].call.input.request)
      assert.are.equal("turn_2", served[2].turnId)
      assert.are.equal(started[2].callId, served[2].callId)
      assert.are.equal(started[2].callId, served[2].call.callId)
      assert.are.equal("also", served[3].call.input.request)
      assert.are.equal(started[3].callId, served[3].callId)
      assert.are.equal("turn_2", served[3].turnId)
      -- one stretch, one signal; the next stretch has its own
      assert.is_true(rawequal(served[2].call.abortSignal, served[3].call.abortSignal))
      assert.is_false(rawequal(served[1].call.abortSignal, served[2].call.abortSignal))
      -- both calls of turn 2 settled by the one reply, each with its own event
      local settled = kinds(c.events, "task.settled")
      assert.are.equal(3, #settled)
      assert.are.same({ started[2].callId, "turn_2", "completed", "revised for delegate" },
        { settled[2].callId, settled[2].turnId, settled[2].status, settled[2].output })
      assert.are.same({ started[3].callId, "turn_2", "completed", "revised for delegate" },
        { settled[3].callId, settled[3].turnId, settled[3].status, settled[3].output })
      -- the model read the reply once
      local turn2_results = {}
      for _, p in ipairs(kinds(c.events, "task.result")) do
        if p.turnId == "turn_2" then turn2_results[#turn2_results + 1] = p.text end
      end
      assert.are.equal(1, #turn2_results)
      assert.are.equal(1, count(turn2_results[1], "<task_result "))
      local all = table.concat(results_in(turn2), "\n")
      assert.are.equal(1, count(all, "revised for delegate"))
      -- agent.started (on the session's stream too) names the call being served
      local as = kinds(c.events, "agent.started")
      assert.are.equal(1, #as)
      assert.are.equal(started[2].callId, as[1].callId)
      assert.are.equal("turn_2", as[1].turnId)
      assert.are.equal(kinds(c.events, "task.started")[1].taskId, as[1].taskId)
    end)
  end)

  it("ctx.reply withdraws the questions of the calls it settles without aborting their signal; ctx.ask raises "
    .. "while no call waits; a reply with no call left is dropped", function()
    local r = {}
    local name = serve_tool(function(receive, ctx)
      local c = receive()
      local q = moor.async(ctx.ask, { prompt = "Which region?", display = "text" })
      moor.sleep("30ms")
      r.pending = #t.inputs(ctx.runId)
      r.replied = ctx.reply("planned")
      r.answer = moor.await(q)
      r.aborted = c.abortSignal.aborted
      local ok, err = pcall(ctx.ask, { prompt = "And now?" })
      r.ask_ok, r.ask_err = ok, err
      r.again = ctx.reply("too late")
      receive()
    end)
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      if is_user(last(turn), "go") then return call(name, { request = "x" }) end
      return "ok"
    end) }
    local c = t.converse(agent, { "go" })
    assert.are.equal(1, r.pending)
    assert.is_true(r.replied)
    assert.are.same({ status = "cancelled" }, r.answer)
    assert.is_false(r.aborted)
    assert.is_false(r.ask_ok)
    assert.are.equal("NoCallWaiting", r.ask_err.code)
    assert.is_false(r.again)
    assert.are.equal(0, #t.inputs(c.sessionId))
    local run = kinds(c.events, "task.started")[1].runId
    local resolved = kinds(t.events(run), "input.resolved")
    assert.are.equal(1, #resolved)
    assert.are.equal("cancelled", resolved[1].outcome)
    -- one result, the dropped reply posted nothing
    local settled = kinds(c.events, "task.settled")
    assert.are.equal(1, #settled)
    assert.are.equal("planned", settled[1].output)
    assert.are.equal(1, #kinds(c.events, "task.result"))
    local replies = 0
    for _, e in ipairs(t.events(run)) do
      if e.kind == "step.result" and e.name == "serve.reply" then replies = replies + 1 end
    end
    assert.are.equal(1, replies)
  end)

  it("moor__task_cancel of a working serve task settles its calls as cancelled, aborts the stretch and leaves it "
    .. "idle and available; of an idle one, it had no work to stop", function()
    local got = {}
    local name = serve_tool(function(receive, ctx)
      while true do
        local c = receive()
        got[#got + 1] = c
        local _, idx = moor.race { moor.timer(c.input.request == "slow" and "1h" or "10ms"), c.abortSignal }
        if idx == 1 then ctx.reply("finished " .. c.input.request) end
      end
    end)
    local seen = {}
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local m = last(turn)
      local id = task_id(turn.messages, name)
      if is_user(m, "go") then return call(name, { request = "slow" }) end
      if m.role == "tool" then seen[#seen + 1] = m.content end
      -- a second call of the stretch, kept while the body works on the first
      if m.role == "tool" and m.content:find("^Started task") then
        return call(name, { taskId = id, request = "slow too" })
      end
      if m.role == "tool" and m.content:find("^Sent to task") and #seen == 2 then
        return call("moor__task_cancel", { taskId = id })
      end
      if is_user(m, "stop again") then return call("moor__task_cancel", { taskId = id }) end
      if m.role == "tool" and m.content:find("no work to stop", 1, true) then
        return call(name, { taskId = id, request = "quick" })
      end
      return "ok"
    end) }
    local c = t.converse(agent, { "go", "stop again" })
    local id = kinds(c.events, "task.started")[1].taskId
    assert.are.equal(("Stopped %s; it won't report back."):format(id), seen[3])
    assert.are.equal(("%s had no work to stop."):format(id), seen[4])
    assert.are.equal(("Sent to task %s. Its reply will arrive in a <task_result> message."):format(id), seen[5])
    -- the kept call was settled by the cancel: the body never gets it
    assert.are.equal(2, #got)
    assert.are.same({ "slow", "quick" }, { got[1].input.request, got[2].input.request })
    assert.is_true(got[1].abortSignal.aborted)
    assert.is_false(rawequal(got[1].abortSignal, got[2].abortSignal))
    assert.is_false(got[2].abortSignal.aborted)
    local settled = kinds(c.events, "task.settled")
    local started = kinds(c.events, "action.started")
    assert.are.same({ "cancelled", "cancelled", "completed" }, { settled[1].status, settled[2].status,
      settled[3].status })
    assert.are.same({ started[1].callId, started[2].callId }, { settled[1].callId, settled[2].callId })
    assert.are.equal("finished quick", settled[3].output)
    -- cancelled work never reports: one result, the quick one
    local results = kinds(c.events, "task.result")
    assert.are.equal(1, #results)
    assert.truthy(results[1].text:find("finished quick", 1, true))
    assert.are.equal("running", engine.run_status(kinds(c.events, "task.started")[1].runId))
  end)

  describe("the return-to-receive rule", function()
    local grace
    before_each(function()
      grace = conf.CANCEL_GRACE
      conf.CANCEL_GRACE = 150
    end)
    after_each(function() conf.CANCEL_GRACE = grace end)

    local function cancel_then_call(name)
      local seen = {}
      local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
        local m = last(turn)
        local id = task_id(turn.messages, name)
        if is_user(m, "go") then return call(name, { request = "work" }) end
        if m.role == "tool" and m.content:find("^Started task") then
          return call("moor__task_cancel", { taskId = id })
        end
        if is_user(m, "again") then return call(name, { taskId = id, request = "more" }) end
        if m.role == "tool" then seen[#seen + 1] = m end
        return "ok"
      end) }
      local c = t.converse(agent, { "go" })
      local run = kinds(c.events, "task.started")[1].runId
      -- drive past the grace (and a cleanup's grace)
      local deadline = core.now() + 1000
      while core.now() < deadline do
        t.step()
        core.wait(20)
      end
      c = t.converse(agent, { "again" }, { sessionId = c.sessionId })
      return c, run, seen
    end

    it("ends a body that does not return to receive() within the grace of a cancel", function()
      local cleaned
      local name = serve_tool(function(receive)
        receive()
        local ok, err = pcall(moor.sleep, "1h") -- ignores the stretch's signal
        cleaned = not ok and err.code
        error(err, 0)
      end)
      local c, run, seen = cancel_then_call(name)
      assert.are.equal("Cancelled", cleaned)
      assert.are.equal("cancelled", engine.run_status(run))
      local id = kinds(c.events, "task.started")[1].taskId
      assert.are.equal("UNKNOWN_TASK: " .. tasktext.unknown_task(id, name), seen[#seen].content)
    end)

    it("keeps a body that catches the abort and returns to receive() available", function()
      local got = {}
      local name = serve_tool(function(receive, ctx)
        while true do
          local c = receive()
          got[#got + 1] = c.input.request
          if c.input.request == "work" then
            c.abortSignal:wait()
          else
            ctx.reply("did " .. c.input.request)
          end
        end
      end)
      local c, run = cancel_then_call(name)
      assert.are.equal("running", engine.run_status(run))
      assert.are.same({ "work", "more" }, got)
      local settled = kinds(c.events, "task.settled")
      assert.are.same({ "cancelled", "completed" }, { settled[1].status, settled[2].status })
      assert.are.equal("did more", settled[2].output)
    end)
  end)

  it("returning settles the calls still waiting and ends the task; a throw fails them", function()
    local name = serve_tool(function(receive)
      local c = receive()
      moor.sleep("100ms") -- a second call arrives meanwhile
      return "final: " .. c.input.request
    end)
    local bad = serve_tool(function(receive)
      receive()
      error("boom")
    end)
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local m = last(turn)
      local id = task_id(turn.messages, name)
      if is_user(m, "go") then return call(name, { request = "a" }) end
      if m.role == "tool" and #tool_messages(turn.messages) == 1 then
        return call(name, { taskId = id, request = "b" })
      end
      if is_user(m, "fail") then return call(bad, { request = "x" }) end
      return "ok"
    end) }
    local c = t.converse(agent, { "go", "fail" })
    local settled = kinds(c.events, "task.settled")
    assert.are.equal(3, #settled)
    assert.are.same({ "completed", "final: a" }, { settled[1].status, settled[1].output })
    assert.are.same({ "completed", "final: a" }, { settled[2].status, settled[2].output })
    assert.are_not.equal(settled[1].callId, settled[2].callId)
    assert.are.equal("failed", settled[3].status)
    assert.truthy(tostring(settled[3].error.message):find("boom", 1, true))
    local tasks = kinds(c.events, "task.started")
    assert.are.equal("completed", engine.run_status(tasks[1].runId))
    assert.are.equal("failed", engine.run_status(tasks[3].runId))
    local text = {}
    for _, p in ipairs(kinds(c.events, "task.result")) do text[#text + 1] = p.text end
    text = table.concat(text, "\n")
    assert.truthy(text:find('status="failed"', 1, true))
    assert.are.equal(1, count(text, "final: a")) -- the two calls' result, read once
  end)

  it("the session's end aborts the stretch and rejects a pending receive()", function()
    local r = {}
    local idle = serve_tool(function(receive, ctx)
      receive()
      ctx.reply("ready")
      local ok, err = pcall(receive)
      r.receive_ok, r.receive_err = ok, err
      error(err, 0)
    end)
    local busy = serve_tool(function(receive)
      local c = receive()
      r.signal = c.abortSignal
      local ok, err = pcall(moor.sleep, "1h")
      r.sleep_ok, r.sleep_err = ok, err
      -- a call was kept while it slept; the session is gone, so receive() has no more calls
      ok, err = pcall(receive)
      r.after_ok, r.after_err = ok, err
      error(err, 0)
    end)
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local m = last(turn)
      if is_user(m, "go") then
        return { toolCalls = { { name = idle, input = { request = "x" } },
                               { name = busy, input = { request = "y" } } } }
      end
      if m.role == "tool" and #tool_messages(turn.messages) == 2 then
        return call(busy, { taskId = task_id(turn.messages, busy), request = "z" })
      end
      return "ok"
    end) }
    local sid = assert(require("moor.session").create())
    engine.agent = agent
    assert(require("moor.session").send(sid, { message = "go" }))
    -- until the idle task replied and the busy one sleeps
    for _ = 1, 100 do
      t.drive(sid, 50)
      if r.signal and #kinds(t.events(sid), "task.settled") == 1 and #kinds(t.events(sid), "task.started") == 3 then
        break
      end
      core.wait(10)
    end
    local tasks = kinds(t.events(sid), "task.started")
    assert.is_true(t.cancel(sid))
    t.drive(sid)
    for _ = 1, 50 do
      if engine.run_status(tasks[1].runId) ~= "running" and engine.run_status(tasks[2].runId) ~= "running" then
        break
      end
      t.step()
      core.wait(10)
    end
    engine.agent = nil
    assert.is_false(r.receive_ok)
    assert.are.equal("Cancelled", r.receive_err.code)
    assert.is_true(r.signal.aborted)
    assert.is_false(r.sleep_ok)
    assert.are.equal("Cancelled", r.sleep_err.code)
    assert.is_false(r.after_ok)
    assert.are.equal("Cancelled", r.after_err.code)
    assert.are.equal("cancelled", engine.run_status(tasks[1].runId))
    assert.are.equal("cancelled", engine.run_status(tasks[2].runId))
  end)

  it("gives a question the callId of the call being served", function()
    local name = serve_tool(function(receive, ctx)
      while true do
        local c = receive()
        if c.input.request == "ask" then
          local a = ctx.ask { prompt = "Which region?", display = "text" }
          ctx.reply("region " .. tostring(a.text))
        else
          ctx.reply("hello")
        end
      end
    end)
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local m = last(turn)
      if is_user(m, "start") then return call(name, { request = "hello" }) end
      if is_user(m, "ask") then return call(name, { taskId = task_id(turn.messages, name), request = "ask" }) end
      return "ok"
    end) }
    local c = t.converse(agent, { "start", "ask" })
    local q = t.inputs(c.sessionId)
    assert.are.equal(1, #q)
    local asked = kinds(t.events(c.sessionId), "input.requested") -- (mirrored from the task's run)
    assert.are.equal(1, #asked)
    assert.are.equal(kinds(c.events, "action.started")[2].callId, asked[1].callId)
    assert.is_true(t.answer(q[1].requestId, { text = "eu" }))
    t.drive(c.sessionId)
    local settled = kinds(t.events(c.sessionId), "task.settled")
    assert.are.equal("region eu", settled[#settled].output)
  end)

  it("takes calls only through its session: its calls hook is not reachable from outside", function()
    local got = {}
    local name = serve_tool(function(receive, ctx)
      while true do
        local c = receive()
        got[#got + 1] = c.input.request
        ctx.reply("ok")
      end
    end)
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      if is_user(last(turn), "go") then return call(name, { request = "mine" }) end
      return "ok"
    end) }
    local c = t.converse(agent, { "go" })
    local run = kinds(c.events, "task.started")[1].runId
    local ok, status, code = t.deliver("task-" .. run, { call = { input = { request = "forged" }, callId = "x" } },
      "hook")
    assert.is_nil(ok)
    assert.are.same({ 404, "not_found" }, { status, code })
    ok = t.deliver("task-" .. run, { cancel = true }, "hook")
    assert.is_nil(ok)
    t.drive(c.sessionId)
    assert.are.same({ "mine" }, got)
  end)

  it("called on its own (no session), ends with its first reply as the result", function()
    local name = serve_tool(function(receive, ctx)
      while true do
        local c = receive()
        ctx.reply("planned " .. c.input.request)
      end
    end)
    local res, err, id = t.call(name, { request = "alone" })
    assert.is_nil(err)
    assert.are.equal("planned alone", res)
    assert.are.equal("completed", engine.run_status(id))
  end)

  it("survives restarts of its run and of its session, and goes on by taskId", function()
    local name = serve_tool(function(receive, ctx)
      while true do
        local c = receive()
        moor.sleep("200ms")
        ctx.reply("done " .. c.input.request)
      end
    end)
    local model_calls = 0
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      model_calls = model_calls + 1
      local m = last(turn)
      if is_user(m, "one") then return call(name, { request = "one" }) end
      if is_user(m, "two") then return call(name, { taskId = task_id(turn.messages, name), request = "two" }) end
      return "ok"
    end) }
    local session = require "moor.session"
    local sid = assert(session.create())
    engine.agent = agent
    assert(session.send(sid, { message = "one" }))
    local run
    for _ = 1, 100 do
      t.drive(sid, 20)
      local st = kinds(t.events(sid), "task.started")[1]
      run = st and st.runId
      if run and #kinds(t.events(run), "timer.scheduled") == 1 then break end
      core.wait(10)
    end
    assert.is_nil((t.restart(run))) -- replayed: still asleep on its one timer
    t.drive(sid)
    assert.are.equal(1, #kinds(t.events(sid), "task.settled"))
    local before = model_calls
    t.restart(sid)
    assert.are.equal(before, model_calls) -- nothing was asked again
    engine.agent = nil
    local c = t.converse(agent, { "two" }, { sessionId = sid })
    local settled = kinds(c.events, "task.settled")
    assert.are.same({ "done one", "done two" }, { settled[1].output, settled[2].output })
    local text = {}
    for _, p in ipairs(kinds(c.events, "task.result")) do text[#text + 1] = p.text end
    text = table.concat(text, "\n")
    assert.are.equal(1, count(text, "done one"))
    assert.are.equal(1, count(text, "done two"))
    assert.are.equal(2, #kinds(t.events(run), "timer.scheduled"))
  end)
end)

describe("agent tools are serve tools", function()
  it("sends a call with taskId to the same child session", function()
    local child_saw
    local helper = moor.defineAgent { instructions = "help", description = "Helps.",
      model = t.script(function(turn)
        local users = {}
        for _, m in ipairs(turn.messages) do if m.role == "user" then users[#users + 1] = m.content end end
        child_saw = users
        return ("reply %d: %s"):format(#users, users[#users])
      end) }
    engine.register("helper", loader.subagent_tool("helper", helper))
    assert.are.equal("serve", engine.tools.helper.entry)
    local results = {}
    local boss = moor.defineAgent { instructions = "boss", model = t.script(function(turn)
      local m = last(turn)
      local id = task_id(turn.messages, "helper")
      if is_user(m, "ask") then return call("helper", { message = "first question" }) end
      if is_user(m, "follow up") then return call("helper", { taskId = id, message = "second question" }) end
      results = results_in(turn.messages)
      return "ok"
    end) }
    support.with_agents(boss, { helper = helper }, function()
      local c = t.converse(boss, { "ask" })
      -- the task's run is replayed from its log: it keeps its child session
      local run = kinds(c.events, "task.started")[1].runId
      assert.is_nil((t.restart(run)))
      c = t.converse(boss, { "follow up" }, { sessionId = c.sessionId })
      local as = kinds(c.events, "agent.started")
      assert.are.equal(1, #as) -- one child session for the task
      local child = as[1].sessionId
      assert.are.same({ "first question", "second question" }, child_saw)
      local details = require("moor.session").details(child)
      local texts = {}
      for _, m in ipairs(details.transcript) do texts[#texts + 1] = m.text end
      assert.are.same({ "first question", "reply 1: first question", "second question",
        "reply 2: second question" }, texts)
      local all = table.concat(results, "\n")
      assert.truthy(all:find("reply 1: first question", 1, true))
      assert.truthy(all:find("reply 2: second question", 1, true))
      local tasks = kinds(c.events, "task.started")
      assert.are.equal(2, #tasks)
      assert.are.equal(tasks[1].taskId, tasks[2].taskId)
      assert.are.equal(tasks[1].taskId, as[1].taskId)
    end)
    engine.tools.helper = nil
  end)

  it("a cancelled agent task cancels the child's turn and stays available; the next call goes to that child",
    function()
      local slow = moor.defineWorkflowTool { description = "works long", inputSchema = s.object {},
        execute = function(_, ctx)
          moor.race { moor.timer("1h"), ctx.abortSignal }
          return "stopped"
        end }
      moor._bind(slow, "long_job", "spec")
      engine.register("long_job", slow)
      local child_saw
      local worker = moor.defineAgent { instructions = "work", description = "Works.",
        model = t.script(function(turn)
          local users = {}
          for _, m in ipairs(turn.messages) do if m.role == "user" then users[#users + 1] = m.content end end
          child_saw = users
          local m = turn.messages[#turn.messages]
          if m.role == "user" and m.content == "long job" then return call("long_job", {}) end
          return "quick: " .. users[#users]
        end) }
      engine.register("worker", loader.subagent_tool("worker", worker))
      local seen, results = {}, {}
      local boss = moor.defineAgent { instructions = "boss", model = t.script(function(turn)
        local m = last(turn)
        local id = task_id(turn.messages, "worker")
        if is_user(m, "go") then return call("worker", { message = "long job" }) end
        if m.role == "tool" and m.content:find("^Started task") then
          return call("moor__task_cancel", { taskId = id })
        end
        if is_user(m, "again") then return call("worker", { taskId = id, message = "small job" }) end
        if m.role == "tool" then seen[#seen + 1] = m.content end
        results = results_in(turn.messages)
        return "ok"
      end) }
      support.with_agents(boss, { worker = worker }, function()
        local c = t.converse(boss, { "go" })
        local id = kinds(c.events, "task.started")[1].taskId
        assert.are.equal(("Stopped %s; it won't report back."):format(id), seen[1])
        local as = kinds(c.events, "agent.started")
        assert.are.equal(1, #as)
        local child = as[1].sessionId
        for _ = 1, 50 do -- the child's turn ends as cancelled
          if #kinds(t.events(child), "turn.completed") == 1 then break end
          t.drive(child, 50)
          core.wait(10)
        end
        local done = kinds(t.events(child), "turn.completed")
        assert.are.equal(1, #done)
        assert.is_true(done[1].cancelled)
        c = t.converse(boss, { "again" }, { sessionId = c.sessionId })
        assert.are.equal(1, #kinds(c.events, "agent.started"))
        assert.are.same({ "long job", "small job" }, child_saw)
        local all = table.concat(results, "\n")
        assert.truthy(all:find("quick: small job", 1, true))
        assert.falsy(all:find("cancelled", 1, true))
        local settled = kinds(c.events, "task.settled")
        assert.are.same({ "cancelled", "completed" }, { settled[1].status, settled[2].status })
      end)
      engine.tools.worker, engine.tools.long_job = nil, nil
    end)

  it("adds the root copy `agent` for a loaded root agent; a session of the copy does not offer it again, nor "
    .. "reach it through ctx.agent or list it in ctx.agents", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir -p " .. dir .. "/tools"))
      local f = assert(io.open(dir .. "/agent.lua", "w"))
      f:write('local moor = require "moor"\n'
        .. 'return moor.defineAgent { model = moor.testing.script { "hi" }, instructions = "x" }\n')
      f:close()
      f = assert(io.open(dir .. "/tools/probe.lua", "w"))
      f:write('local moor = require "moor"\n'
        .. 'return moor.defineWorkflowTool { description = "probe", inputSchema = moor.schema.object {},\n'
        .. '  execute = function(_, ctx)\n'
        .. '    local ok, err = pcall(function() return ctx.agent("agent"):send("again"):result() end)\n'
        .. '    return { listed = ctx.agents.agent ~= nil, ok = ok, code = not ok and err.code or nil }\n'
        .. '  end }\n')
      f:close()
      local saved_tools, saved_agent, saved_agents, saved_path = {}, engine.agent, engine.agents, package.path
      for k, v in pairs(engine.tools) do saved_tools[k] = v end
      local ok, err = pcall(function()
        assert(loader.load(dir, engine))
        local root = engine.agent
        assert.are.equal("serve", engine.tools.agent.entry)
        local root_tools, copy_tools, results, probed
        root.model = t.script(function(turn)
          local names = {}
          for _, tl in ipairs(turn.tools) do names[tl.name] = true end
          local m = last(turn)
          if not names.agent then -- the copy
            copy_tools = names
            if is_user(m, "do it") then return call("probe", {}) end
            if m.role == "tool" then probed = json.decode(m.content) end
            return "copy did it"
          end
          root_tools = names
          if is_user(m, "delegate") then return call("agent", { message = "do it" }) end
          results = results_in(turn.messages)
          return "ok"
        end)
        local c = t.converse(root, { "delegate" })
        assert.is_true(root_tools.agent)
        assert.is_table(copy_tools)
        assert.is_nil(copy_tools.agent)
        assert.is_true(copy_tools.probe)
        assert.truthy(table.concat(results, "\n"):find("copy did it", 1, true))
        assert.are.same({ listed = false, ok = false, code = "UnknownAgent" }, probed)
        assert.are.equal(1, #kinds(c.events, "agent.started")) -- no second copy
        -- a workflow of the root session does list and reach it
        local listed = t.call(moor.defineWorkflowTool { description = "x", inputSchema = s.object {},
          execute = function(_, ctx) return ctx.agents.agent ~= nil end }, {})
        assert.is_true(listed)
      end)
      for k in pairs(engine.tools) do engine.tools[k] = nil end
      for k, v in pairs(saved_tools) do engine.tools[k] = v end
      engine.agent, engine.agents, package.path = saved_agent, saved_agents, saved_path
      os.execute("rm -rf " .. dir)
      if not ok then error(err, 0) end
    end)
end)
