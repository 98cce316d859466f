-- Regressions found by review: replay order, moor.version, duplicated
-- events, cancels racing results, reloads, several hook waiters, child runs,
-- timers of settled runs, and timers pending at shutdown.
local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"
local core = require "moor.core"

local OPTS = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } }

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

local function count(id, kind)
  local n = 0
  for _, e in ipairs(t.events(id)) do if e.kind == kind then n = n + 1 end end
  return n
end

local function last(id, kind)
  local out
  for _, e in ipairs(t.events(id)) do if e.kind == kind then out = e end end
  return out
end

describe("replay order", function()
  it("replays a run whose branch settles a future in a group-committed round", function()
    local sa = moor.step("a", function() return 1 end)
    local sb = moor.step("b", function() return 2 end)
    local sw = moor.step("w", function() return 3 end)
    local sz = moor.step("z", function() return 4 end)
    local id = assert(t.start(workflow(function()
      local fa = moor.async(function() return sa() end)
      local fb = moor.async(function() sb(); return sw() end)
      moor.await(fa)
      sz()
      moor.await(fb)
      moor.sleep("1h")
      return "ok"
    end)))
    t.drive(id)
    assert.are.equal("running", engine.run_status(id))
    local _, err = t.restart(id)
    assert.is_nil(err and err.message)
    assert.are.equal("running", engine.run_status(id))
  end)
end)

describe("moor.version", function()
  it("gives min to a run parked past the marker (ops recorded after it, no completion yet)", function()
    local new_code = false
    local sa = moor.step("a", function() return 1 end)
    local sb = moor.step("b", function() return 2 end)
    local id = assert(t.start(workflow(function()
      sa()
      if new_code and moor.version("add-b", 1, 2) == 2 then sb() end
      moor.sleep("1h")
      return "ok"
    end)))
    t.drive(id)
    new_code = true -- deploy the patched code, then restart
    local _, err = t.restart(id)
    assert.is_nil(err and err.message)
    assert.are.equal("running", engine.run_status(id))
  end)
end)

