-- Waiting on the world: ctx.ask, hooks, webhooks, cancellation (in-process).
local moor = require "moor"
local t = moor.testing
local s = moor.schema

local APPROVE = {
  { id = "approve", label = "Deploy", style = "primary" },
  { id = "cancel", label = "Cancel" },
}

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

local function events_of(id, kind)
  local out = {}
  for _, e in ipairs(t.events(id)) do
    if e.kind == kind then out[#out + 1] = e end
  end
  return out
end

local function start(tool, opts)
  local id = assert(t.start(tool, {}, opts))
  t.drive(id)
  return id
end

describe("ctx.ask", function()
  local asker = workflow(function(_, ctx)
    local answer = ctx.ask { prompt = "Deploy?", display = "confirmation", options = APPROVE }
    return answer
  end)

  it("publishes input.requested, parks, and resolves once with the answer", function()
    local id = start(asker)
    local qs = t.inputs(id)
    assert.are.equal(1, #qs)
    assert.are.equal("Deploy?", qs[1].request.prompt)
    local req = events_of(id, "input.requested")[1]
    assert.are.equal(qs[1].requestId, req.payload.requestId)
    assert.is_nil((t.outcome(id)))
    assert.is_true(t.answer(qs[1].requestId, { optionId = "approve" }))
    t.drive(id)
    local res = t.outcome(id)
    assert.are.same({ status = "answered", optionId = "approve" }, res)
    local resolved = events_of(id, "input.resolved")
    assert.are.equal(1, #resolved)
    assert.are.equal("answered", resolved[1].payload.outcome)
    local _, status, code = t.answer(qs[1].requestId, { optionId = "approve" })
    assert.are.equal(409, status)
    assert.are.equal("already_resolved", code)
  end)

  it("refuses an option that was never offered, and keeps the question open", function()
    local id = start(asker)
    local q = t.inputs(id)[1]
    local ok, status, code, msg = t.answer(q.requestId, { optionId = "yolo" })
    assert.is_nil(ok)
    assert.are.equal(400, status)
    assert.are.equal("invalid_option", code)
    assert.truthy(msg:find("offered: approve, cancel", 1, true), msg)
    local _, st2, code2 = t.answer(q.requestId, { text = "sure" })
    assert.are.equal(400, st2)
    assert.are.equal("freeform_not_allowed", code2)
    assert.are.equal(1, #t.inputs(id))
    assert.is_true(t.answer(q.requestId, { optionId = "cancel" }))
    t.drive(id)
    assert.are.equal("cancel", (t.outcome(id)).optionId)
  end)

  it("takes free text where the request allows it", function()
    local id = start(workflow(function(_, ctx)
      return ctx.ask { prompt = "Why?", display = "text" }
    end))
    assert.is_true(t.answer(t.inputs(id)[1].requestId, { text = "because" }))
    t.drive(id)
    assert.are.same({ status = "answered", text = "because" }, (t.outcome(id)))
  end)

  it("answers unavailable at once for a run with no channel", function()
    local res = t.call(asker, {}, { noInput = true })
    assert.are.same({ status = "unavailable" }, res)
  end)

  it("is withdrawn as cancelled when its signal aborts", function()
    local res, err, id = t.call(workflow(function(_, ctx)
      local c = moor.AbortController()
      local pending = moor.async(ctx.ask, { prompt = "Still there?", options = APPROVE }, { signal = c.signal })
      moor.sleep("10ms")
      c:abort("moved on")
      return moor.await(pending)
    end), {})
    assert.is_nil(err)
    assert.are.same({ status = "cancelled" }, res)
    assert.are.equal("cancelled", events_of(id, "input.resolved")[1].payload.outcome)
  end)

  it("races a timer (approve with a deadline) and gives the same outcome after a restart", function()
    local tool = workflow(function(_, ctx)
      local pending = moor.async(ctx.ask, { prompt = "Deploy?", options = APPROVE })
      local answer = moor.race { pending, moor.timer("30ms") }
      if answer == nil then
        answer = moor.race { pending, moor.timer("10s") }
      end
      return { answer = answer }
    end)
    local id = start(tool) -- the first timer fired; parked on the second race
    assert.are.equal(2, #events_of(id, "timer.scheduled"))
    assert.is_true(t.answer(t.inputs(id)[1].requestId, { optionId = "approve" }))
    t.drive(id)
    local live = t.outcome(id)
    assert.are.same({ answer = { status = "answered", optionId = "approve" } }, live)
    -- the same log replayed by a fresh run object gives the same outcome
    local id2 = start(tool)
    assert.is_true(t.answer(t.inputs(id2)[1].requestId, { optionId = "approve" }))
    local replayed = t.restart(id2)
    assert.are.same(live, replayed)
  end)

  it("withdraws pending questions when the run ends; an answer then gets 409", function()
    local id = start(workflow(function(_, ctx)
      moor.async(ctx.ask, { prompt = "Never mind", options = APPROVE })
      moor.sleep("10ms")
      return "done"
    end))
    t.drive(id)
    assert.are.equal("done", (t.outcome(id)))
    local req = events_of(id, "input.requested")[1].payload.requestId
    local _, status = t.answer(req, { optionId = "approve" })
    assert.are.equal(409, status)
  end)

  it("404s an unknown request", function()
    local _, status, code = t.answer("req_nope", { optionId = "x" })
    assert.are.equal(404, status)
    assert.are.equal("not_found", code)
  end)
end)

describe("hooks and webhooks", function()
  it("resumes a hook with a deterministic token from outside the run", function()
    local id = start(workflow(function()
      local hook = moor.createHook { token = "order-42" }
      return hook:await()
    end))
    moor.resumeHook("order-42", { paid = true, amount = 12 })
    t.drive(id)
    assert.are.same({ paid = true, amount = 12 }, (t.outcome(id)))
    assert.are.equal(1, #events_of(id, "hook.received"))
    local ok, err = pcall(moor.resumeHook, "order-42", {})
    assert.is_false(ok)
    assert.are.equal("HookNotFound", err.code)
  end)

  it("gives a webhook a URL, queues early deliveries, and iterates over requests", function()
    local id = start(workflow(function()
      local wh = moor.createWebhook()
      local got = {}
      coroutine.yield { url = wh.url }
      moor.sleep("20ms")
      for request in wh:requests() do
        got[#got + 1] = request:json().n
        if #got == 3 then break end
      end
      return got
    end))
    local url = events_of(id, "progress")[1].payload.url
    local token = url:match("/webhook/([%w_-]+)$")
    assert.are.equal(43, #token)
    for n = 1, 3 do
      assert.are.equal("webhook", (t.deliver(token, { method = "POST", headers = {}, body = '{"n":' .. n .. "}" })))
    end
    t.drive(id)
    assert.are.same({ 1, 2, 3 }, (t.outcome(id)))
    local _, status = t.deliver(token, { method = "POST", headers = {}, body = "{}" })
    assert.are.equal(404, status)
  end)
end)

describe("cancellation", function()
  it("raises Cancelled at the parked op; cleanup steps run once; the run ends cancelled", function()
    local cleaned = 0
    local cleanup = moor.step("cleanup", function() cleaned = cleaned + 1; return true end)
    local id = start(workflow(function(_, ctx)
      local wh = moor.createWebhook()
      local ok, err = pcall(wh.await, wh)
      if not ok and ctx.abortSignal.aborted then cleanup() end
      error(err, 0)
    end))
    assert.is_true(t.cancel(id))
    t.drive(id)
    assert.are.equal(1, cleaned)
    local _, err = t.outcome(id)
    assert.are.equal("Cancelled", err.code)
    assert.are.equal("cancelled", require("moor.engine").run_status(id))
    local _, status = t.cancel(id)
    assert.are.equal(409, status)
  end)

  it("withdraws the parked question and refuses a late answer", function()
    local id = start(workflow(function(_, ctx)
      return ctx.ask { prompt = "Deploy?", options = APPROVE }
    end))
    local req = t.inputs(id)[1].requestId
    assert.is_true(t.cancel(id))
    t.drive(id)
    assert.are.equal(0, #t.inputs(id))
    local _, status = t.answer(req, { optionId = "approve" })
    assert.are.equal(409, status)
  end)

  it("replays a cancel at its place in the log", function()
    local cleaned = 0
    local cleanup = moor.step("cleanup2", function() cleaned = cleaned + 1 end)
    local id = start(workflow(function()
      local ok = pcall(moor.sleep, "1h")
      if not ok then
        cleanup()
        moor.step("slow", function() end)()
        pcall(moor.sleep, "1h") -- refused at once after a cancel
        return "unwound"
      end
    end))
    assert.is_true(t.cancel(id))
    local _, err = t.restart(id) -- the cancel was logged, not yet applied
    assert.are.equal("Cancelled", err.code)
    assert.are.equal(1, cleaned)
  end)
end)

describe("createWebhook respondWith.status", function()
  -- The HTTP writer sends only 200-999: any other status is refused at
  -- creation, not answered 500 after each delivery was recorded (which a
  -- sender retries, delivering again).
  for _, status in ipairs { 100, 199, 1000, -1 } do
    it("refuses status " .. status .. " at creation", function()
      local _, err = t.call(workflow(function()
        moor.createWebhook { respondWith = { status = status, body = "ok" } }
        return "created"
      end))
      assert.is_table(err)
      assert.matches("respondWith", err.message, 1, true)
    end)
  end
  it("takes 200 and 999", function()
    for _, status in ipairs { 200, 999 } do
      local r, err = t.start(workflow(function()
        moor.createWebhook { respondWith = { status = status, body = "ok" } }
        return "created"
      end))
      assert.is_nil(err)
      t.drive(r)
      assert.are.equal("completed", (t.outcome(r)) and "completed")
    end
  end)
end)
