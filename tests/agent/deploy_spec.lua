-- The example agent's deploy tool is the seed's approve-with-deadline with
-- escalation (DESIGN.md "Waiting and racing"): ask, race the answer against
-- 4 h, page on-call, race it against 20 h more, give up. On the virtual
-- clock (t.useVirtualClock, t.advance) the whole day takes milliseconds,
-- and a run restarted under it replays to the same result.
local moor = require "moor"
local core = require "moor.core"
local t = moor.testing

local H = 3600000

local function count(id, kind, name)
  local n = 0
  for _, e in ipairs(t.events(id)) do
    if e.kind == kind and (name == nil or e.name == name) then n = n + 1 end
  end
  return n
end

-- The service's lines in the deploys' witness log (lib/deploy.lua).
local function witnessed(line)
  local dir = os.getenv("MOOR_DEPLOY_DIR") or ".moor/deploys"
  local f = io.open(dir .. "/witness.log", "r")
  if not f then return 0 end
  local n = 0
  for l in f:lines() do if l == line then n = n + 1 end end
  f:close()
  return n
end

local function service()
  return ("clock-%d-%d"):format(core.now(), math.random(1, 1 << 30))
end

local function withdrawn(id, request_id)
  for _, e in ipairs(t.events(id)) do
    if e.kind == "input.resolved" and e.payload.requestId == request_id and e.payload.outcome == "cancelled" then
      return true
    end
  end
  return false
end

describe("deploy on the virtual clock", function()
  it("pages on-call once past 4 h and withdraws the question past 24 h, in well under a second", function()
    local started = core.mono()
    local t0 = t.useVirtualClock()
    local svc = service()
    local id = assert(t.start("deploy", { service = svc }))
    assert.are.equal("running", t.drive(id))
    local q = t.inputs(id)
    assert.are.equal(1, #q)
    local request_id = q[1].requestId

    assert.are.equal(t0 + 4 * H - 1, t.advance(4 * H - 1))
    assert.are.equal(0, count(id, "step.result", "pageOnCall"), "no page before 4 h")
    assert.are.equal(t0 + 4 * H, t.advance("1ms"))
    assert.are.equal(1, count(id, "step.result", "pageOnCall"), "the page step ran at 4 h")
    t.advance("1ms") -- past 4 h
    assert.are.equal(1, witnessed("page " .. svc))
    assert.are.equal(1, #t.inputs(id), "the question is still open after the page")

    t.advance("19h59m")
    assert.are.equal("running", t.drive(id))
    assert.are.equal(1, #t.inputs(id), "still open just before 24 h")
    t.advance("2m") -- past 24 h
    local res, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.same({ deployed = false, reason = "timed out" }, res)
    assert.are.equal(0, #t.inputs(id))
    assert.is_true(withdrawn(id, request_id), "the question was withdrawn")
    local ok = t.answer(request_id, { optionId = "approve" })
    assert.is_nil(ok, "a withdrawn question takes no answer")
    assert.are.equal(1, count(id, "step.result", "pageOnCall"))
    assert.are.equal(1, witnessed("page " .. svc), "the page step ran once")
    assert.are.equal(0, witnessed("apply " .. svc))

    -- the timers were due at their virtual times, 4 h and 24 h after the question
    local dues = {}
    for _, e in ipairs(t.events(id)) do
      if e.kind == "timer.scheduled" then dues[#dues + 1] = e.payload.due end
    end
    assert.are.same({ t0 + 4 * H, t0 + 24 * H }, dues)
    local elapsed = (core.mono() - started) / 1e6
    assert.is_true(elapsed < 5, ("a virtual day took %.2f s of real time"):format(elapsed))
  end)

  it("replays the same way after a restart under the virtual clock", function()
    local t0 = t.useVirtualClock()
    local svc = service()
    local id = assert(t.start("deploy", { service = svc }))
    t.drive(id)
    t.advance("4h")
    assert.are.equal(1, count(id, "step.result", "pageOnCall"))
    local request_id = t.inputs(id)[1].requestId

    -- restarted while waiting on the 20 h timer: the page is not run again,
    -- the question is the same one, and the timer keeps its virtual due time
    local res, err = t.restart(id)
    assert.is_nil(res); assert.is_nil(err)
    assert.are.equal(1, witnessed("page " .. svc))
    assert.are.same({ request_id }, { t.inputs(id)[1].requestId })
    t.advance(20 * H - 1)
    assert.are.equal("running", t.drive(id))
    t.advance("1ms")
    res, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.same({ deployed = false, reason = "timed out" }, res)
    assert.is_true(withdrawn(id, request_id))
    assert.are.equal(1, count(id, "step.result", "pageOnCall"))
    assert.are.equal(1, witnessed("page " .. svc))
    assert.are.equal(t0 + 24 * H, t.now())
  end)

  it("an answer before the deadline deploys, and the timers are dropped", function()
    t.useVirtualClock()
    local svc = service()
    local id = assert(t.start("deploy", { service = svc }))
    t.drive(id)
    t.advance("5h") -- paged
    assert.is_true(t.answer(t.inputs(id)[1].requestId, { optionId = "approve" }))
    t.drive(id)
    local res, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.same({ deployed = true, url = ("https://%s.example.internal"):format(svc) }, res)
    assert.are.equal(1, witnessed("page " .. svc))
    t.advance("1d")
    assert.are.equal(1, count(id, "timer.fired"), "only the 4 h timer fired: the answer won the 20 h race")
  end)
end)