describe("replay", function()
  it("does not publish progress again for code already run live", function()
    local sa = moor.step("a", function() return 1 end)
    local id = assert(t.start(workflow(function()
      sa()
      coroutine.yield { phase = "after a" }
      moor.sleep("1h")
      return "ok"
    end)))
    t.drive(id)
    assert.are.equal(1, count(id, "progress"))
    t.restart(id)
    assert.are.equal(1, count(id, "progress"))
  end)

  it("does not duplicate a session's transcript after a restart", function()
    local agent = moor.defineAgent { model = t.script { "hello there" }, instructions = "be brief" }
    local c = t.converse(agent, { "hi" })
    assert.are.equal(2, #c.transcript)
    local saved = engine.agent
    engine.agent = agent
    t.restart(c.sessionId)
    engine.agent = saved
    local details = require("moor.session").details(c.sessionId)
    assert.are.equal(2, #details.transcript)
  end)
end)

describe("cancel races", function()
  it("an answer recorded after a cancel (same round) does not skip cleanup", function()
    local cleaned = 0
    local cleanup = moor.step("cleanup", function() cleaned = cleaned + 1; return true end)
    local id = assert(t.start(workflow(function(_, ctx)
      local ok, err = pcall(ctx.ask, { prompt = "go?", options = OPTS })
      cleanup()
      if not ok then error(err, 0) end
      return "answered"
    end)))
    t.drive(id)
    local q = t.inputs(id)[1]
    assert.is_true(t.cancel(id))
    assert.is_true(t.answer(q.requestId, { optionId = "yes" })) -- arrives before the next tick
    t.drive(id)
    local ev = last(id, "run.cancelled")
    assert.is_nil(ev.payload.cleanupError)
    assert.are.equal(1, cleaned)
  end)

  it("a cancel recorded while the run is not in memory still runs cleanup", function()
    local cleaned = 0
    local cleanup = moor.step("cleanup2", function() cleaned = cleaned + 1; return true end)
    local second = moor.step("second", function() return true end)
    local id = assert(t.start(workflow(function(_, ctx)
      local ok, err = pcall(ctx.ask, { prompt = "go?", options = OPTS })
      cleanup()
      second()
      if not ok then error(err, 0) end
      return "answered"
    end)))
    t.drive(id)
    assert.is_true(t.cancel(id)) -- logged; not applied before the restart (as `moor cancel` with no host)
    t.restart(id)
    local ev = last(id, "run.cancelled")
    assert.is_table(ev)
    assert.is_nil(ev.payload.cleanupError)
    assert.are.equal(1, cleaned)
  end)
end)

describe("child runs", function()
  it("restarting a child does not tell its parent that the child settled", function()
    local child = workflow(function() moor.sleep("1h"); return "child done" end)
    moor._bind(child, "e_child", "h1")
    engine.register("e_child", child)
    local parent_id = assert(t.start(workflow(function()
      local ok, st = engine.op("child", "e_child", { tool = "e_child", input = {} })
      assert(ok and st.runId)
      local _, settled = engine.op("child.await", "await", { runId = st.runId })
      return settled
    end)))
    t.drive(parent_id)
    local kid = require("moor.core").query("SELECT id FROM runs WHERE parent_id=?", parent_id)[1].id
    t.restart(kid)
    t.drive(parent_id)
    assert.are.equal("running", engine.run_status(kid))
    assert.are.equal("running", engine.run_status(parent_id)) -- the parent still waits
  end)
end)

describe("misc", function()
  it("two branches awaiting the same hook both get a delivery", function()
    local id = assert(t.start(workflow(function()
      local h = moor.createHook { token = "f-dup-hook" }
      local a = moor.async(h.await, h)
      local b = moor.async(h.await, h)
      return moor.all { a, b }
    end)))
    t.drive(id)
    assert.is_truthy(t.deliver("f-dup-hook", { n = 1 }))
    t.drive(id)
    assert.is_truthy(t.deliver("f-dup-hook", { n = 2 }))
    t.drive(id)
    assert.are.equal("completed", engine.run_status(id))
  end)

  it("os.clock in a body is the same after replay", function()
    local fast = moor.step("fast", function() return 1 end)
    local slow = moor.step("slow", function()
      local t0 = core.now(); while core.now() - t0 < 30 do end
      return 2
    end)
    local id = assert(t.start(workflow(function()
      local seen
      local a = moor.async(function() fast(); seen = os.clock(); return seen end)
      local b = moor.async(function() return slow() end)
      moor.all { a, b }
      coroutine.yield { clock = seen }
      moor.createHook { token = "f-clock" }:await()
      return { clock = seen }
    end)))
    t.drive(id)
    local live
    for _, e in ipairs(t.events(id)) do if e.kind == "progress" then live = e.payload.clock end end
    t.restart(id)
    t.deliver("f-clock", {})
    t.drive(id)
    local res = t.outcome(id)
    assert.are.equal(live, res.clock)
  end)
end)

describe("restart", function()
  it("does not run a parked body's to-be-closed cleanup when the run is only reloaded", function()
    local cleaned = 0
    local cleanup = moor.step("g_cleanup", function() cleaned = cleaned + 1 end)
    local id = assert(t.start(workflow(function()
      local _guard <close> = setmetatable({}, { __close = function() cleanup() end }) -- luacheck: ignore
      moor.sleep("1h")
      return "ok"
    end)))
    t.drive(id)
    t.restart(id)
    assert.are.equal("running", engine.run_status(id))
    assert.are.equal(0, cleaned)
  end)

  it("timers of a settled run do not stay in the heap behind a live run's timer", function()
    local base = engine.stats().timers
    local parked = assert(t.start(workflow(function() moor.sleep("30m") end)))
    t.drive(parked)
    local id = assert(t.start(workflow(function()
      return (moor.race { moor.async(function() return "now" end), moor.timer("1h") })
    end)))
    t.drive(id)
    assert.are.equal("completed", engine.run_status(id))
    assert.are.equal(base + 1, engine.stats().timers) -- only the parked run's sleep
  end)
end)

describe("child runs", function()
  it("a restart between the child's commit and child.started does not start a second child", function()
    local child = workflow(function() moor.sleep("1h"); return "child done" end)
    moor._bind(child, "h_child", "h2")
    engine.register("h_child", child)
    local parent_id = assert(t.start(workflow(function()
      local ok, st = engine.op("child", "h_child", { tool = "h_child", input = {} })
      assert(ok and st.runId)
      local _, settled = engine.op("child.await", "await", { runId = st.runId })
      return settled
    end)))
    t.drive(parent_id)
    -- The crash window: M.call commits the child's row (start_child), then the process dies
    -- before the parent's child.started is committed. Simulate by dropping that event.
    core.exec("DELETE FROM events WHERE run_id=? AND kind='child.started'", parent_id)
    t.restart(parent_id)
    local kids = core.query("SELECT id FROM runs WHERE parent_id=? AND parent_op=1", parent_id)
    assert.are.equal(1, #kids)
  end)
end)

describe("replay of an op that has no record yet", function()
  it("a pending hook:await followed by recorded ops replays", function()
    local sa = moor.step("k_a", function() return 1 end)
    local id = assert(t.start(workflow(function()
      local h = moor.createHook { token = "k-gap-hook" }
      local f = moor.async(h.await, h)
      sa()
      sa() -- recorded after the branch's hook.await was issued
      return moor.await(f)
    end)))
    t.drive(id)
    t.restart(id)
    assert.are.equal("running", engine.run_status(id))
    assert.is_truthy(t.deliver("k-gap-hook", { ok = 1 }))
    t.drive(id)
    assert.are.same({ ok = 1 }, (t.outcome(id)))
  end)

  it("a step still in I/O while a later step is recorded replays", function()
    local slow = moor.step("k_slow", function()
      engine.io(function(resume) core.after(300, resume) end)
      return "slow"
    end)
    local fast = moor.step("k_fast", function() return "fast" end)
    local id = assert(t.start(workflow(function()
      local f = moor.async(slow)
      fast()
      fast() -- recorded after the branch's slow step was issued
      return moor.await(f)
    end)))
    engine.tick() -- fast is recorded; slow waits on its I/O (a crash now)
    t.restart(id)
    local status = engine.run_status(id)
    core.wait(400) -- let the abandoned I/O timer fire (a pending core.after at exit segfaults the host)
    assert.are.equal("completed", status)
  end)
end)

describe("m", function()
  it("leaves a timer pending at exit", function()
    assert.has_no.errors(function() core.after(300, function() end) end)
  end)
end)

describe("moor.testing.converse", function()
  it("raises the session's own refusal for a message it cannot send", function()
    local agent = moor.defineAgent { model = t.script { "hello there" }, instructions = "be brief" }
    local ok, err = pcall(t.converse, agent, { { message = "hi", turnPolicy = "later" } })
    assert.is_false(ok)
    assert.matches('turnPolicy must be "steer" or "queue"', tostring(err), 1, true)
  end)
end)
