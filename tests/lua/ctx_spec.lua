-- The ctx a tool gets, whoever calls it (issue 7, items 16, 17, 19, 23, 24).
local moor = require "moor"
local errors = require "moor.errors"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local register = support.register

local function keys(tbl)
  local out = {}
  for k in pairs(tbl) do out[#out + 1] = k end
  table.sort(out)
  return out
end

local function kind(events, k)
  local out = {}
  for _, e in ipairs(events) do if e.kind == k then out[#out + 1] = e.payload end end
  return out
end

register("ctx_shape", moor.defineTool {
  description = "Reports its ctx.",
  inputSchema = s.object {},
  execute = function(_, ctx)
    return { keys = keys(ctx), aborted = ctx.abortSignal.aborted, session = ctx.session.id or "none" }
  end,
})

register("add_finding", moor.defineTool {
  description = "Records a finding once.",
  inputSchema = s.object {},
  execute = function()
    error("src/a.ts:3 is already recorded")
  end,
})

register("wf_fails", moor.defineWorkflowTool {
  description = "A workflow that raises.",
  inputSchema = s.object {},
  execute = function()
    moor.sleep("1ms")
    error("the plan is empty")
  end,
})

describe("ctx", function()
  it("a plain tool gets the same ctx shape in a session as under moor call, abortSignal included", function()
    local direct = t.call("ctx_shape", {})
    assert.is_false(direct.aborted)
    assert.are.equal("none", direct.session)
    local agent = support.calling { { name = "ctx_shape", input = {} } }
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "shape" })
      local out = c.results[1].output
      assert.is_table(out, "the tool failed in the session: " .. tostring(c.results[1].error))
      assert.are.same(direct.keys, out.keys)
      assert.is_false(out.aborted)
      assert.are.equal(c.sessionId, out.session)
    end)
    for _, k in ipairs { "abortSignal", "callId", "session", "toolName" } do
      local found = false
      for _, have in ipairs(direct.keys) do found = found or have == k end
      assert.is_true(found, k)
    end
  end)

  it("a workflow's ctx shows the stubs and a session table of its own, shared through its metatable", function()
    local shape = moor.defineWorkflowTool {
      description = "Reports its ctx.", inputSchema = s.object {},
      execute = function(_, ctx, task)
        local k = keys(ctx)
        ctx.session.mine = true -- its own table: no other run sees it
        -- (an execute tool's call is no task: seed 003 §8, task exists only for tasks)
        return { keys = k, session = ctx.session.id or "none", task = task == nil and "none" or "some",
                 stub = type(ctx.getToken) }
      end,
    }
    local a = t.call(shape, {})
    local b = t.call(shape, {})
    for _, want in ipairs { "abortSignal", "agent", "ask", "callId", "getSandbox", "getSkill", "getToken",
                            "requireAuth", "runId", "session", "toolName" } do
      local found = false
      for _, have in ipairs(a.keys) do found = found or have == want end
      assert.is_true(found, want .. " in " .. table.concat(a.keys, ","))
    end
    assert.are.same(a.keys, b.keys)
    assert.are.equal("none", b.session)
    assert.are.equal("none", a.task)
    assert.are.equal("function", a.stub)
  end)

  it("agent.started reaches the session's stream with callId, turnId, name, sessionId and streamPath", function()
    local helper = moor.defineAgent { instructions = "help", model = t.script { "hello" }, tool = false }
    register("delegate", moor.defineWorkflowTool {
      description = "Asks the helper.",
      inputSchema = s.object {},
      execute = function(_, ctx)
        return ctx.agent("helper"):send("hi"):result()
      end,
    })
    local root = support.calling { { id = "call_D", name = "delegate", input = {} } }
    support.with_agents(root, { helper = helper }, function()
      local c = t.converse(root, { "delegate it" })
      local started = kind(c.events, "agent.started")
      assert.are.equal(1, #started)
      local p = started[1]
      assert.are.equal("helper", p.name)
      assert.are.equal("call_D", p.callId)
      assert.are.equal("turn_1", p.turnId)
      assert.is_string(p.sessionId)
      assert.are.equal("/v1/sessions/" .. p.sessionId .. "/stream", p.streamPath)
      assert.are.equal(moor.json.null, p.taskId or moor.json.null) -- no tasks yet: omitted
      assert.are.same({ status = "waiting", message = "hello" }, c.results[1].output)
    end)
  end)

  it("a tool's error reaches the model as written; its position goes to the log only", function()
    local seen = {}
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then
          return { toolCalls = { { name = "add_finding", input = {} }, { name = "wf_fails", input = {} } } }
        end
        for _, m in ipairs(turn.messages) do
          if m.role == "tool" then seen[m.name] = m.content end
        end
        return "ok"
      end),
    }
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "record" })
      assert.are.equal("src/a.ts:3 is already recorded", seen.add_finding)
      assert.are.equal("the plan is empty", seen.wf_fails)
      local errs = kind(c.events, "step.error")
      assert.are.equal(1, #errs)
      assert.truthy(errs[1].error.where:find("ctx_spec%.lua:%d+$"), errs[1].error.where)
    end)
    local _, err, id = t.call("wf_fails", {})
    assert.are.equal("the plan is empty", err.message)
    assert.is_nil(err.where) -- the run's error, as the API shows it: no host path
    local failed = kind(t.events(id), "run.failed")[1]
    assert.truthy(failed.where:find("ctx_spec%.lua:%d+$"), failed.where)
    local _, perr = t.call("add_finding", {})
    assert.are.equal("src/a.ts:3 is already recorded", perr.message)
  end)

  it("missing features fail with NotSupported; getToken of an unknown connection fails, and no step retries", function()
    local ok, e = pcall(moor.workflow, { maxSubagents = 20 })
    assert.is_false(ok)
    assert.is_true(errors.is(e, "NotSupported"), tostring(e))
    local token_step = moor.step("token", function(ctx) return ctx.getToken("github") end)
    local _, err, id = t.call(moor.defineWorkflowTool {
      description = "x", inputSchema = s.object {},
      execute = function(_, ctx) return token_step(ctx) end,
    }, {})
    assert.are.equal("FatalError", err.code)
    assert.truthy(err.message:find("ctx.getToken: there is no connection named 'github'", 1, true), err.message)
    assert.are.equal(0, #kind(t.events(id), "step.retry"))
    _, err = t.call(moor.defineTool {
      description = "x", inputSchema = s.object {},
      execute = function(_, ctx) return ctx.requireAuth("github") end,
    }, {})
    assert.are.equal("FatalError", err.code)
    assert.truthy(err.message:find("no connection named 'github'", 1, true), err.message)
  end)

  it("moor.AbortController keeps the reason with either call form", function()
    local res = t.call(moor.defineWorkflowTool {
      description = "x", inputSchema = s.object {},
      execute = function()
        local a, b = moor.AbortController(), moor.AbortController()
        a.abort("why")
        b:abort("because")
        return { a = a.signal.reason, b = b.signal.reason, aborted = a.signal.aborted and b.signal.aborted }
      end,
    }, {})
    assert.are.same({ a = "why", b = "because", aborted = true }, res)
  end)
end)
