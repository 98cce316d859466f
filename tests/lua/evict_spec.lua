-- Parked runs leave memory (issue 13, item 3): a run evicted while it is
-- parked is replayed from its log when its timer falls due or the world
-- reaches it, and gives the same events and result as a run that stayed in
-- memory. Each scenario runs twice: resident (eviction off) and evicted
-- (EVICT_IDLE_MS = 0: every parked run leaves memory at the end of a round).
local moor = require "moor"
local engine = require "moor.engine"
local session = require "moor.session"
local json = require "moor.json"
local core = require "moor.core"
local conf = require "moor.conf"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local function workflow(name, execute)
  return support.register(name, moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {},
    execute = execute })
end

-- What differs between two runs of the same tool: ids, tokens, times.
local function norm(v)
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    local out = {}
    for _, k in ipairs(keys) do
      local x = v[k]
      if x == nil then x = v[tonumber(k)] end
      if k == "due" or k == "requested" or k == "retryAt" or k == "created" or k == "expiresAt" then x = "T" end
      out[#out + 1] = k .. "=" .. norm(x)
    end
    return "{" .. table.concat(out, ",") .. "}"
  elseif type(v) == "string" then
    return (v:gsub("run_%x+", "RUN"):gsub("call_%x+", "CALL"):gsub("req_[%x_]+", "REQ")
      :gsub("tok%-%w+", "TOKEN"):gsub("webhook/[%w_-]+", "webhook/TOKEN"))
  elseif type(v) == "number" and v > 1e12 then
    return "T"
  end
  return tostring(v)
end

local function log_of(id)
  local out = {}
  for _, e in ipairs(t.events(id)) do
    local p = e.payload
    if type(p) == "table" and p.token and #tostring(p.token) == 43 then p.token = "tok-webhook" end
    out[#out + 1] = ("%s %s %s %s"):format(tostring(e.op), e.kind, tostring(e.name), norm(p))
  end
  return out
end

local function drive(id)
  for _ = 1, 200 do
    if t.drive(id, 5000) ~= "running" then return end
    if not next(t.inputs(id)) then core.wait(5) else return end
  end
end

local saved_idle
before_each(function() saved_idle = engine.EVICT_IDLE_MS end)
after_each(function() engine.EVICT_IDLE_MS = saved_idle end)

-- Run start(id-less) -> id, then act(id) while it is parked; twice. Returns
-- what each gave: { log, result, error, evictions, wakes }.
local function twice(tool, act, watch)
  local got = {}
  for _, mode in ipairs { "resident", "evicted" } do
    engine.EVICT_IDLE_MS = mode == "evicted" and 0 or -1
    local before = engine.stats()
    local id = assert(t.start(tool, {}))
    for _ = 1, 50 do -- (it parks: evicted at the end of a round, a slice of runs a round)
      if engine.tick() ~= 0 then break end
    end
    local parked = engine.evicted(id)
    if act then
      t.drive(id)
      act(id, mode)
    end
    drive(id)
    local after = engine.stats()
    local v, e = t.outcome(id)
    local g = { log = log_of(id), result = v, error = e, parked_evicted = parked,
      evictions = after.evictions - before.evictions, wakes = after.wakes - before.wakes }
    if watch then g.watched = log_of(watch(id)) end
    got[mode] = g
  end
  local r, ev = got.resident, got.evicted
  assert.are.equal(0, r.evictions)
  assert.is_false(r.parked_evicted)
  assert.is_true(ev.parked_evicted, "the run was not evicted while parked")
  assert.is_true(ev.evictions > 0 and ev.wakes > 0, "evictions " .. ev.evictions .. ", wakes " .. ev.wakes)
  assert.are.same(r.log, ev.log)
  assert.are.same(r.result, ev.result)
  assert.are.same(r.error, ev.error)
  assert.are.same(r.watched, ev.watched)
  return r, ev
end

local answer_first = function(id)
  local q = assert(t.inputs(id)[1], "no question")
  assert.is_true(t.answer(q.requestId, { optionId = "yes" }))
end

local OPTIONS = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } }

