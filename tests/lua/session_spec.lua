-- Sessions: the durable turn loop with a scripted model (moor.testing.script).
local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local kinds = support.kinds

local register = support.register

register("add", moor.defineTool {
  description = "Add two integers.",
  inputSchema = s.object { a = s.integer(), b = s.integer() },
  execute = function(input) return { sum = input.a + input.b } end,
})

register("explode", moor.defineTool {
  description = "Always fails.",
  inputSchema = s.object {},
  execute = function() error(moor.FatalError("the tool broke")) end,
})

local slow_calls = 0
register("slow_double", moor.defineWorkflowTool {
  description = "Double a number after a short durable sleep.",
  inputSchema = s.object { n = s.integer() },
  execute = function(input)
    moor.sleep("20ms")
    slow_calls = slow_calls + 1
    return { doubled = input.n * 2 }
  end,
})

describe("sessions", function()
  it("answers with the model's final text and records the model step with its usage", function()
    local agent = moor.defineAgent { model = t.script { "Hello there." }, instructions = "Be brief." }
    local c = t.converse(agent, { "hi" })
    assert.are.same({ { role = "user", text = "hi" },
      { role = "assistant", text = "Hello there.", turnId = "turn_1" } }, c.transcript)
    local model_steps = {}
    for _, e in ipairs(c.events) do
      if e.kind == "step.result" and e.name == "model" then model_steps[#model_steps + 1] = e.payload end
    end
    assert.are.equal(1, #model_steps)
    assert.is_table(model_steps[1].usage)
    assert.are.equal(1, #kinds(c.events, "turn.completed"))
  end)

  it("runs a plain tool call in a step and feeds the result back", function()
    local seen
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then return { toolCalls = { { name = "add", input = { a = 2, b = 3 } } } } end
        seen = turn.messages[#turn.messages]
        return "The sum is 5."
      end),
    }
    local c = t.converse(agent, { "add 2 and 3" })
    assert.are.equal("tool", seen.role)
    assert.are.equal('{"sum":5}', seen.content)
    assert.are.same({ sum = 5 }, c.results[1].output)
    assert.are.equal("The sum is 5.", c.transcript[2].text)
  end)

  it("runs workflow tools as child runs, parallel calls concurrently", function()
    slow_calls = 0
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then
          return { toolCalls = { { name = "slow_double", input = { n = 1 } },
                                 { name = "slow_double", input = { n = 2 } } } }
        end
        return "done"
      end),
    }
    local c = t.converse(agent, { "double 1 and 2" })
    assert.are.equal(2, slow_calls)
    assert.are.same({ doubled = 2 }, c.results[1].output)
    assert.are.same({ doubled = 4 }, c.results[2].output)
    -- both children were started before either finished
    local started = 0
    for _, e in ipairs(c.events) do
      if e.kind == "child.started" then started = started + 1 end
      if e.kind == "child.settled" then break end
    end
    assert.are.equal(2, started)
  end)

  it("gives a tool's failure and refused input back to the model as tool errors", function()
    local errs = {}
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then
          return { toolCalls = { { name = "explode", input = {} }, { name = "add", input = { a = "x", b = 1 } },
                                 { name = "nope", input = {} } } }
        end
        for _, m in ipairs(turn.messages) do
          if m.role == "tool" then errs[#errs + 1] = { m.isError, m.content } end
        end
        return "sorry"
      end),
    }
    t.converse(agent, { "go" })
    assert.are.same({ true, "the tool broke" }, errs[1])
    assert.is_true(errs[2][1])
    assert.truthy(errs[2][2]:find("input refused: a: must be an integer", 1, true), errs[2][2])
    assert.are.same({ true, "unknown tool 'nope'" }, errs[3])
  end)

  it("stops a turn after maxSteps", function()
    local agent = moor.defineAgent {
      instructions = "x", maxSteps = 2,
      model = t.script(function() return { toolCalls = { { name = "add", input = { a = 1, b = 1 } } } } end),
    }
    local c = t.converse(agent, { "loop" })
    local done = kinds(c.events, "turn.completed")[1]
    assert.are.equal(2, done.steps)
    assert.truthy(done.reason:find("maxSteps", 1, true))
  end)

  it("reports a model error as a failed turn and keeps the session open", function()
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then return { error = { code = "server_error", message = "upstream broke" } } end
        return "recovered"
      end),
    }
    local c = t.converse(agent, { "one", "two" })
    local failed = kinds(c.events, "turn.failed")
    assert.are.equal(1, #failed)
    assert.truthy(failed[1].error.message:find("upstream broke", 1, true))
    assert.are.equal("recovered", c.transcript[#c.transcript].text)
  end)

  it("does not call the model again for a recorded step after a restart", function()
    local calls = 0
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        calls = calls + 1
        if turn.n == 1 then return { toolCalls = { { name = "slow_double", input = { n = 5 } } } } end
        return "ten"
      end),
    }
    local c = t.converse(agent, { "double five" })
    assert.are.equal(2, calls)
    engine.agent = agent
    t.restart(c.sessionId) -- replay the whole conversation from the log
    assert.are.equal("running", engine.run_status(c.sessionId)) -- replayed cleanly, waiting for messages
    assert.are.equal(2, calls)
    -- and published nothing again: the turn's answer, after its last op, included
    local evs = t.events(c.sessionId)
    assert.are.equal(1, #kinds(evs, "message.completed"))
    assert.are.equal(1, #kinds(evs, "turn.completed"))
    assert.are.equal(1, #kinds(evs, "action.result"))
    -- and it goes on: a new message is a new turn
    t.converse(agent, { "again" }, { sessionId = c.sessionId })
    engine.agent = nil
    assert.are.equal(3, calls)
  end)

  describe("approvals", function()
    local ran = 0
    local function gated(name, approval)
      register(name, moor.defineTool {
        description = "A gated tool.",
        inputSchema = s.object { amount = s.integer() },
        approval = approval,
        execute = function(input) ran = ran + 1; return { charged = input.amount } end,
      })
    end
    gated("charge_always", moor.approval.always())
    gated("charge_once", moor.approval.once())
    gated("charge_never", moor.approval.never())
    gated("charge_policy", function(call) return call.toolInput.amount > 100 end)

    local function answer_all(id, option, extra)
      local n = 0
      for _, q in ipairs(t.inputs(id)) do
        -- an approval's answer names its call and input hash (as a client must)
        local ap = q.request.approval
        local a = { optionId = option, callId = ap.callId, inputHash = ap.inputHash }
        for k, v in pairs(extra or {}) do a[k] = v end
        assert.is_true(t.answer(q.requestId, a))
        n = n + 1
      end
      t.drive(id)
      return n
    end

    it("always(): asks before the call runs; approve runs it, deny returns a denial", function()
      ran = 0
      local c = t.converse(support.calling { { name = "charge_always", input = { amount = 5 } },
                                           { name = "charge_always", input = { amount = 6 } } }, { "charge" })
      local q = t.inputs(c.sessionId)
      assert.are.equal(1, #q)
      assert.are.equal("charge_always", q[1].request.approval.toolName)
      assert.are.equal(0, ran)
      assert.are.equal(1, answer_all(c.sessionId, "approve"))
      assert.are.equal(1, ran)
      assert.are.equal(1, answer_all(c.sessionId, "deny"))
      assert.are.equal(1, ran)
      local results = {}
      for _, e in ipairs(t.events(c.sessionId)) do
        if e.kind == "action.result" then results[#results + 1] = e.payload end
      end
      assert.are.same({ charged = 5 }, results[1].output)
      assert.is_true(results[2].denied)
    end)

    it("once(): a second call in the session does not ask again", function()
      ran = 0
      local c = t.converse(support.calling { { name = "charge_once", input = { amount = 1 } },
                                           { name = "charge_once", input = { amount = 2 } } }, { "go" })
      assert.are.equal(1, answer_all(c.sessionId, "approve"))
      assert.are.equal(0, #t.inputs(c.sessionId))
      assert.are.equal(2, ran)
    end)

    it("never() and a policy that declines run without asking; the policy asks above its limit", function()
      ran = 0
      t.converse(support.calling { { name = "charge_never", input = { amount = 1 } },
                                 { name = "charge_policy", input = { amount = 50 } } }, { "go" })
      assert.are.equal(2, ran)
      local c = t.converse(support.calling { { name = "charge_policy", input = { amount = 500 } } }, { "go" })
      assert.are.equal(1, #t.inputs(c.sessionId))
    end)

    it("refuses an approval answer that names a different call", function()
      local c = t.converse(support.calling { { id = "call_A", name = "charge_always", input = { amount = 9 } } },
        { "go" })
      local q = t.inputs(c.sessionId)[1]
      local ok, status, code = t.answer(q.requestId, { optionId = "approve", callId = "call_OTHER",
        inputHash = q.request.approval.inputHash })
      assert.is_nil(ok)
      assert.are.equal(409, status)
      assert.are.equal("approval_mismatch", code)
      local _, status2 = t.answer(q.requestId, { optionId = "approve", callId = "call_A", inputHash = "bogus" })
      assert.are.equal(409, status2)
      assert.is_true(t.answer(q.requestId, { optionId = "approve", callId = "call_A",
        inputHash = q.request.approval.inputHash }))
    end)
  end)

  it("shows the model toModelOutput's projection while action.result carries the full output", function()
    register("shot", moor.defineTool {
      description = "Screenshot.",
      inputSchema = s.object {},
      execute = function() return { path = "/tmp/x.png", base64 = "iVBORw0KGgo=" } end,
      toModelOutput = function(out)
        return moor.toolOutput.content {
          moor.toolOutputPart.text("Screenshot of " .. out.path),
          moor.toolOutputPart.file(out.base64, { mediaType = "image/png" }),
        }
      end,
    })
    local seen
    local c = t.converse(moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then return { toolCalls = { { name = "shot", input = {} } } } end
        seen = turn.messages[#turn.messages].content
        return "nice"
      end),
    }, { "look" })
    assert.are.equal("text", seen[1].type)
    assert.are.same({ type = "file", data = "iVBORw0KGgo=", mediaType = "image/png" }, seen[2])
    assert.are.equal("/tmp/x.png", c.results[1].output.path)
    assert.has_error(function() moor.toolOutputPart.file("\0\1raw", { mediaType = "image/png" }) end)
  end)

  describe("messages during a turn", function()
    register("confirmer", moor.defineWorkflowTool {
      description = "Asks before doing something.",
      inputSchema = s.object { fail = s.optional(s.boolean()) },
      execute = function(input, ctx)
        local a = ctx.ask { prompt = "Proceed?",
          options = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } } }
        if a.status == "cancelled" and input.fail then error("stopped before finishing") end
        return { answer = a }
      end,
    })
    local session = require "moor.session"

    local function agent(input, log)
      return moor.defineAgent {
        instructions = "x",
        model = t.script(function(turn)
          local copy = {}
          for i, m in ipairs(turn.messages) do copy[i] = m end
          log[#log + 1] = copy
          if turn.n == 1 then return { toolCalls = { { name = "confirmer", input = input } } } end
          return "reply " .. turn.n
        end),
      }
    end

    local function send(id, body)
      assert.is_true((session.send(id, body)))
      t.drive(id)
    end

    local function last_two(messages) return messages[#messages - 1], messages[#messages] end

    it("steer: withdraws the call's question and reaches the model once the call settles", function()
      local log = {}
      local a = agent({}, log)
      local c = t.converse(a, { "go" })
      assert.are.equal(1, #t.inputs(c.sessionId))
      engine.agent = a
      send(c.sessionId, { message = "stop, do something else" })
      engine.agent = nil
      assert.are.equal(0, #t.inputs(c.sessionId))
      local tool_msg, user_msg = last_two(log[2])
      assert.are.equal('{"answer":{"status":"cancelled"}}', tool_msg.content)
      assert.are.same({ role = "user", content = "stop, do something else" }, user_msg)
    end)

    it("steer: a rejection after the abort settles as { interrupted = true }", function()
      local log = {}
      local a = agent({ fail = true }, log)
      local c = t.converse(a, { "go" })
      engine.agent = a
      send(c.sessionId, { message = "never mind" })
      engine.agent = nil
      local tool_msg = last_two(log[2])
      assert.are.equal('{"interrupted":true}', tool_msg.content)
    end)

    it("a plain message that matches an option answers the sole question and never steers", function()
      local log = {}
      local a = agent({}, log)
      local c = t.converse(a, { "go" })
      engine.agent = a
      send(c.sessionId, { message = "Yes" })
      engine.agent = nil
      local _, tool_msg = last_two(log[2])
      assert.are.equal('{"answer":{"optionId":"yes","status":"answered"}}', tool_msg.content)
    end)

    it("queue: waits for the turn and then starts the next one", function()
      local log = {}
      local a = agent({}, log)
      local c = t.converse(a, { "go" })
      engine.agent = a
      send(c.sessionId, { message = "after that, summarize", turnPolicy = "queue" })
      assert.are.equal(1, #t.inputs(c.sessionId)) -- the question is still open
      assert.is_true(t.answer(t.inputs(c.sessionId)[1].requestId, { optionId = "no" }))
      t.drive(c.sessionId)
      engine.agent = nil
      assert.are.equal(3, #log) -- the first turn's two model steps, then the queued message's turn
      local _, user_msg = last_two(log[3])
      assert.are.same({ role = "user", content = "after that, summarize" }, user_msg)
    end)
  end)
end)
