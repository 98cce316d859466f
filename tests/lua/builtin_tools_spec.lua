-- moor's built-in tools (the top-level tools/ folder) through scripted-model
-- sessions, moor.disableTool(), and awaitable abort signals across replay.
local moor = require "moor"
local engine = require "moor.engine"
local core = require "moor.core"
local json = require "moor.json"
local loader = require "moor.loader"
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local t = moor.testing
local s = moor.schema

local function kinds(events, kind)
  local out = {}
  for _, e in ipairs(events) do
    if e.kind == kind then out[#out + 1] = e end
  end
  return out
end

local function children(session_id)
  return core.query("SELECT id, tool, status FROM runs WHERE parent_id=? ORDER BY started, id", session_id) or {}
end

local function tool_names(tools)
  local names = {}
  for _, tl in ipairs(tools or {}) do names[#names + 1] = tl.name end
  table.sort(names)
  return names
end

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec", inputSchema = s.object {}, execute = execute }
end

describe("the built-in sleep tool", function()
  it("holds no polling while it waits four hours, and a steering message interrupts it", function()
    local seen = {}
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        -- (the transcript grows after the call: keep what this call saw)
        seen[turn.n] = { tools = turn.tools, messages = { table.unpack(turn.messages) } }
        if turn.n == 1 then return { toolCalls = { { name = "sleep", input = { seconds = 14400 } } } } end
        return "woke up"
      end),
    }
    local timers_before = engine.stats().timers
    local c = t.converse(agent, { "wait four hours" })
    local sid = c.sessionId
    -- The model sees the built-ins next to the spec's own tools.
    local names = tool_names(seen[1].tools)
    assert.truthy(#names >= 2)
    local has = {}
    for _, n in ipairs(names) do has[n] = true end
    assert.is_true(has.sleep)
    assert.is_true(has.ask_question)

    local kids = children(sid)
    assert.are.equal(1, #kids)
    assert.are.equal("sleep", kids[1].tool)
    assert.are.equal("running", kids[1].status)
    local child = kids[1].id
    local sched = kinds(t.events(child), "timer.scheduled")
    assert.are.equal(1, #sched)
    assert.truthy(sched[1].payload.due - core.now() > 14000 * 1000) -- one timer, four hours out

    -- Several scheduler rounds later the logs have not grown: nothing polls.
    local n_session, n_child = #t.events(sid), #t.events(child)
    for _ = 1, 5 do
      t.step()
      core.wait(30)
    end
    t.step()
    assert.are.equal(n_session, #t.events(sid))
    assert.are.equal(n_child, #t.events(child))

    -- A steering message aborts the call's ctx.abortSignal: the race ends.
    c = t.converse(agent, { "never mind, carry on" }, { sessionId = sid })
    local results = {}
    for _, r in ipairs(c.results) do if r.toolName == "sleep" then results[#results + 1] = r end end
    assert.are.equal(1, #results)
    assert.are.same({ interrupted = true }, results[1].output)
    assert.are.equal('{"interrupted":true}', seen[2].messages[#seen[2].messages - 1].content)
    assert.are.equal("never mind, carry on", seen[2].messages[#seen[2].messages].content)
    assert.are.equal("woke up", c.transcript[#c.transcript].text)

    -- Nothing is left parked: the call's run completed, its four-hour timer is
    -- gone, no question is pending, the session waits only for messages.
    assert.are.equal("completed", engine.run_status(child))
    assert.are.equal(1, #kinds(t.events(child), "run.abort"))
    assert.are.equal(timers_before, engine.stats().timers)
    assert.are.same({}, t.inputs(sid))
    assert.are.equal("running", engine.run_status(sid))
  end)

  it("keeps waiting on its one timer after a restart, and a steer then interrupts it", function()
    loader.register_builtins(engine)
    local id = t.start("sleep", { seconds = 3600 })
    assert.are.equal("running", t.drive(id))
    assert.is_nil((t.restart(id)))        -- replayed: still waiting on its one timer
    assert.are.equal("running", engine.run_status(id))
    assert.are.equal(1, #kinds(t.events(id), "timer.scheduled"))
    assert.is_true(engine.steer(id))
    t.drive(id)
    assert.are.same({ interrupted = true }, (t.outcome(id)))
  end)

  it("returns { waitedSeconds } when its time is up", function()
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then return { toolCalls = { { name = "sleep", input = { seconds = 0.05 } } } } end
        return "done"
      end),
    }
    local c = t.converse(agent, { "nap" })
    assert.are.same({ waitedSeconds = 0.05 }, c.results[1].output)
    assert.are.equal("done", c.transcript[#c.transcript].text)
  end)
end)

describe("the built-in ask_question tool", function()
  local options = { { id = "approve", label = "Deploy", style = "primary" }, { id = "cancel", label = "Cancel" } }

  it("asks the question and returns the answer", function()
    local seen
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then
          return { toolCalls = { { name = "ask_question", input = { prompt = "Deploy api?", display = "confirmation",
            options = options } } } }
        end
        seen = turn.messages[#turn.messages]
        return "ok"
      end),
    }
    local c = t.converse(agent, { "deploy api" })
    local pending = t.inputs(c.sessionId)
    assert.are.equal(1, #pending)
    assert.are.equal("Deploy api?", pending[1].request.prompt)
    assert.are.equal("confirmation", pending[1].request.display)
    assert.are.equal("approve", pending[1].request.options[1].id)
    assert.is_true(t.answer(pending[1].requestId, { optionId = "approve" }))
    t.drive(c.sessionId)
    assert.are.equal("tool", seen.role)
    assert.are.same({ status = "answered", optionId = "approve" }, json.decode(seen.content))
    assert.are.same({}, t.inputs(c.sessionId))
  end)

  it("is withdrawn (cancelled) by a steering message that does not answer it", function()
    local seen
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then
          return { toolCalls = { { name = "ask_question", input = { prompt = "Deploy?", options = options } } } }
        end
        seen = { table.unpack(turn.messages) }
        return "ok"
      end),
    }
    local c = t.converse(agent, { "deploy" })
    assert.are.equal(1, #t.inputs(c.sessionId))
    t.converse(agent, { "something else entirely" }, { sessionId = c.sessionId })
    assert.are.same({ status = "cancelled" }, json.decode(seen[#seen - 1].content))
    assert.are.same({}, t.inputs(c.sessionId))
  end)
end)

describe("moor.disableTool and an agent's own tools", function()
  local project = support.project

  -- Load dir into the engine, run fn, then put the engine back as it was.
  local function with_project(dir, fn)
    local saved_tools, saved_agent, saved_agents, saved_path = {}, engine.agent, engine.agents, package.path
    for k, v in pairs(engine.tools) do saved_tools[k] = v end
    local ok, err = pcall(fn, loader.load(dir, engine))
    for k in pairs(engine.tools) do engine.tools[k] = nil end
    for k, v in pairs(saved_tools) do engine.tools[k] = v end
    engine.agent, engine.agents, package.path = saved_agent, saved_agents, saved_path
    os.execute("rm -rf " .. dir)
    if not ok then error(err, 0) end
  end

  local AGENT = 'local moor = require "moor"\n'
    .. 'return moor.defineAgent { model = moor.testing.script { "hi" }, instructions = "x" }\n'

  it("hides a disabled built-in and a disabled subagent from the model; an own tool replaces a built-in", function()
    local dir = project {
      ["agent.lua"] = AGENT,
      ["tools/sleep.lua"] = 'return require("moor").disableTool()\n',
      ["tools/helper.lua"] = 'return require("moor").disableTool()\n',
      ["tools/ask_question.lua"] = 'local moor = require "moor"\nreturn moor.defineTool { description = "mine", '
        .. 'inputSchema = moor.schema.object {}, execute = function() return "my own" end }\n',
      ["subagents/helper/agent.lua"] = 'local moor = require "moor"\nreturn moor.defineAgent { '
        .. 'model = moor.testing.script { "helped" }, instructions = "help", description = "Helps." }\n',
    }
    with_project(dir, function(ok, err)
      assert.is_true(ok, err)
      local seen
      local agent = engine.agent
      agent.model = t.script(function(turn)
        if turn.n == 1 then
          seen = turn.tools
          return { toolCalls = { { name = "ask_question", input = {} } } }
        end
        return "done"
      end)
      local c = t.converse(agent, { "hi" })
      -- (agent: the root copy, a serve tool, so the task tools come with it)
      assert.are.same({ "agent", "ask_question", "moor__task_cancel", "moor__task_wait" }, tool_names(seen))
      assert.are.equal("mine", seen[2].description)
      assert.are.equal("my own", c.results[1].output)
      -- Hidden from the model, the subagent stays callable through ctx.agent.
      assert.truthy(engine.agents.helper)
      local res = t.call(workflow(function(_, ctx) return ctx.agent("helper"):send("x"):result() end), {})
      assert.are.equal("helped", res.message)
    end)
  end)

  it("loads the built-ins for an agent that has no tools of its own", function()
    with_project(project { ["agent.lua"] = AGENT }, function(ok, err)
      assert.is_true(ok, err)
      local seen
      engine.agent.model = t.script(function(turn) seen = turn.tools; return "hi" end)
      t.converse(engine.agent, { "hi" })
      assert.are.same({ "agent", "ask_question", "moor__task_cancel", "moor__task_wait", "sleep" }, tool_names(seen))
    end)
  end)

  it("refuses a disableTool file that names nothing to hide", function()
    with_project(project { ["agent.lua"] = AGENT, ["tools/nothing.lua"] = 'return require("moor").disableTool()\n' },
      function(ok, err)
        assert.is_nil(ok)
        assert.truthy(err:find("tools/nothing.lua:1: moor.disableTool() hides a built-in tool or a subagent, "
          .. "and none is named 'nothing' (the built-in tools: ask_question, sleep)", 1, true), err)
      end)
  end)
end)

describe("awaitable abort signals", function()
  it("settles moor.race, signal:wait() and abort listeners at the same point after a restart", function()
    local tool = workflow(function(_, ctx)
      local heard = {}
      ctx.abortSignal:addEventListener("abort", function(ev)
        heard[#heard + 1] = ev.type .. ":" .. tostring(ev.target.reason)
      end)
      local v, idx = moor.race { moor.timer("1h"), ctx.abortSignal }
      local reason = ctx.abortSignal:wait() -- aborted already: at once
      -- Then a wait of another kind (a question would be withdrawn at once by
      -- the aborted signal).
      local hook = moor.createHook { token = "spec-signal-" .. ctx.runId }
      local answer = hook:await()
      return { v = v, idx = idx, reason = reason, heard = heard, answer = answer }
    end)
    local id = t.start(tool, {})
    assert.are.equal("running", t.drive(id)) -- parked on the race
    assert.is_true(engine.steer(id))
    assert.are.equal("running", t.drive(id)) -- parked on the hook
    local n = #t.events(id)
    local res, err = t.restart(id)          -- replayed: the race resolves from the logged run.abort
    assert.is_nil(res)
    assert.is_nil(err)
    assert.are.equal("running", engine.run_status(id))
    assert.are.equal(n, #t.events(id))      -- the replay re-issued the same ops, none new
    assert.are.equal("hook", (t.deliver("spec-signal-" .. id, "yes")))
    t.drive(id)
    res, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.same({ v = "steered", idx = 2, reason = "steered", heard = { "abort:steered" }, answer = "yes" }, res)
  end)

  it("keeps a body waiting on signal:wait() across a restart until the abort arrives", function()
    local tool = workflow(function(_, ctx) return { reason = ctx.abortSignal:wait() } end)
    local id = t.start(tool, {})
    assert.are.equal("running", t.drive(id))
    local n = #t.events(id)
    assert.is_nil((t.restart(id)))
    assert.are.equal("running", engine.run_status(id))
    assert.are.equal(n, #t.events(id)) -- the wait records nothing and polls nothing
    assert.is_true(engine.steer(id))
    t.drive(id)
    assert.are.same({ reason = "steered" }, (t.outcome(id)))
  end)

  it("lets moor.all wait for an AbortController's signal and a branch", function()
    local res, err = t.call(workflow(function()
      local ac = moor.AbortController()
      local f = moor.async(function()
        moor.sleep("10ms")
        ac:abort("done")
        return 7
      end)
      local vals = moor.all { ac.signal, f }
      return { vals[1], vals[2], ac.signal.aborted }
    end), {})
    assert.is_nil(err)
    assert.are.same({ "done", 7, true }, res)
  end)

  it("has the web's listener methods, and refuses to wait outside a body", function()
    local ac = moor.AbortController()
    local calls = {}
    local function a(ev) calls[#calls + 1] = "a:" .. ev.type end
    local function b() calls[#calls + 1] = "b" end
    local function c() calls[#calls + 1] = "c" end
    ac.signal:addEventListener("abort", a, { once = true })
    ac.signal:addEventListener("abort", function() error("a listener that breaks") end)
    ac.signal:addEventListener("abort", b)
    ac.signal:addEventListener("abort", c)
    ac.signal:removeEventListener("abort", c)
    ac.signal:throwIfAborted()
    ac.abort("why")
    assert.are.same({ "a:abort", "b" }, calls)
    assert.are.equal("why", ac.signal.reason)
    local ok, e = pcall(ac.signal.throwIfAborted, ac.signal)
    assert.is_false(ok)
    assert.are.equal("Aborted", e.code)
    assert.has_error(function() ac.signal:wait() end,
      "signal:wait belongs in a workflow body (defineWorkflowTool's execute), not in a step or plain code")
    assert.has_error(function() ac.signal:addEventListener("click", b) end,
      "addEventListener: a signal has only the \"abort\" event")
  end)
end)