describe("an evicted run and a resident run", function()
  it("agree for a sleep (the timer entry loads it)", function()
    local stamp = moor.step("stamp", function(x) return x + 1 end)
    local r = twice(workflow("evict_sleep", function()
      local a = stamp(1)
      moor.sleep("150ms")
      return { a = a, b = stamp(a) }
    end))
    assert.are.same({ a = 2, b = 3 }, r.result)
  end)

  it("agree for a question", function()
    local r = twice(workflow("evict_ask", function(_, ctx)
      local a = ctx.ask { prompt = "Go?", options = OPTIONS }
      return { got = a.optionId }
    end), answer_first)
    assert.are.same({ got = "yes" }, r.result)
  end)

  it("agree for a hook, and a delivery queued before the run awaits again", function()
    local n = 0
    local r = twice(workflow("evict_hook", function(_, ctx)
      local h = moor.createHook { token = "tok-" .. ctx.runId }
      local first = h:await()
      local second = h:await()
      return { first = first, second = second }
    end), function(id)
      n = n + 1
      assert(t.deliver("tok-" .. id, { n = 1 }))
      assert(t.deliver("tok-" .. id, { n = 2 }))
    end)
    assert.are.same({ first = { n = 1 }, second = { n = 2 } }, r.result)
    assert.are.equal(2, n)
  end)

  it("agree for a webhook", function()
    local r = twice(workflow("evict_webhook", function()
      local wh = moor.createWebhook()
      local req = wh:await()
      return { body = req:json() }
    end), function(id)
      local token
      for _, e in ipairs(t.events(id)) do
        if e.kind == "hook.created" then token = e.payload.token end
      end
      assert.are.equal("webhook", (t.deliver(assert(token), { method = "POST", headers = {}, body = '{"k":7}' },
        "webhook")))
    end)
    assert.are.same({ body = { k = 7 } }, r.result)
  end)

  it("agree for a child run (the parent is loaded when its child settles)", function()
    workflow("evict_child", function(_, ctx)
      local a = ctx.ask { prompt = "Child?", options = OPTIONS }
      return { child = a.optionId }
    end)
    local child_id
    local r = twice(workflow("evict_parent", function()
      local ok, started = engine.op("child", "evict_child", { tool = "evict_child", input = {} })
      assert(ok and started.runId)
      local aok, settled = engine.op("child.await", "await", { runId = started.runId })
      assert(aok)
      return { status = settled.status, result = settled.result }
    end), function(id, mode)
      child_id = nil
      for _, e in ipairs(t.events(id)) do
        if e.kind == "child.started" then child_id = e.payload.runId end
      end
      if mode == "evicted" then
        assert.is_true(engine.evicted(assert(child_id)))
      end
      answer_first(child_id)
      t.drive(child_id)
    end, function() return child_id end)
    assert.are.same({ status = "completed", result = { child = "yes" } }, r.result)
  end)

  it("agree for a race of a question against a timer", function()
    local r = twice(workflow("evict_race", function(_, ctx)
      local pending = moor.async(ctx.ask, { prompt = "Race?", options = OPTIONS })
      local answer = moor.race { pending, moor.timer("150ms") }
      return { answered = answer ~= nil }
    end))
    assert.are.same({ answered = false }, r.result)
  end)

  it("agree for a step retried after its backoff (the retry's timer loads it)", function()
    local attempts = 0
    local flaky = moor.step("flaky", function()
      attempts = attempts + 1
      if attempts % 2 == 1 then error(moor.RetryableError { message = "not yet", retryAfter = "150ms" }) end
      return "ok"
    end)
    local r = twice(workflow("evict_retry", function() return { v = flaky() } end))
    assert.are.same({ v = "ok" }, r.result)
    assert.are.equal(4, attempts)
  end)

  it("agree for a cancel whose cleanup runs a step", function()
    local cleanup = moor.step("cleanup", function() return "cleaned" end)
    local r = twice(workflow("evict_cancel", function(_, ctx)
      local ok, e = pcall(ctx.ask, { prompt = "Wait?", options = OPTIONS })
      if not ok then
        cleanup()
        error(e, 0)
      end
      return "not cancelled"
    end), function(id) assert.is_true(t.cancel(id)) end)
    assert.are.equal("Cancelled", r.error.code)
  end)
end)

