-- The durable engine, driven through moor.testing inside the host (`moor test`).
local moor = require "moor"
local json = require "moor.json"
local t = moor.testing
local s = moor.schema

local function workflow(execute, extra)
  local def = { description = "spec tool", inputSchema = s.object {}, execute = execute }
  for k, v in pairs(extra or {}) do def[k] = v end
  return moor.defineWorkflowTool(def)
end

local function events_of(id, kind)
  local out = {}
  for _, e in ipairs(t.events(id)) do
    if kind == nil or e.kind == kind then out[#out + 1] = e end
  end
  return out
end

-- Drive a started run until its log has n events of kind (it is then parked).
local function until_event(id, kind, n)
  for _ = 1, 500 do
    if #events_of(id, kind) >= (n or 1) then return end
    local due = t.step()
    if due then require("moor.core").wait(math.min(due, 10)) end
  end
  error("run " .. id .. " never recorded " .. kind)
end

describe("steps", function()
  it("records each step result and hands the body the decoded value", function()
    local calls = 0
    local add = moor.step("add", function(a, b) calls = calls + 1; return a + b end)
    local tool = workflow(function() return { sum = add(add(1, 2), 3) } end)
    local res, err, id = t.call(tool, {})
    assert.is_nil(err)
    assert.are.equal(6, res.sum)
    assert.are.equal("integer", math.type(res.sum))
    assert.are.equal(2, calls)
    local results = events_of(id, "step.result")
    assert.are.equal(2, #results)
    assert.are.equal(1, results[1].op)
    assert.are.equal(2, results[2].op)
    assert.are.equal("add", results[1].name)
  end)

  it("retries a step that fails twice, then succeeds: three attempts in the log", function()
    local attempts = 0
    local flaky = moor.step("flaky", function()
      attempts = attempts + 1
      if attempts < 3 then error("boom " .. attempts) end
      return "ok"
    end, { backoff = "5ms" })
    local res, err, id = t.call(workflow(function() return flaky() end), {})
    assert.is_nil(err)
    assert.are.equal("ok", res)
    assert.are.equal(3, attempts)
    local retries = events_of(id, "step.retry")
    assert.are.equal(2, #retries)
    assert.are.equal(1, retries[1].payload.attempt)
    assert.are.equal(2, retries[2].payload.attempt)
    assert.truthy(retries[1].payload.error.message:find("boom 1", 1, true))
    assert.are.equal(1, #events_of(id, "step.result"))
  end)

  it("gives up after the policy's retries and fails the run with the last error", function()
    local attempts = 0
    local bad = moor.step("bad", function() attempts = attempts + 1; error("still broken") end,
      { retries = 2, backoff = 1 })
    local res, err = t.call(workflow(function() return bad() end), {})
    assert.is_nil(res)
    assert.are.equal(3, attempts)
    assert.truthy(err.message:find("still broken", 1, true))
  end)

  it("never retries FatalError and fails the run with its message", function()
    local attempts = 0
    local fatal = moor.step("fatal", function()
      attempts = attempts + 1
      error(moor.FatalError("card declined"))
    end)
    local res, err, id = t.call(workflow(function() return fatal() end), {})
    assert.is_nil(res)
    assert.are.equal(1, attempts)
    assert.are.equal("FatalError", err.code)
    assert.are.equal("card declined", err.message)
    assert.are.equal(0, #events_of(id, "step.retry"))
    assert.are.equal(1, #events_of(id, "step.error"))
  end)

  it("lets the body catch a step's error with pcall", function()
    local fatal = moor.step("fatal2", function() error(moor.FatalError("nope")) end)
    local res = t.call(workflow(function()
      local ok, e = pcall(fatal)
      return { ok = ok, code = e.code, message = e.message }
    end), {})
    assert.are.same({ ok = false, code = "FatalError", message = "nope" }, res)
  end)

  it("honours RetryableError{ retryAfter }", function()
    local attempts = 0
    local later = moor.step("later", function()
      attempts = attempts + 1
      if attempts == 1 then error(moor.RetryableError { message = "busy", retryAfter = "20ms" }) end
      return attempts
    end, { backoff = "10s" })
    local res, _, id = t.call(workflow(function() return later() end), {})
    assert.are.equal(2, res)
    local r = events_of(id, "step.retry")[1]
    assert.are.equal("busy", r.payload.error.message)
    assert.is_true(r.payload.retryAt - r.time <= 1000) -- 20ms, not the 10s policy
  end)

  it("gives the body nil for a step that returns nothing", function()
    local none = moor.step("none", function() end)
    local res = t.call(workflow(function() return { isnil = none() == nil } end), {})
    assert.is_true(res.isnil)
  end)

  it("is a plain call outside a workflow body", function()
    local double = moor.step("double", function(x) return x * 2 end)
    assert.are.equal(8, double(4))
  end)

  it("exposes an idempotency key inside a step", function()
    local info
    local st = moor.step("info", function() info = moor.stepInfo(); return info.idempotencyKey end)
    local res, _, id = t.call(workflow(function() return st() end), {})
    assert.are.equal(id .. ":1", res)
    assert.are.equal(1, info.attempt)
  end)
end)

describe("JSON through the log", function()
  local edge = moor.step("edge", function()
    return { small = 5, big = 9007199254740993, wide = 123456789012345, sum = 0.1 + 0.2,
             neg = math.mininteger, float = 3.0, empty = json.array {} }
  end)
  local tool = workflow(function()
    local v = edge()
    moor.sleep("30ms")
    return {
      v = v,
      types = { small = math.type(v.small), big = math.type(v.big), float = math.type(v.float) },
      exact = v.big == 9007199254740993 and v.wide == 123456789012345 and v.sum == 0.1 + 0.2,
    }
  end)

  it("keeps integers, large numbers and 0.1 + 0.2 exact, live and after a replay", function()
    local id = t.start(tool, {})
    until_event(id, "timer.scheduled")
    local res, err = t.restart(id) -- forget the run and replay it from its log
    assert.is_nil(err)
    assert.is_true(res.exact)
    assert.are.same({ small = "integer", big = "integer", float = "float" }, res.types)
    assert.are.equal(9007199254740993, res.v.big)
    assert.are.equal(123456789012345, res.v.wide)
    assert.are.equal(0.1 + 0.2, res.v.sum)
    assert.are.equal(math.mininteger, res.v.neg)
    assert.is_true(json.isarray(res.v.empty))
    local recorded = events_of(select(3, t.call(tool, {})), "step.result")[1].payload
    assert.are.equal(9007199254740993, recorded.big)
  end)
end)

describe("results", function()
  it("fails a run whose result holds a function, naming the path", function()
    local res, err = t.call(workflow(function() return { items = { 1, { cb = print } } } end), {})
    assert.is_nil(res)
    assert.are.equal("InvalidResult", err.code)
    assert.truthy(err.message:find("result.items[2].cb", 1, true), err.message)
  end)

  it("fails a run whose result is over the limit (engine.MAX_RESULT) with advice", function()
    local engine = require "moor.engine"
    local saved = engine.MAX_RESULT
    engine.MAX_RESULT = 64 * 1024
    local res, err = t.call(workflow(function() return string.rep("x", 70000) end), {})
    engine.MAX_RESULT = saved
    assert.is_nil(res)
    assert.are.equal("ResultTooLarge", err.code)
    assert.truthy(err.message:find("return a summary", 1, true), err.message)
  end)

  it("fails a step whose result is not JSON, without retrying it", function()
    local n = 0
    local st = moor.step("nan", function() n = n + 1; return 0 / 0 end)
    local res, err = t.call(workflow(function() return st() end), {})
    assert.is_nil(res)
    assert.are.equal(1, n)
    assert.truthy(err.message:find("step 'nan'", 1, true), err.message)
  end)

  it("uses the last progress snapshot when the body returns nothing", function()
    local res, _, id = t.call(workflow(function()
      coroutine.yield { phase = 1 }
      coroutine.yield { phase = 2 }
    end), {})
    assert.are.same({ phase = 2 }, res)
    assert.are.equal(2, #events_of(id, "progress"))
  end)

  it("checks the result against outputSchema", function()
    local res, err = t.call(workflow(function() return { n = "x" } end,
      { outputSchema = s.object { n = s.integer() } }), {})
    assert.is_nil(res)
    assert.truthy(err.message:find("outputSchema", 1, true), err.message)
  end)
end)

describe("input", function()
  it("refuses input that does not fit the schema, with the field path, before the body runs", function()
    local ran = false
    local tool = moor.defineWorkflowTool {
      description = "d",
      inputSchema = s.object { line = s.integer { minimum = 1 } },
      execute = function() ran = true end,
    }
    local res, err = t.call(tool, { line = 0 })
    assert.is_nil(res)
    assert.are.equal("input", err.code)
    assert.truthy(err.message:find("line: must be an integer >= 1", 1, true), err.message)
    assert.is_false(ran)
  end)
end)

describe("fences", function()
  it("refuses io.open in a body with a message saying it belongs in a step", function()
    local res, err = t.call(workflow(function()
      local f = io.open("/etc/hostname")
      return f
    end), {})
    assert.is_nil(res)
    assert.are.equal("Fenced", err.code)
    assert.truthy(err.message:find("io.open belongs in a step", 1, true), err.message)
    assert.truthy(err.message:find("engine_spec.lua:%d+"), err.message)
  end)

  it("refuses os.execute and os.getenv in a body but allows them in a step", function()
    local _, err = t.call(workflow(function() return os.execute("true") end), {})
    assert.truthy(err.message:find("os.execute belongs in a step", 1, true))
    local env = moor.step("env", function() return os.getenv("HOME") ~= nil end)
    local res = t.call(workflow(function() return env() end), {})
    assert.is_true(res)
  end)

  it("replays os.time and math.random", function()
    local tool = workflow(function()
      local a = { os.time(), math.random(1, 1000000), math.random() }
      moor.sleep("20ms")
      return { a = a, b = { os.time(), math.random(1, 1000000) } }
    end)
    local id = t.start(tool, {})
    until_event(id, "timer.scheduled")
    local first = events_of(id, "timer.scheduled")[1]
    local res = t.restart(id)
    assert.are.equal(first.payload.due ~= nil, true)
    assert.are.equal("integer", math.type(res.a[1]))
    assert.is_true(res.a[2] >= 1 and res.a[2] <= 1000000)
    assert.is_true(res.a[3] >= 0 and res.a[3] < 1)
  end)
end)

describe("racing and waiting", function()
  it("replays moor.race of a step against a timer with the same winner", function()
    local attempts = 0
    local slow = moor.step("slow", function()
      attempts = attempts + 1
      if attempts == 1 then error(moor.RetryableError { message = "later", retryAfter = "300ms" }) end
      return "step"
    end)
    local tool = workflow(function()
      local v, winner = moor.race { moor.async(slow), moor.timer("30ms") }
      moor.sleep("50ms")
      return { winner = winner, value = v }
    end)
    local id = t.start(tool, {})
    until_event(id, "timer.scheduled", 2)
    local res = t.restart(id)
    assert.are.same({ winner = 2 }, res)
    -- and a step that wins stays the winner on replay
    local fast = moor.step("fast", function() return "fast" end)
    local tool2 = workflow(function()
      local v, winner = moor.race { moor.async(fast), moor.timer("1s") }
      moor.sleep("20ms")
      return { winner = winner, value = v }
    end)
    local id2 = t.start(tool2, {})
    until_event(id2, "timer.scheduled", 2)
    assert.are.same({ winner = 1, value = "fast" }, (t.restart(id2)))
  end)

  it("waits for every branch with moor.all, in order", function()
    local sq = moor.step("sq", function(x) return x * x end)
    local res = t.call(workflow(function()
      return moor.all { moor.async(sq, 2), moor.async(sq, 3), moor.async(sq, 4) }
    end), {})
    assert.are.same({ 4, 9, 16 }, res)
  end)

  it("raises a branch's error from moor.all", function()
    local boom = moor.step("boomall", function() error(moor.FatalError("branch broke")) end)
    local _, err = t.call(workflow(function()
      return moor.all { moor.async(boom) }
    end), {})
    assert.are.equal("branch broke", err.message)
  end)

  it("forwards ops from an author's own coroutine", function()
    local inc = moor.step("inc", function(x) return x + 1 end)
    local res = t.call(workflow(function()
      local gen = coroutine.wrap(function()
        for i = 1, 3 do coroutine.yield(inc(i)) end
      end)
      return { gen(), gen(), gen() }
    end), {})
    assert.are.same({ 2, 3, 4 }, res)
  end)
end)

describe("versions and ordering", function()
  it("moor.version records the newest version for a new run", function()
    local res, _, id = t.call(workflow(function() return moor.version("fix-1", 1, 2) end), {})
    assert.are.equal(2, res)
    assert.are.equal(1, #events_of(id, "version"))
  end)

  it("moor.sortedPairs iterates in key order", function()
    local keys = {}
    for k in moor.sortedPairs { c = 1, a = 2, b = 3 } do keys[#keys + 1] = k end
    assert.are.same({ "a", "b", "c" }, keys)
  end)
end)

describe("plain tools", function()
  it("run once as a step and publish progress", function()
    local tool = moor.defineTool {
      description = "plain",
      inputSchema = s.object { x = s.integer() },
      execute = function(input)
        coroutine.yield { working = true }
        return { y = input.x * 2 }
      end,
    }
    local res, err, id = t.call(tool, { x = 21 })
    assert.is_nil(err)
    assert.are.same({ y = 42 }, res)
    assert.are.equal(1, #events_of(id, "progress"))
    assert.are.same({ lifetime = "step", suspend = "none" }, tool.shape)
  end)
end)

describe("definitions", function()
  it("refuses two entry points, task and serve, and a missing description", function()
    local function def_err(fn)
      local ok, e = pcall(fn)
      assert.is_false(ok)
      return e.message
    end
    assert.truthy(def_err(function()
      return moor.defineWorkflowTool { description = "d", inputSchema = s.object {},
        execute = print, task = print }
    end):find("exactly one entry point", 1, true))
    assert.truthy(def_err(function()
      return moor.defineTool { description = "d", inputSchema = s.object {}, task = print }
    end):find("'task' is an entry point of moor.defineWorkflowTool", 1, true))
    assert.truthy(def_err(function()
      return moor.defineTool { description = "d", inputSchema = s.object {}, serve = print }
    end):find("'serve' is an entry point of moor.defineWorkflowTool", 1, true))
    assert.truthy(def_err(function()
      return moor.defineTool { inputSchema = s.object {}, execute = print }
    end):find("missing description", 1, true))
    assert.truthy(def_err(function()
      return moor.defineTool { description = "d", execute = print }
    end):find("missing inputSchema", 1, true))
    assert.truthy(def_err(function()
      return moor.defineTool { description = "d", inputSchema = s.object {}, execute = print,
        execution = "later" }
    end):find('execution must be "background" (run each call as a task) or left out, not "later"', 1, true))
    assert.are.equal('"execution" was replaced by task(). Define task(input, ctx) to run each call as a task.',
      def_err(function()
        return moor.defineWorkflowTool { description = "d", inputSchema = s.object {}, execute = print,
          execution = "background" }
      end))
    assert.truthy(def_err(function()
      return moor.defineWorkflowTool { description = "d", inputSchema = s.object { taskId = s.string() },
        serve = print }
    end):find("a serve tool's inputSchema must not declare taskId", 1, true))
  end)

  it("carries the shape of a workflow tool", function()
    local tool = workflow(function() end)
    assert.are.same({ lifetime = "step", suspend = "workflow" }, tool.shape)
  end)
end)
