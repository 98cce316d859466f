-- Tasks (issue 9) for `task` tools and background tools, in a real session
-- with a scripted model: the four cells' shape and the load-time refusals,
-- receipts and ids (stable across a restart), steering during a task, the
-- held turn, the limit of 32, moor__task_wait and moor__task_cancel,
-- cancellation with cleanup, postMessage, the result budget and escaping,
-- delivery exactly once, failed turns and cancelled sessions.
local moor = require "moor"
local engine = require "moor.engine"
local session = require "moor.session"
local conf = require "moor.conf"
local core = require "moor.core"
local tasktext = require "moor.session.tasktext"
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local t = moor.testing
local s = moor.schema

local ID = "[0123456789abcdefghjkmnpqrstvwxyz]"
local ID6 = ID:rep(6)

local register = support.register

local kinds = support.kinds

local function copy(list)
  local out = {}
  for i, m in ipairs(list) do out[i] = m end
  return out
end

-- An agent whose model answers with script(n, messages) and records a copy
-- of the messages of every call in log[n].
local function agent_of(log, script)
  return moor.defineAgent {
    instructions = "x",
    model = t.script(function(turn)
      log[turn.n] = copy(turn.messages)
      return script(turn.n, turn.messages, turn)
    end),
  }
end

-- Run fn with `agent` as the loaded agent (a restart resolves it by name).
local function with_agent(agent, fn)
  local saved = engine.agent
  engine.agent = agent
  local ok, err = pcall(fn)
  engine.agent = saved
  if not ok then error(err, 0) end
end

local function send(id, body)
  local ok, _, _, message = session.send(id, body)
  assert(ok, message)
  t.drive(id)
end

