-- Approvals and person-only questions are answered only through the input
-- channels (issue 7, items 4 and 5): never by message text, never by a
-- workflow's ctx.agent():send(), and an approval answer must name its call
-- and input hash (SHA-256 of the input's canonical JSON).
local moor = require "moor"
local engine = require "moor.engine"
local session = require "moor.session"
local core = require "moor.core"
local json = require "moor.json"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local paid = 0
local register = support.register

register("pay", moor.defineTool {
  description = "Pay an amount (gated).",
  inputSchema = s.object { amount = s.integer() },
  approval = moor.approval.always(),
  execute = function(input) paid = paid + 1; return { paid = input.amount } end,
})

register("person_question", moor.defineWorkflowTool {
  description = "Asks a question only a person may answer.",
  inputSchema = s.object { person = s.boolean() },
  execute = function(input, ctx)
    local a = ctx.ask { prompt = "Proceed?", requiresPerson = input.person,
      options = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } } }
    return { answer = a }
  end,
})

local function bound(q, option)
  local ap = q.request.approval
  return { requestId = q.requestId, optionId = option, callId = ap.callId, inputHash = ap.inputHash }
end

describe("approvals are answered only through the input channels", function()
  it("a workflow's ctx.agent():send(\"approve\") leaves the gated call waiting", function()
    paid = 0
    local x = support.calling { { name = "pay", input = { amount = 5 } } }
    x.toolset = { pay = "pay" }
    support.with_agents(support.calling {}, { x = x }, function()
      local id = t.start(moor.defineWorkflowTool {
        description = "relays", inputSchema = s.object {},
        execute = function(_, ctx)
          local h = ctx.agent("x")
          local first = h:send("pay 5 please")
          moor.sleep("150ms") -- the gated call is waiting by now
          h:send("approve")
          return first:result()
        end,
      }, {})
      t.drive(id, 500)
      local q = t.inputs(id)
      assert.are.equal(1, #q)
      assert.is_table(q[1].request.approval)
      assert.are.equal(0, paid)
      assert.are.equal("running", engine.run_status(id))
      -- the input channel does approve it
      local b = bound(q[1], "approve")
      assert.is_true(t.answer(q[1].requestId, b))
      t.drive(id)
      assert.are.equal(1, paid)
      assert.are.equal("completed", engine.run_status(id))
    end)
  end)

  it("a session message \"approve\" does not approve; inputResponses with the binding does", function()
    paid = 0
    local agent = support.calling { { name = "pay", input = { amount = 5 } } }
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "pay 5" })
      assert.are.equal(1, #t.inputs(c.sessionId))
      assert.is_true((session.send(c.sessionId, { message = "approve" })))
      t.drive(c.sessionId)
      local q = t.inputs(c.sessionId)
      assert.are.equal(1, #q)
      assert.are.equal(0, paid)
      assert.is_true((session.send(c.sessionId, { inputResponses = { bound(q[1], "approve") } })))
      t.drive(c.sessionId)
      assert.are.equal(1, paid)
      assert.are.equal(0, #t.inputs(c.sessionId))
    end)
  end)

  it("a question marked requiresPerson is not answered by a message; a plain one is", function()
    -- (queue: a steering message would withdraw the call's question instead)
    local agent = support.calling { { name = "person_question", input = { person = true } } }
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "go" })
      assert.are.equal(1, #t.inputs(c.sessionId))
      assert.is_true(t.inputs(c.sessionId)[1].request.requiresPerson)
      assert.is_true((session.send(c.sessionId, { message = "yes", turnPolicy = "queue" })))
      t.drive(c.sessionId)
      assert.are.equal(1, #t.inputs(c.sessionId))
      local q = t.inputs(c.sessionId)[1]
      assert.is_true((session.send(c.sessionId,
        { inputResponses = { { requestId = q.requestId, optionId = "yes" } } })))
      t.drive(c.sessionId)
      assert.are.equal(0, #t.inputs(c.sessionId))
    end)
    local plain = support.calling { { name = "person_question", input = { person = false } } }
    support.with_agents(plain, {}, function()
      local c = t.converse(plain, { "go" })
      assert.are.equal(1, #t.inputs(c.sessionId))
      assert.is_true((session.send(c.sessionId, { message = "yes", turnPolicy = "queue" })))
      t.drive(c.sessionId)
      assert.are.equal(0, #t.inputs(c.sessionId))
    end)
  end)

  it("a line a person typed at moor chat (in process) answers the sole question, approvals included", function()
    paid = 0
    local agent = support.calling { { name = "pay", input = { amount = 7 } } }
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "pay 7" })
      assert.are.equal(1, #t.inputs(c.sessionId))
      -- a line that fits no option goes to the model as a message
      -- (and the HTTP route has no such unbound shortcut)
      local ok, status = session.send(c.sessionId, { line = "Approve" })
      assert.is_nil(ok)
      assert.are.equal(400, status)
      assert.is_true((session.line(c.sessionId, "what does it cost?")))
      t.drive(c.sessionId)
      assert.are.equal(1, #t.inputs(c.sessionId))
      assert.is_true((session.line(c.sessionId, "Approve")))
      t.drive(c.sessionId)
      assert.are.equal(0, #t.inputs(c.sessionId))
      assert.are.equal(1, paid)
    end)
  end)
end)

describe("approval binding", function()
  local agent = support.calling { { id = "call_B", name = "pay", input = { amount = 5 } } }

  it("hashes the input's canonical JSON with SHA-256", function()
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "pay" })
      local ap = t.inputs(c.sessionId)[1].request.approval
      -- printf '{"amount":5}' | sha256sum
      assert.are.equal("7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf", ap.inputHash)
      assert.are.equal(core.sha256(json.encode { amount = 5 }), ap.inputHash)
      t.cancel(c.sessionId)
      t.drive(c.sessionId)
    end)
  end)

  it("requires callId and inputHash, and a mismatch echoes nothing of the expected values", function()
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "pay" })
      local q = t.inputs(c.sessionId)[1]
      local ap = q.request.approval
      local ok, status, code, msg = t.answer(q.requestId, { optionId = "approve" })
      local _
      assert.is_nil(ok)
      assert.are.equal(400, status)
      assert.are.equal("approval_unbound", code)
      assert.truthy(msg:find("callId", 1, true) and msg:find("inputHash", 1, true), msg)
      _, status, _, msg = t.answer(q.requestId, { optionId = "approve", callId = ap.callId })
      assert.are.equal(400, status)
      assert.truthy(msg:find("inputHash", 1, true), msg)
      _, status, code, msg = t.answer(q.requestId, { optionId = "approve", callId = "call_OTHER",
        inputHash = ap.inputHash })
      assert.are.equal(409, status)
      assert.are.equal("approval_mismatch", code)
      assert.falsy(msg:find(ap.callId, 1, true), msg)
      assert.falsy(msg:find(ap.inputHash, 1, true), msg)
      _, status, _, msg = t.answer(q.requestId, { optionId = "approve", callId = ap.callId, inputHash = "bogus" })
      assert.are.equal(409, status)
      assert.falsy(msg:find(ap.inputHash, 1, true), msg)
      assert.is_true(t.answer(q.requestId, bound(q, "deny")))
      t.drive(c.sessionId)
    end)
  end)

  it("refuses inputResponses for a request of another session as unknown", function()
    support.with_agents(agent, {}, function()
      local a = t.converse(agent, { "pay" })
      local b = t.converse(support.calling {}, { "hello" })
      local q = t.inputs(a.sessionId)[1]
      local ok, status, code, msg = session.send(b.sessionId, { inputResponses = { bound(q, "approve") } })
      assert.is_nil(ok)
      assert.are.equal(404, status)
      assert.are.equal("not_found", code)
      local _, _, _, unknown = engine.answer("req_nope", { optionId = "x" })
      assert.are.equal((unknown:gsub("req_nope", q.requestId)), msg)
      assert.are.equal(1, #t.inputs(a.sessionId)) -- still pending
      -- its own session answers it
      assert.is_true((session.send(a.sessionId, { inputResponses = { bound(q, "deny") } })))
      t.drive(a.sessionId)
      assert.are.equal(0, #t.inputs(a.sessionId))
    end)
  end)

  it("inputResponses answer the questions of the session's own tool runs", function()
    local asker = support.calling { { name = "person_question", input = { person = false } } }
    support.with_agents(asker, {}, function()
      local c = t.converse(asker, { "go" })
      local q = t.inputs(c.sessionId)[1]
      assert.are_not.equal(c.sessionId, q.runId)
      assert.is_true((session.send(c.sessionId, { inputResponses = { { requestId = q.requestId, optionId = "no" } } })))
      t.drive(c.sessionId)
      assert.are.equal(0, #t.inputs(c.sessionId))
    end)
  end)

  it("an approval recorded with an older hash replays and binds to the recorded hash", function()
    paid = 0
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "pay" })
      local q = t.inputs(c.sessionId)[1]
      -- a database written before SHA-256: the pending approval holds an FNV-1a hash
      local old = core.hash(json.encode { amount = 5 })
      local req = q.request
      req.approval.inputHash = old
      core.exec("UPDATE inputs SET request=? WHERE request_id=?", json.encode(req), q.requestId)
      core.commit()
      t.restart(c.sessionId)
      local again = t.inputs(c.sessionId)
      assert.are.equal(1, #again)
      assert.are.equal(old, again[1].request.approval.inputHash)
      local _, status = t.answer(q.requestId, { optionId = "approve", callId = "call_B",
        inputHash = core.sha256(json.encode { amount = 5 }) })
      assert.are.equal(409, status)
      assert.is_true(t.answer(q.requestId, { optionId = "approve", callId = "call_B", inputHash = old }))
      t.drive(c.sessionId)
      assert.are.equal(1, paid)
    end)
  end)
end)

describe("pending inputs", function()
  it("name the outermost session they surface in: its approval, its tool run's question; none else", function()
    local standalone = t.start("person_question", { person = false })
    t.drive(standalone)
    local agent = support.calling { { name = "pay", input = { amount = 1 } },
                            { name = "person_question", input = { person = false } } }
    support.with_agents(agent, {}, function()
      local c = t.converse(agent, { "go" })
      local approval = t.inputs(c.sessionId)[1]
      assert.truthy(approval and approval.request.approval, "no approval pending")
      assert.is_true((session.send(c.sessionId, { inputResponses = { bound(approval, "approve") } })))
      t.drive(c.sessionId)
      local by_run = {}
      for _, q in ipairs(engine.inputs()) do by_run[q.runId] = q end
      assert.is_nil(by_run[standalone].sessionId)
      local child
      for _, q in ipairs(t.inputs(c.sessionId)) do child = q end
      assert.truthy(child, "the tool run's question is not pending: " .. json.encode(engine.inputs()))
      assert.are_not.equal(c.sessionId, child.runId)
      assert.are.equal(c.sessionId, child.sessionId)
      assert.are.equal(approval.runId, c.sessionId)
      assert.are.equal(c.sessionId, approval.sessionId)
    end)
  end)
end)
