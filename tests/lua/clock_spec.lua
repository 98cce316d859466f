-- moor.testing's virtual clock (issue 14 item 8): t.useVirtualClock() and
-- t.advance move the engine's one clock (lua/moor/clock.lua); every timer
-- falling due on the way fires at its own due time, in order, with the
-- engine run between them; bodies read it through os.time; step retries wait
-- on it; a restart replays the virtual times; the wall clock is back after
-- the spec.
local moor = require "moor"
local core = require "moor.core"
local t = moor.testing
local s = moor.schema

local H, M = 3600000, 60000

local function workflow(execute)
  return moor.defineWorkflowTool { description = "clock spec tool", inputSchema = s.object {}, execute = execute }
end

local function events_of(id, kind)
  local out = {}
  for _, e in ipairs(t.events(id)) do
    if e.kind == kind then out[#out + 1] = e end
  end
  return out
end

describe("the virtual clock", function()
  it("fires each timer at its own due time, in order, including timers that fired timers start", function()
    local t0 = t.useVirtualClock(1700000000000)
    assert.are.equal(1700000000000, t0)
    local note = moor.step("note", function(what, at) return { what = what, at = at } end)
    local tool = workflow(function()
      local a = moor.async(function()
        moor.sleep("3h")
        return note("a", os.time())
      end)
      moor.sleep("1h")
      note("b", os.time())
      moor.sleep("30m") -- started by the 1 h timer: due at 1 h 30 m, before a's 3 h
      note("c", os.time())
      return { a = moor.all { a }[1], at = os.time(), date = os.date("!%Y-%m-%d %H:%M:%S") }
    end)
    local res, _, id = t.call(tool, {})
    assert.is_nil(res) -- parked on its timers: t.call does not wait for them
    assert.are.equal("running", t.drive(id))
    local started = core.mono()
    assert.are.equal(t0 + 24 * H, t.advance("1d"))
    assert.is_true((core.mono() - started) / 1e6 < 5)
    local err
    res, err = t.outcome(id)
    assert.is_nil(err)
    local base = t0 // 1000
    assert.are.same({ what = "a", at = base + 3 * 3600 }, res.a)
    assert.are.equal(base + 3 * 3600, res.at)
    assert.are.equal(os.date("!%Y-%m-%d %H:%M:%S", base + 3 * 3600), res.date)
    local order = {}
    for _, e in ipairs(events_of(id, "step.result")) do
      order[#order + 1] = e.payload.what .. "@" .. (e.payload.at - base)
    end
    assert.are.same({ "b@3600", "c@5400", "a@10800" }, order)
    local fired = {}
    for _, e in ipairs(events_of(id, "timer.fired")) do fired[#fired + 1] = e.time - t0 end
    assert.are.same({ 1 * H, 90 * M, 3 * H }, fired)
  end)

  it("a step's retry backoff waits on the virtual clock", function()
    t.useVirtualClock()
    local attempts = 0
    local flaky = moor.step("flaky", function()
      attempts = attempts + 1
      if attempts < 2 then error("not yet") end
      return "ok"
    end, { backoff = "2h", maxBackoff = "2h" })
    local id = assert(t.start(workflow(function() return flaky() end), {}))
    assert.are.equal("running", t.drive(id))
    assert.are.equal(1, attempts)
    local t0 = t.now()
    assert.are.equal(t0 + 2 * H, events_of(id, "step.retry")[1].payload.retryAt)
    t.advance(2 * H - 1)
    assert.are.equal(1, attempts)
    t.advance("1ms")
    assert.are.equal(2, attempts)
    local res, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.equal("ok", res)
  end)

  it("a run restarted under it replays the recorded virtual times", function()
    local t0 = t.useVirtualClock()
    local tool = workflow(function()
      local first = os.time()
      moor.sleep("4h")
      local second = os.time()
      moor.sleep("20h")
      return { first = first, second = second, third = os.time() }
    end)
    local id = assert(t.start(tool, {}))
    t.drive(id)
    t.advance("5h")
    local res, err = t.restart(id)
    assert.is_nil(res); assert.is_nil(err)
    t.advance("19h")
    res, err = t.outcome(id)
    assert.is_nil(err)
    local base = t0 // 1000
    assert.are.same({ first = base, second = base + 4 * 3600, third = base + 24 * 3600 }, res)
  end)

  it("t.advance says what to do when the virtual clock is off, and takes only durations", function()
    local ok, err = pcall(t.advance, "1h")
    assert.is_false(ok)
    assert.matches("t.useVirtualClock%(%) first", err)
    t.useVirtualClock()
    ok, err = pcall(t.advance, "soon")
    assert.is_false(ok)
    assert.matches("t.advance: bad duration", err)
    ok, err = pcall(t.useVirtualClock, "yesterday")
    assert.is_false(ok)
    assert.matches("ms since the epoch", err)
  end)

  it("is off again in the next spec: the wall clock is back", function()
    assert.is_true(math.abs(t.now() - core.now()) < 1000)
    local ok = pcall(t.advance, "1h")
    assert.is_false(ok)
  end)

  it("t.useRealClock() switches back within a spec", function()
    t.useVirtualClock(0)
    assert.are.equal(0, t.now())
    t.useRealClock()
    assert.is_true(math.abs(t.now() - core.now()) < 1000)
  end)
end)