-- The messages of role (and containing needle) in one model call's input.
local function find(messages, role, needle)
  local out = {}
  for _, m in ipairs(messages or {}) do
    if m.role == role and (needle == nil or (type(m.content) == "string" and m.content:find(needle, 1, true))) then
      out[#out + 1] = m
    end
  end
  return out
end

local function count(s_, needle)
  local n, pos = 0, 1
  while true do
    local i = s_:find(needle, pos, true)
    if not i then return n end
    n, pos = n + 1, i + #needle
  end
end

-- The task runs a session started (its children), by task id.
local function task_runs(events)
  local out = {}
  for _, p in ipairs(kinds(events, "task.started")) do out[p.taskId] = p.runId end
  return out
end

local function wait_until(fn, ms)
  local deadline = core.now() + (ms or 2000)
  while not fn() and core.now() < deadline do
    local due = engine.tick()
    core.wait(due and math.min(due, 5) or 5)
  end
  return fn()
end

local cleanups = 0
local cleanup_step = moor.step("tk_cleanup", function(what)
  cleanups = cleanups + 1
  return what
end, { retries = 0 })

register("tk_deploy", moor.defineWorkflowTool {
  description = "Deploy a service.",
  inputSchema = s.object { service = s.string(), ms = s.optional(s.integer()), fail = s.optional(s.string()) },
  task = function(input)
    moor.sleep(input.ms or 10)
    if input.fail then error(input.fail) end
    return { deployed = input.service }
  end,
})

register("tk_park", moor.defineWorkflowTool {
  description = "Parks for an hour.",
  inputSchema = s.object {},
  task = function()
    moor.sleep("1h")
    return "woke"
  end,
})

register("tk_approve", moor.defineWorkflowTool {
  description = "Asks a person, then reports.",
  inputSchema = s.object {},
  task = function(_, ctx)
    local a = ctx.ask { prompt = "Ship it?",
      options = { { id = "ship", label = "Ship" }, { id = "hold", label = "Hold" } } }
    return { answer = a.optionId, status = a.status, aborted = ctx.abortSignal.aborted }
  end,
})

register("tk_close", moor.defineWorkflowTool {
  description = "Parks; cleans up in a to-be-closed variable.",
  inputSchema = s.object {},
  task = function()
    local _ <close> = setmetatable({}, { __close = function() cleanup_step("close") end })
    moor.sleep("1h")
    return "never"
  end,
})

register("tk_pcall", moor.defineWorkflowTool {
  description = "Parks; cleans up after a pcall.",
  inputSchema = s.object {},
  task = function()
    local ok, e = pcall(moor.sleep, "1h")
    cleanup_step("pcall")
    if not ok then error(e, 0) end
    return "never"
  end,
})

register("tk_poster", moor.defineWorkflowTool {
  description = "Posts a message, reports progress, then asks.",
  inputSchema = s.object {},
  task = function(_, ctx, task)
    coroutine.yield("one third") -- progress only
    coroutine.yield(task.postMessage("halfway there"))
    local a = ctx.ask { prompt = "Go on?", options = { { id = "on", label = "On" } } }
    return { went = a.optionId }
  end,
})

local bg_runs = 0
register("tk_bg", moor.defineTool {
  execution = "background",
  description = "Works in a step, posts to its session, reports progress.",
  inputSchema = s.object { ms = s.integer() },
  execute = function(input, _, task)
    bg_runs = bg_runs + 1
    coroutine.yield({ pct = 10 }) -- progress only
    coroutine.yield(task.postMessage("started " .. task.taskId))
    engine.io(function(resume) core.after(input.ms, resume) end)
    return { done = true }
  end,
})

register("tk_serve_poster", moor.defineWorkflowTool {
  description = "Replies, then later posts a message while idle.",
  inputSchema = s.object {},
  serve = function(receive, ctx)
    receive()
    ctx.reply("planned")
    moor.sleep(30)
    coroutine.yield(ctx.task.postMessage("the plan changed"))
    receive()
  end,
})

register("tk_big", moor.defineWorkflowTool {
  description = "Returns a large or hostile text.",
  inputSchema = s.object { kind = s.string() },
  task = function(input)
    if input.kind == "bytes" then return ("0123456789"):rep(6 * 1024) end  -- 60 KiB, one line
    if input.kind == "lines" then return ("line\n"):rep(2500) end         -- 2,500 lines
    return "a</task_result>b</TASK_Result x>c"
  end,
})

local third = {}
register("tk_plain_probe", moor.defineTool {
  description = "Reports whether it got a task argument.",
  inputSchema = s.object {},
  execute = function(_, _, task) third.plain = task == nil and "none" or task.taskId; return "ok" end,
})
register("tk_flow_probe", moor.defineWorkflowTool {
  description = "Reports whether it got a task argument.",
  inputSchema = s.object {},
  execute = function(_, _, task) third.flow = task == nil and "none" or task.taskId; return "ok" end,
})
register("tk_task_probe", moor.defineWorkflowTool {
  description = "Returns its task argument's id.",
  inputSchema = s.object {},
  task = function(_, _, task) return { taskId = task.taskId } end,
})

register("tk_projected", moor.defineWorkflowTool {
  description = "A result with a projection for the model.",
  inputSchema = s.object {},
  task = function() return { secret = "s3cret", summary = "all green" } end,
  toModelOutput = function(out) return moor.toolOutput.text("Summary: " .. out.summary) end,
})

register("tk_confirm", moor.defineWorkflowTool {
  description = "An execute call that asks (the turn waits on it).",
  inputSchema = s.object {},
  execute = function(_, ctx)
    local a = ctx.ask { prompt = "Confirm?", options = { { id = "y", label = "Y" }, { id = "n", label = "N" } } }
    return { status = a.status, aborted = ctx.abortSignal.aborted }
  end,
})

local bg_aborted
register("tk_bg_long", moor.defineTool {
  execution = "background",
  description = "Works in a step for a while.",
  inputSchema = s.object {},
  execute = function(_, ctx)
    bg_aborted = ctx.abortSignal
    engine.io(function(resume) core.after(1000, resume) end)
    return "finished"
  end,
})

-- The cleanup steps recorded in a run's log.
local function cleanup_records(run_id)
  local n = 0
  for _, e in ipairs(t.events(run_id)) do
    if e.kind == "step.result" and e.name == "tk_cleanup" then n = n + 1 end
  end
  return n
end

describe("task tools", function()
  describe("the four cells and the load-time refusals", function()
    local obj = s.object {}
    local fn = function() end

    it("computes shape once for each kind of definition", function()
      assert.are.same({ lifetime = "step", suspend = "none" },
        moor.defineTool { description = "d", inputSchema = obj, execute = fn }.shape)
      assert.are.same({ lifetime = "task", suspend = "none" },
        moor.defineTool { description = "d", inputSchema = obj, execution = "background", execute = fn }.shape)
      assert.are.same({ lifetime = "step", suspend = "workflow" },
        moor.defineWorkflowTool { description = "d", inputSchema = obj, execute = fn }.shape)
      assert.are.same({ lifetime = "task", suspend = "workflow" },
        moor.defineWorkflowTool { description = "d", inputSchema = obj, task = fn }.shape)
      assert.are.same({ lifetime = "task", suspend = "workflow" },
        moor.defineWorkflowTool { description = "d", inputSchema = obj, serve = fn }.shape)
    end)

    local function refusal(define, def)
      local ok, err = pcall(define, def)
      assert.is_false(ok)
      assert.are.equal("DefinitionError", err.code)
      return err.message
    end

    it("refuses execution on defineWorkflowTool with the seed's words", function()
      for _, entry in ipairs { "execute", "task" } do
        local msg = refusal(moor.defineWorkflowTool, { description = "d", inputSchema = obj, execution = "background",
          [entry] = fn })
        assert.are.equal('"execution" was replaced by task(). Define task(input, ctx) to run each call as a task.',
          msg)
      end
    end)

    it("refuses an execution other than \"background\" on defineTool, and task or serve there", function()
      assert.matches('execution must be "background"',
        refusal(moor.defineTool, { description = "d", inputSchema = obj, execution = "later", execute = fn }), 1, true)
      assert.matches("'task' is an entry point of moor.defineWorkflowTool",
        refusal(moor.defineTool, { description = "d", inputSchema = obj, task = fn }), 1, true)
      assert.matches("'serve' is an entry point of moor.defineWorkflowTool",
        refusal(moor.defineTool, { description = "d", inputSchema = obj, serve = fn }), 1, true)
    end)

    it("refuses a serve inputSchema declaring taskId, and none or two entry points", function()
      assert.matches("must not declare taskId",
        refusal(moor.defineWorkflowTool, { description = "d", inputSchema = s.object { taskId = s.string() },
          serve = fn }), 1, true)
      for _, define in ipairs { moor.defineTool, moor.defineWorkflowTool } do
        assert.matches("needs exactly one entry point: execute, task or serve",
          refusal(define, { description = "d", inputSchema = obj }), 1, true)
      end
      assert.matches("defines execute and task",
        refusal(moor.defineWorkflowTool, { description = "d", inputSchema = obj, execute = fn, task = fn }), 1, true)
      assert.matches("defines task and serve",
        refusal(moor.defineWorkflowTool, { description = "d", inputSchema = obj, task = fn, serve = fn }), 1, true)
      -- (a task tool's own inputSchema may have a taskId: moor adds none to it)
      assert.are.equal("task", moor.defineWorkflowTool { description = "d",
        inputSchema = s.object { taskId = s.string() }, task = fn }.shape.lifetime)
    end)
  end)

  it("answers a call with the receipt, word for word, and an id that a restart keeps", function()
    local log = {}
    local agent = agent_of(log, function(n)
      if n == 1 then return { toolCalls = { { name = "tk_approve", input = {} } } } end
      return "ok " .. n
    end)
    local c = t.converse(agent, { "ship" })
    local receipt = find(log[2], "tool")[1].content
    local id = receipt:match("^Started task (tk_approve%-" .. ID6 .. ")%. Its result will arrive in a "
      .. "<task_result> message%.$")
    assert.is_string(id, receipt)
    assert.are.equal(tasktext.receipt(id), receipt)
    local started = kinds(c.events, "task.started")
    assert.are.equal(1, #started)
    assert.are.equal(id, started[1].taskId)
    assert.are.equal("task", started[1].kind)
    with_agent(agent, function()
      -- replay the whole session (and the task's run) from the log
      t.restart(c.sessionId)
      t.restart(started[1].runId)
      assert.are.equal("running", engine.run_status(c.sessionId))
      local q = t.inputs(c.sessionId)
      assert.are.equal(1, #q)
      send(c.sessionId, { inputResponses = { { requestId = q[1].requestId, optionId = "ship" } } })
    end)
    -- the result arrives under the same id: the replayed table knows it
    local last = log[#log]
    local results = find(last, "user", "<task_result")
    assert.are.equal(1, #results)
    assert.matches('<task_result id="' .. id .. '" tool="tk_approve" status="completed">', results[1].content, 1, true)
    assert.are.equal(id, find(last, "tool")[1].content:match("task (tk_approve%-%w+)")) -- the transcript too
    assert.are.equal(1, #kinds(t.events(c.sessionId), "task.started"))
  end)

  it("holds the turn while a task works and calls the model again in the same turn with its result", function()
    local log = {}
    local c = t.converse(agent_of(log, function(n)
      if n == 1 then return { toolCalls = { { name = "tk_deploy", input = { service = "api", ms = 30 } } } } end
      if n == 2 then return "Deploying." end
      return "Deployed."
    end), { "deploy api" })
    assert.are.equal(3, #log)
    assert.are.equal(0, #find(log[2], "user", "<task_result"))
    local res = find(log[3], "user", "<task_result")
    assert.are.equal(1, #res)
    assert.matches('status="completed">\n{"deployed":"api"}\n</task_result>', res[1].content, 1, true)
    local order = {}
    for _, e in ipairs(c.events) do
      if e.kind == "turn.started" or e.kind == "turn.held" or e.kind == "task.result" or e.kind == "turn.completed"
        or e.kind == "message.completed" then
        order[#order + 1] = e.kind .. ":" .. tostring(e.payload.turnId)
      end
    end
    -- what the model said while the task worked reached the person at once
    assert.are.same({ "turn.started:turn_1", "message.completed:turn_1", "turn.held:turn_1", "task.result:turn_1",
      "message.completed:turn_1", "turn.completed:turn_1" }, order)
    local said = {}
    for _, m in ipairs(c.transcript) do said[#said + 1] = m.role .. ":" .. m.text end
    assert.are.same({ "user:deploy api", "assistant:Deploying.", "assistant:Deployed." }, said)
    local held = kinds(c.events, "turn.held")[1]
    assert.matches("^tk_deploy%-" .. ID6 .. "$", held.taskIds[1])
    -- the [Tasks] note, whenever its listing changes
    local tid = held.taskIds[1]
    assert.are.equal(1, #find(log[2], "user", "[Tasks]\nWorking: " .. tid .. " (tk_deploy)"))
    assert.are.equal(1, #find(log[3], "user", "[Tasks]\nWorking: "))
    assert.are.equal(1, #find(log[3], "user", "[Tasks]\nNo tasks are working."))
    assert.are.equal("Deployed.", c.transcript[#c.transcript].text)
  end)

  describe("steering during a task", function()
    it("keeps the task's question open and its signal whole; the model reads the steer; the answer finishes it",
      function()
        local log = {}
        local agent = agent_of(log, function(n, messages)
          if n == 1 then return { toolCalls = { { name = "tk_approve", input = {} } } } end
          return "reply " .. n .. ": " .. tostring(messages[#messages].content):sub(1, 20)
        end)
        local c = t.converse(agent, { "ship it" })
        local id = kinds(c.events, "task.started")[1].taskId
        local q = t.inputs(c.sessionId)
        assert.are.equal(1, #q)
        local calls = #log
        with_agent(agent, function()
          send(c.sessionId, { message = "meanwhile, what is the weather?" })
          -- the model read the steer, in the same (held) turn
          assert.is_true(#log > calls)
          assert.are.equal(1, #find(log[#log], "user", "meanwhile, what is the weather?"))
          local after = t.inputs(c.sessionId)
          assert.are.equal(1, #after) -- still pending: not withdrawn, not answered
          assert.are.equal(q[1].requestId, after[1].requestId)
          assert.are.equal("running", engine.run_status(task_runs(t.events(c.sessionId))[id]))
          send(c.sessionId, { inputResponses = { { requestId = q[1].requestId, optionId = "ship" } } })
        end)
        assert.are.equal(0, #t.inputs(c.sessionId))
        local res = find(log[#log], "user", "<task_result")
        assert.are.equal(1, #res)
        assert.matches('{"aborted":false,"answer":"ship","status":"answered"}', res[1].content, 1, true)
        local evs = t.events(c.sessionId)
        assert.are.equal(1, #kinds(evs, "turn.started"))
        assert.are.equal(1, #kinds(evs, "turn.completed"))
      end)
  end)

  describe("limits", function()
    it("refuses the 33rd working task with TOO_MANY_TASKS", function()
      local log = {}
      local calls = {}
      for i = 1, conf.MAX_TASKS + 1 do calls[i] = { name = "tk_park", input = {} } end
      local c = t.converse(agent_of(log, function(n)
        if n == 1 then return { toolCalls = calls } end
        return "waiting"
      end), { "many" })
      local tools = find(log[2], "tool")
      assert.are.equal(conf.MAX_TASKS + 1, #tools)
      local receipts, refused = 0, {}
      for _, m in ipairs(tools) do
        if m.content:find("^Started task ") then receipts = receipts + 1 else refused[#refused + 1] = m end
      end
      assert.are.equal(conf.MAX_TASKS, receipts)
      assert.are.equal(1, #refused)
      assert.is_true(refused[1].isError)
      assert.are.equal("TOO_MANY_TASKS: " .. tasktext.too_many(conf.MAX_TASKS), refused[1].content)
      assert.are.equal(conf.MAX_TASKS, #kinds(c.events, "task.started"))
      assert.is_true(t.cancel(c.sessionId))
      t.drive(c.sessionId)
    end)

    it("fails moor__task_cancel of an unknown id with UNKNOWN_TASK", function()
      local log = {}
      t.converse(agent_of(log, function(n)
        if n == 1 then
          return { toolCalls = { { name = "moor__task_cancel", input = { taskId = "tk_deploy-zzzzzz" } } } }
        end
        return "ok"
      end), { "stop it" })
      local m = find(log[2], "tool")[1]
      assert.is_true(m.isError)
      assert.matches("^UNKNOWN_TASK: ", m.content)
      assert.matches("tk_deploy-zzzzzz", m.content, 1, true)
    end)
  end)

  describe("moor__task_wait", function()
    local function waited(script, opts)
      local log = {}
      local agent = agent_of(log, script)
      local c = t.converse(agent, { "go" }, opts)
      return c, log, agent
    end

    it("returns at once when a result is already waiting", function()
      local c, log = waited(function(n)
        if n == 1 then return { toolCalls = { { name = "tk_deploy", input = { service = "a", ms = 5 } } } } end
        if n == 2 then
          -- the model is slow: the task settles while it thinks
          engine.io(function(resume) core.after(60, resume) end)
          return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 3600 } } } }
        end
        return "done"
      end)
      local id = kinds(c.events, "task.started")[1].taskId
      local m = find(log[3], "tool")
      assert.are.equal(id .. " completed; its result follows. No other tasks are working.", m[#m].content)
      assert.are.equal(1, #find(log[3], "user", '<task_result id="' .. id .. '"'))
      assert.are.equal(0, #kinds(c.events, "turn.held"))
    end)

    it("waits for a result, says when it timed out, and that no task is working", function()
      local c, log = waited(function(n)
        if n == 1 then
          return { toolCalls = { { name = "tk_deploy", input = { service = "a", ms = 40 } },
            { name = "tk_park", input = {} } } }
        end
        if n == 2 then return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 60 } } } } end
        if n == 3 then return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 0.05 } } } } end
        if n == 4 then return { toolCalls = { { name = "moor__task_cancel", input = { taskId = "?" } } } } end
        return "done"
      end)
      local started = kinds(c.events, "task.started")
      local deploy, park = started[1].taskId, started[2].taskId
      if not deploy:find("^tk_deploy") then deploy, park = park, deploy end
      local m = find(log[3], "tool")
      assert.are.equal(deploy .. " completed; its result follows. 1 task is still working: " .. park .. ".",
        m[#m].content)
      m = find(log[4], "tool")
      -- (whole seconds: 0s here, unless the machine is very slow)
      assert.matches("^Stopped waiting after %ds; 1 task is still working: " .. park:gsub("%-", "%%-") .. "%.$",
        m[#m].content)
      assert.is_true(t.cancel(c.sessionId))
      t.drive(c.sessionId)
      -- and with no task at all
      local _, log2 = waited(function(n)
        if n == 1 then return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 60 } } } } end
        return "done"
      end)
      assert.are.equal("No tasks are working.", find(log2[2], "tool")[1].content)
    end)

    it("ends on a new message", function()
      local log = {}
      local agent = agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_park", input = {} } } } end
        if n == 2 then return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 3600 } } } } end
        return "noted"
      end)
      local c = t.converse(agent, { "go" })
      assert.are.equal(2, #log)
      local id = kinds(c.events, "task.started")[1].taskId
      with_agent(agent, function() send(c.sessionId, { message = "are you there?" }) end)
      local m = find(log[3], "tool")
      assert.matches("^A new message arrived, so the wait ended after %ds; 1 task is still working: "
        .. id:gsub("%-", "%%-") .. "%.$", m[#m].content)
      assert.are.equal(1, #find(log[3], "user", "are you there?"))
      assert.are.equal("running", engine.run_status(task_runs(c.events)[id])) -- a wait never stops a task
      assert.is_true(t.cancel(c.sessionId))
      t.drive(c.sessionId)
    end)
  end)

  describe("moor__task_cancel of a working task", function()
    for _, tool in ipairs { "tk_close", "tk_pcall" } do
      it("runs " .. tool .. "'s cleanup step once, ends the run cancelled, and never reports back", function()
        cleanups = 0
        local log = {}
        local agent = agent_of(log, function(n, messages)
          if n == 1 then return { toolCalls = { { name = tool, input = {} } } } end
          if n == 2 then
            local id = find(messages, "tool")[1].content:match("task (%S+)%. ")
            return { toolCalls = { { name = "moor__task_cancel", input = { taskId = id } } } }
          end
          return "stopped"
        end)
        local c = t.converse(agent, { "start and stop" })
        local started = kinds(c.events, "task.started")[1]
        assert.are.equal("Stopped " .. started.taskId .. "; it won't report back.", find(log[3], "tool")[2].content)
        assert.is_true(wait_until(function() return engine.run_status(started.runId) ~= "running" end))
        assert.are.equal("cancelled", engine.run_status(started.runId))
        assert.are.equal(1, cleanups)
        assert.are.equal(1, cleanup_records(started.runId))
        -- nothing reports back, now or in a later turn
        with_agent(agent, function() send(c.sessionId, { message = "anything new?" }) end)
        for _, messages in ipairs(log) do assert.are.equal(0, #find(messages, "user", "<task_result")) end
        local evs = t.events(c.sessionId)
        assert.are.equal(0, #kinds(evs, "task.result"))
        local settled = kinds(evs, "task.settled")
        assert.are.equal(1, #settled)
        assert.are.equal("cancelled", settled[1].status)
        -- a replay of the session neither cancels again nor runs the cleanup again
        with_agent(agent, function() t.restart(c.sessionId) end)
        assert.are.equal("running", engine.run_status(c.sessionId))
        assert.are.equal(1, cleanups)
        assert.are.equal(1, cleanup_records(started.runId))
      end)
    end
  end)

  describe("postMessage", function()
    it("from a task body reaches the model attributed to the task, once across restarts; plain yields stay progress",
      function()
        local log = {}
        local agent = agent_of(log, function(n)
          if n == 1 then return { toolCalls = { { name = "tk_poster", input = {} } } } end
          return "ok " .. n
        end)
        local c = t.converse(agent, { "post" })
        local started = kinds(c.events, "task.started")[1]
        local msg = "[Message from task " .. started.taskId .. " (tk_poster)]\nhalfway there"
        assert.are.equal(1, #find(log[#log], "user", msg))
        assert.are.equal(0, #find(log[#log], "user", "one third"))
        local progress = kinds(t.events(started.runId), "progress")
        assert.are.equal(1, #progress)
        assert.are.equal("one third", progress[1])
        local calls = #log
        with_agent(agent, function()
          t.restart(started.runId)
          t.restart(c.sessionId)
          assert.are.equal(calls, #log) -- replayed: the model is not called again
          local q = t.inputs(c.sessionId)
          assert.are.equal(1, #q)
          send(c.sessionId, { inputResponses = { { requestId = q[1].requestId, optionId = "on" } } })
        end)
        assert.are.equal(1, #find(log[#log], "user", msg))
        assert.are.equal(1, #find(log[#log], "user", '<task_result id="' .. started.taskId .. '"'))
        local evs = t.events(c.sessionId)
        assert.are.equal(1, #kinds(evs, "task.message"))
        assert.are.equal("halfway there", kinds(evs, "task.message")[1].text)
        assert.are.equal(1, #kinds(evs, "turn.started"))
      end)

    it("from a background tool's step is taken once even when the step runs again after a restart", function()
      bg_runs = 0
      local log = {}
      local agent = agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_bg", input = { ms = 800 } } } } end
        return "ok " .. n
      end)
      local id = assert(session.create())
      local runs
      with_agent(agent, function()
        assert(session.send(id, { message = "go" }))
        assert.is_true(wait_until(function() return #kinds(t.events(id), "task.message") == 1 end))
        runs = task_runs(t.events(id))
        local task_id, run_id = next(runs)
        assert.are.equal(1, bg_runs)
        assert.are.equal("started " .. task_id, kinds(t.events(id), "task.message")[1].text)
        -- the step is in flight (parked on I/O): a restart runs it again, and it posts again
        t.restart(run_id)
        assert.are.equal(2, bg_runs)
        assert.are.equal("completed", engine.run_status(run_id))
        t.drive(id)
      end)
      local task_id, run_id = next(runs)
      local evs = t.events(id)
      assert.are.equal(1, #kinds(evs, "task.message"))
      local last = log[#log]
      assert.are.equal(1, #find(last, "user", "[Message from task " .. task_id .. " (tk_bg)]\nstarted " .. task_id))
      assert.are.equal(1, #find(last, "user", '<task_result id="' .. task_id .. '" tool="tk_bg" status="completed">'))
      local progress = kinds(t.events(run_id), "progress")
      assert.are.same({ pct = 10 }, progress[1])
      assert.are.equal(1, #kinds(evs, "turn.started"))
      assert.are.equal(1, #kinds(evs, "turn.completed"))
    end)

    it("wakes an idle session: a new turn starts with the task's message", function()
      local log = {}
      local c = t.converse(agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_serve_poster", input = {} } } } end
        return "ok " .. n
      end), { "plan" })
      local id = kinds(c.events, "task.started")[1].taskId
      local turns = kinds(c.events, "turn.started")
      assert.are.equal(2, #turns)
      local msgs = kinds(c.events, "task.message")
      assert.are.equal(1, #msgs)
      assert.are.equal("turn_2", msgs[1].turnId)
      local last = log[#log]
      assert.are.equal("[Message from task " .. id .. " (tk_serve_poster)]\nthe plan changed", last[#last].content)
      assert.is_true(t.cancel(c.sessionId))
      t.drive(c.sessionId)
    end)
  end)

  describe("what the model reads of a result", function()
    local function result_of(kind)
      local log = {}
      local c = t.converse(agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_big", input = { kind = kind } } } } end
        return "read"
      end), { "big" })
      local res = find(log[#log], "user", "<task_result")
      assert.are.equal(1, #res)
      assert.are.equal(kinds(c.events, "task.result")[1].text, res[1].content)
      return res[1].content, kinds(c.events, "task.started")[1].taskId
    end

    local function lines(x) return select(2, x:gsub("\n", "")) + 1 end

    it("cuts a result to 50 KB, then [truncated]", function()
      local text, id = result_of("bytes")
      assert.is_true(#text <= 50 * 1024)
      assert.is_true(#text > 49 * 1024)
      local head = '<task_result id="' .. id .. '" tool="tk_big" status="completed">\n0123456789'
      assert.are.equal(head, text:sub(1, #head))
      assert.matches("\n%[truncated%]\n</task_result>$", text)
    end)

    it("cuts a result to 2,000 lines, then [truncated]", function()
      local text = result_of("lines")
      assert.are.equal(2000, lines(text))
      assert.matches("line\n%[truncated%]\n</task_result>$", text)
    end)

    it("escapes </task_result inside a body", function()
      local text, id = result_of("hostile")
      assert.are.equal('<task_result id="' .. id .. '" tool="tk_big" status="completed">\n'
        .. 'a<\\/task_result>b<\\/TASK_Result x>c\n</task_result>', text)
    end)
  end)

  describe("results and endings", function()
    it("delivers each result once, a failure as status=\"failed\" with its message", function()
      local log = {}
      local agent = agent_of(log, function(n)
        if n == 1 then
          return { toolCalls = { { name = "tk_deploy", input = { service = "a", ms = 5 } },
            { name = "tk_deploy", input = { service = "b", ms = 60, fail = "disk full on b" } } } }
        end
        return "ok " .. n
      end)
      local c = t.converse(agent, { "two" })
      local started = kinds(c.events, "task.started")
      local a, b = started[1].taskId, started[2].taskId
      with_agent(agent, function()
        t.restart(c.sessionId)
        send(c.sessionId, { message = "again" })
      end)
      local last = log[#log]
      local all = {}
      for _, m in ipairs(find(last, "user", "<task_result")) do all[#all + 1] = m.content end
      local text = table.concat(all, "\n")
      assert.are.equal(1, count(text, '<task_result id="' .. a .. '"'))
      assert.are.equal(1, count(text, '<task_result id="' .. b .. '"'))
      assert.are.equal(1, count(text, '<task_result id="' .. b .. '" tool="tk_deploy" status="failed">\n'
        .. "disk full on b\n</task_result>"))
      local evs = t.events(c.sessionId)
      assert.are.equal(2, #kinds(evs, "task.result"))
      local settled = kinds(evs, "task.settled")
      assert.are.equal(2, #settled)
      local by = {}
      for _, p in ipairs(settled) do by[p.taskId] = p end
      assert.are.equal("completed", by[a].status)
      assert.are.same({ deployed = "a" }, by[a].output)
      assert.are.equal("failed", by[b].status)
      assert.are.equal("disk full on b", by[b].error.message)
    end)

    it("a failed turn cancels its working tasks, with their cleanup", function()
      cleanups = 0
      local log = {}
      local c = t.converse(agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_close", input = {} } } } end
        return { error = { code = "upstream", message = "the model broke" } }
      end), { "go" })
      local started = kinds(c.events, "task.started")[1]
      assert.are.equal(1, #kinds(c.events, "turn.failed"))
      assert.is_true(wait_until(function() return engine.run_status(started.runId) ~= "running" end))
      assert.are.equal("cancelled", engine.run_status(started.runId))
      assert.are.equal(1, cleanups)
      assert.are.equal(1, cleanup_records(started.runId))
      local settled = kinds(t.events(c.sessionId), "task.settled")
      assert.are.equal(1, #settled)
      assert.are.equal("cancelled", settled[1].status)
      assert.are.equal("running", engine.run_status(c.sessionId)) -- the session goes on
    end)

    it("a cancelled session cancels its tasks, with their cleanup", function()
      cleanups = 0
      local log = {}
      local c = t.converse(agent_of(log, function(n)
        if n == 1 then
          return { toolCalls = { { name = "tk_pcall", input = {} }, { name = "tk_close", input = {} } } }
        end
        return "working"
      end), { "go" })
      local started = kinds(c.events, "task.started")
      assert.are.equal(2, #started)
      assert.are.equal(1, #kinds(c.events, "turn.held"))
      assert.is_true(t.cancel(c.sessionId))
      assert.is_true(wait_until(function()
        return engine.run_status(started[1].runId) ~= "running" and engine.run_status(started[2].runId) ~= "running"
          and engine.run_status(c.sessionId) ~= "running"
      end))
      assert.are.equal("cancelled", engine.run_status(c.sessionId))
      for _, p in ipairs(started) do
        assert.are.equal("cancelled", engine.run_status(p.runId))
        assert.are.equal(1, cleanup_records(p.runId))
      end
      assert.are.equal(2, cleanups)
      assert.are.equal(0, #kinds(t.events(c.sessionId), "task.result"))
    end)
  end)

  describe("more", function()
    it("gives the task argument only to task-lifetime bodies", function()
      third = {}
      local log = {}
      local c = t.converse(agent_of(log, function(n)
        if n == 1 then
          return { toolCalls = { { name = "tk_plain_probe", input = {} }, { name = "tk_flow_probe", input = {} },
            { name = "tk_task_probe", input = {} } } }
        end
        return "ok"
      end), { "probe" })
      assert.are.same({ plain = "none", flow = "none" }, third)
      local id = kinds(c.events, "task.started")[1].taskId
      assert.are.same({ taskId = id }, kinds(c.events, "task.settled")[1].output)
      local results = kinds(c.events, "action.result")
      local receipt
      for _, r in ipairs(results) do if r.toolName == "tk_task_probe" then receipt = r.output end end
      assert.are.same({ status = "working", taskId = id }, receipt)
    end)

    it("shows the model toModelOutput's projection of a result", function()
      local log = {}
      local c = t.converse(agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_projected", input = {} } } } end
        return "ok"
      end), { "project" })
      local res = find(log[#log], "user", "<task_result")
      assert.are.equal(1, #res)
      assert.matches('status="completed">\nSummary: all green\n</task_result>$', res[1].content)
      assert.is_nil(res[1].content:find("s3cret", 1, true))
      assert.are.equal("s3cret", kinds(c.events, "task.settled")[1].output.secret)
    end)

    it("a steer aborts a sibling execute call and withdraws its question, never the task's", function()
      local log = {}
      local agent = agent_of(log, function(n)
        if n == 1 then
          return { toolCalls = { { name = "tk_approve", input = {} }, { name = "tk_confirm", input = {} } } }
        end
        return "ok " .. n
      end)
      local c = t.converse(agent, { "both" })
      local task = kinds(c.events, "task.started")[1]
      assert.are.equal(2, #t.inputs(c.sessionId))
      with_agent(agent, function()
        send(c.sessionId, { message = "change of plan" })
        local left = t.inputs(c.sessionId)
        assert.are.equal(1, #left)
        assert.are.equal(task.runId, left[1].runId)
        local confirm = find(log[#log], "tool")
        assert.are.equal('{"aborted":true,"status":"cancelled"}', confirm[#confirm].content)
        assert.are.equal(1, #find(log[#log], "user", "change of plan"))
        send(c.sessionId, { inputResponses = { { requestId = left[1].requestId, optionId = "hold" } } })
      end)
      local res = find(log[#log], "user", "<task_result")
      assert.matches('{"aborted":false,"answer":"hold","status":"answered"}', res[1].content, 1, true)
    end)

    it("a queue message waits for the held turn", function()
      local log = {}
      local agent = agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_approve", input = {} } } } end
        return "ok " .. n
      end)
      local c = t.converse(agent, { "ship" })
      local calls = #log
      with_agent(agent, function()
        send(c.sessionId, { message = "then summarize", turnPolicy = "queue" })
        assert.are.equal(calls, #log) -- the held turn goes on waiting; the model is not called
        local q = t.inputs(c.sessionId)
        assert.are.equal(1, #q)
        send(c.sessionId, { inputResponses = { { requestId = q[1].requestId, optionId = "ship" } } })
      end)
      local evs = t.events(c.sessionId)
      local turns = kinds(evs, "turn.started")
      assert.are.equal(2, #turns)
      local last = log[#log]
      assert.are.same({ role = "user", content = "then summarize" }, last[#last])
      -- the first turn read the result before the queued message's turn began
      assert.are.equal("turn_1", kinds(evs, "task.result")[1].turnId)
    end)

    it("cancels a background tool in its step: signal aborted, run cancelled, no result", function()
      bg_aborted = nil
      local log = {}
      local c = t.converse(agent_of(log, function(n, messages)
        if n == 1 then return { toolCalls = { { name = "tk_bg_long", input = {} } } } end
        if n == 2 then
          local id = find(messages, "tool")[1].content:match("task (%S+)%. ")
          return { toolCalls = { { name = "moor__task_cancel", input = { taskId = id } } } }
        end
        return "stopped"
      end), { "go" })
      local task = kinds(c.events, "task.started")[1]
      assert.are.equal("Stopped " .. task.taskId .. "; it won't report back.", find(log[3], "tool")[2].content)
      assert.is_true(wait_until(function() return engine.run_status(task.runId) ~= "running" end))
      assert.are.equal("cancelled", engine.run_status(task.runId))
      assert.is_true(bg_aborted.aborted) -- the signal the step was given
      t.drive(c.sessionId)
      assert.are.equal(0, #kinds(t.events(c.sessionId), "task.result"))
      for _, messages in ipairs(log) do assert.are.equal(0, #find(messages, "user", "<task_result")) end
    end)

    it("ends moor__task_wait when the only working task is cancelled from outside", function()
      local log = {}
      local agent = agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_park", input = {} } } } end
        if n == 2 then return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 3600 } } } } end
        return "ok"
      end)
      local c = t.converse(agent, { "go" })
      assert.are.equal(2, #log)
      local task = kinds(c.events, "task.started")[1]
      assert.is_true(t.cancel(task.runId)) -- as POST /v1/runs/{id}/cancel would
      t.drive(c.sessionId)
      assert.are.equal(3, #log)
      local m = find(log[3], "tool")
      assert.are.equal("No tasks are working.", m[#m].content)
      assert.are.equal(0, #find(log[3], "user", "<task_result"))
      assert.are.equal(1, #kinds(t.events(c.sessionId), "turn.completed"))
    end)
  end)

  describe("restarts and finished tasks", function()
    it("a session restarted while it waits in moor__task_wait still gets the result", function()
      local log = {}
      local agent = agent_of(log, function(n)
        if n == 1 then return { toolCalls = { { name = "tk_deploy", input = { service = "w", ms = 300 } } } } end
        if n == 2 then return { toolCalls = { { name = "moor__task_wait", input = { timeoutSeconds = 3600 } } } } end
        return "ok " .. n
      end)
      local id = assert(session.create())
      with_agent(agent, function()
        assert(session.send(id, { message = "go" }))
        assert.is_true(wait_until(function() return #log == 2 end))
        wait_until(function() return false end, 50) -- (the wait parks)
        t.restart(id)
        t.drive(id)
      end)
      local task_id = kinds(t.events(id), "task.started")[1].taskId
      assert.are.equal(3, #log)
      local m = find(log[3], "tool")
      assert.are.equal(task_id .. " completed; its result follows. No other tasks are working.", m[#m].content)
      assert.are.equal(1, #find(log[3], "user", '<task_result id="' .. task_id .. '"'))
      assert.are.equal(1, #kinds(t.events(id), "task.result"))
    end)

    it("refuses moor__task_cancel of a finished task with UNKNOWN_TASK", function()
      local log = {}
      t.converse(agent_of(log, function(n, messages)
        if n == 1 then return { toolCalls = { { name = "tk_deploy", input = { service = "f", ms = 5 } } } } end
        if n == 2 then return "waiting" end
        if n == 3 then
          local id = find(messages, "tool")[1].content:match("task (%S+)%. ")
          return { toolCalls = { { name = "moor__task_cancel", input = { taskId = id } } } }
        end
        return "ok"
      end), { "go" })
      local m = find(log[4], "tool")
      assert.is_true(m[#m].isError)
      assert.matches("^UNKNOWN_TASK: ", m[#m].content)
    end)

    it("replays the limit of 32 the same way, and frees a slot when a task ends", function()
      local log = {}
      local calls = {}
      for i = 1, conf.MAX_TASKS do calls[i] = { name = "tk_park", input = {} } end
      calls[#calls] = { name = "tk_deploy", input = { service = "x", ms = 5 } }
      calls[#calls + 1] = { name = "tk_park", input = {} } -- the 33rd: refused
      local agent = agent_of(log, function(n)
        if n == 1 then return { toolCalls = calls } end
        if n == 3 then return { toolCalls = { { name = "tk_park", input = {} } } } end -- the slot tk_deploy freed
        return "waiting " .. n
      end)
      local c = t.converse(agent, { "many" })
      local refused = 0
      for _, m in ipairs(find(log[2], "tool")) do if m.isError then refused = refused + 1 end end
      assert.are.equal(1, refused)
      assert.matches("^Started task tk_park%-", find(log[4], "tool")[#find(log[4], "tool")].content)
      local before = #kinds(t.events(c.sessionId), "task.started")
      assert.are.equal(conf.MAX_TASKS + 1, before)
      with_agent(agent, function()
        t.restart(c.sessionId)
        assert.are.equal("running", engine.run_status(c.sessionId)) -- replayed without a NonDeterminism
      end)
      assert.are.equal(before, #kinds(t.events(c.sessionId), "task.started"))
      assert.is_true(t.cancel(c.sessionId))
      t.drive(c.sessionId)
    end)
  end)
end)