describe("an evicted session", function()
  it("is woken by a message that answers its parked tool call, and agrees with a resident one", function()
    support.register("evict_deploy", moor.defineWorkflowTool { description = "deploy", inputSchema = s.object {},
      execute = function(_, ctx)
        local a = ctx.ask { prompt = "Deploy?", options = OPTIONS }
        return { deployed = a.optionId == "yes" }
      end })
    local agent = moor.defineAgent { instructions = "x", tools = { "evict_deploy" },
      model = t.script(function(turn)
        if turn.n == 1 then return { toolCalls = { { name = "evict_deploy", input = {} } } } end
        return "done " .. turn.n
      end) }
    local got = {}
    support.with_agents(agent, nil, function()
      for _, mode in ipairs { "resident", "evicted" } do
        engine.EVICT_IDLE_MS = mode == "evicted" and 0 or -1
        local before = engine.stats()
        local id = assert(session.create())
        assert(session.send(id, { message = "deploy it" }))
        t.drive(id)
        local child
        for _, e in ipairs(t.events(id)) do
          if e.kind == "child.started" then child = e.payload.runId end
        end
        assert(child, "the tool call did not start")
        local parked = engine.evicted(id) and engine.evicted(child)
        assert(session.send(id, { message = "yes" })) -- answers the tool's sole question
        for _ = 1, 50 do
          t.drive(id)
          if t.outcome(child) then break end
          core.wait(5)
        end
        t.drive(id)
        local after = engine.stats()
        got[mode] = { log = log_of(id), tool = log_of(child), transcript = session.details(id).transcript,
          parked = parked, evictions = after.evictions - before.evictions, wakes = after.wakes - before.wakes,
          result = (t.outcome(child)) }
      end
    end)
    local r, ev = got.resident, got.evicted
    assert.is_false(r.parked)
    assert.are.equal(0, r.evictions)
    assert.is_true(ev.parked, "the session and its tool call were not evicted while parked")
    assert.is_true(ev.wakes >= 2, "wakes: " .. ev.wakes)
    assert.are.same({ deployed = true }, r.result)
    assert.are.same(r.result, ev.result)
    assert.are.same(r.tool, ev.tool)
    assert.are.same(r.log, ev.log)
    assert.are.same(r.transcript, ev.transcript)
    assert.truthy(json.encode(r.transcript):find("done 2", 1, true))
  end)
end)

describe("eviction", function()
  it("keeps at most MAX_PARKED_LIVE parked runs in memory, the least recently active leaving first", function()
    local saved_max = engine.MAX_PARKED_LIVE
    engine.EVICT_IDLE_MS = 3600000
    engine.MAX_PARKED_LIVE = 3
    local tool = workflow("evict_many", function(_, ctx)
      return ctx.ask { prompt = "Many?", options = OPTIONS }
    end)
    local ids = {}
    local ok, err = pcall(function()
      for i = 1, 6 do
        ids[i] = assert(t.start(tool, {}))
        t.drive(ids[i])
      end
      assert.is_true(engine.evicted(ids[1]) and engine.evicted(ids[2]) and engine.evicted(ids[3]))
      assert.is_false(engine.evicted(ids[4]) or engine.evicted(ids[5]) or engine.evicted(ids[6]))
      -- Answered while evicted: loaded, finished.
      for _, id in ipairs(ids) do answer_first(id) end
      for _, id in ipairs(ids) do
        t.drive(id)
        assert.are.same({ status = "answered", optionId = "yes" }, (t.outcome(id)))
      end
    end)
    engine.MAX_PARKED_LIVE = saved_max
    if not ok then error(err, 0) end
  end)

  it("leaves no timer behind once a woken run ends (moor_run would wait for it)", function()
    engine.EVICT_IDLE_MS = 0
    local base = engine.stats().timers
    local id = assert(t.start(workflow("evict_long_race", function(_, ctx)
      local pending = moor.async(ctx.ask, { prompt = "Now?", options = OPTIONS })
      return moor.race { pending, moor.timer("4h") }
    end), {}))
    engine.tick()
    assert.is_true(engine.evicted(id))
    assert.are.equal(base + 1, engine.stats().timers) -- its one timer entry
    answer_first(id)
    t.drive(id)
    assert.are.same({ status = "answered", optionId = "yes" }, (t.outcome(id)))
    assert.are.equal(base, engine.stats().timers)
  end)

  it("leaves a run in its cancel's grace period in memory", function()
    engine.EVICT_IDLE_MS = 0
    local gate = moor.step("gate", function()
      return engine.io(function(resume) core.after(100, function() resume("gated") end) end)
    end)
    local id = assert(t.start(workflow("evict_grace", function(_, ctx)
      local _, e = pcall(ctx.ask, { prompt = "Hold?", options = OPTIONS })
      gate() -- cleanup: a step on I/O, in the grace period
      error(e, 0)
    end), {}))
    engine.tick()
    assert.is_true(engine.evicted(id))
    assert.is_true(t.cancel(id))
    engine.tick()
    assert.is_false(engine.evicted(id))
    for _ = 1, 100 do
      if t.drive(id) ~= "running" then break end
      assert.is_false(engine.evicted(id))
      core.wait(5)
    end
    local _, e = t.outcome(id)
    assert.are.equal("Cancelled", e.code)
  end)

  it("leaves a run whose step is on I/O in memory", function()
    engine.EVICT_IDLE_MS = 0
    local io_step = moor.step("io_wait", function()
      return engine.io(function(resume) core.after(100, function() resume("io done") end) end)
    end)
    local id = assert(t.start(workflow("evict_io", function() return io_step() end), {}))
    engine.tick()
    assert.is_false(engine.evicted(id))
    for _ = 1, 100 do
      if t.drive(id) ~= "running" then break end
      core.wait(5)
    end
    assert.are.equal("io done", (t.outcome(id)))
  end)

  it("evicts a bounded slice a round, and says there is more (a sweep of 1,024 at once paused a host)", function()
    local sleeper = workflow("evict_slice", function() moor.sleep("1h"); return true end)
    engine.EVICT_IDLE_MS = 3600000
    local ids = {}
    for i = 1, 300 do ids[i] = assert(t.start(sleeper, {})) end
    for _ = 1, 20 do engine.tick() end
    for _, id in ipairs(ids) do assert.is_false(engine.evicted(id)) end
    engine.EVICT_IDLE_MS = 0
    local saved_slice = conf.EVICT_SLICE_US
    conf.EVICT_SLICE_US = 0 -- (one eviction a round: at least one always goes)
    local before = engine.stats().evictions
    local due = engine.tick()
    local one = engine.stats().evictions - before
    local function mine()
      local n = 0
      for _, id in ipairs(ids) do if engine.evicted(id) then n = n + 1 end end
      return n
    end
    local rounds = 1
    while mine() < 300 and rounds < 2000 do
      assert.are.equal(0, due, "a round that left runs to evict did not ask for the next at once")
      due = engine.tick()
      rounds = rounds + 1
    end
    conf.EVICT_SLICE_US = saved_slice
    assert.are.equal(1, one, "the first round evicted " .. one)
    assert.are.equal(300, mine())
    assert.is_true(rounds >= 300, "300 runs evicted in " .. rounds .. " rounds")
    for _, id in ipairs(ids) do assert.is_true(engine.evicted(id)) end
    -- and they still wake: one is cancelled (its log reaches it) and ends
    assert.is_true(t.cancel(ids[1]))
    assert.are.equal("cancelled", t.drive(ids[1]))
  end)
end)
