-- To-be-closed variables are a body's finally (issue 7, item 15): they run
-- when the body raises, when it is cancelled while parked, and when the
-- cancel's grace period runs out; a durable step inside __close runs once,
-- also across a replay.
local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

local function kinds(id, kind)
  local out = {}
  for _, e in ipairs(t.events(id)) do
    if e.kind == kind then out[#out + 1] = e end
  end
  return out
end

local function guard(fn)
  return setmetatable({}, { __close = fn })
end

describe("to-be-closed cleanup", function()
  it("runs a durable step in __close when the body raises, and the run fails with the body's error", function()
    local cleaned, seen = 0, nil
    local cleanup = moor.step("tbc_cleanup_a", function() cleaned = cleaned + 1; return "clean" end)
    local work = moor.step("tbc_work_a", function() return 1 end)
    local res, err, id = t.call(workflow(function()
      local _g <close> = guard(function(_, e) seen = e; cleanup() end) -- luacheck: ignore
      work()
      error(moor.FatalError("broken after work"))
    end), {})
    assert.is_nil(res)
    assert.are.equal("FatalError", err.code)
    assert.are.equal("broken after work", err.message)
    assert.are.equal(1, cleaned)
    assert.are.equal("broken after work", seen and seen.message) -- __close gets the error
    local steps = kinds(id, "step.result")
    assert.are.equal(2, #steps)
    assert.are.equal("tbc_cleanup_a", steps[2].name)
  end)

  it("replays a raising body's cleanup from the log: the step in __close runs once", function()
    local cleaned = 0
    local cleanup = moor.step("tbc_cleanup_r", function() cleaned = cleaned + 1; return true end)
    local id = assert(t.start(workflow(function()
      local _g <close> = guard(function() -- luacheck: ignore
        cleanup()
        moor.createHook { token = "tbc-replay" }:await() -- parked inside __close
      end)
      error("body failed")
    end)))
    t.drive(id)
    assert.are.equal(1, cleaned)
    assert.are.equal("running", engine.run_status(id))
    t.restart(id) -- replay: the body raises again, the cleanup step comes from the log
    assert.are.equal(1, cleaned)
    assert.is_true((t.deliver("tbc-replay", {})) ~= nil)
    t.drive(id)
    local _, err = t.outcome(id)
    assert.truthy(err and err.message:find("body failed", 1, true))
    assert.are.equal(1, cleaned)
    assert.are.equal(1, #kinds(id, "step.result"))
  end)

  it("runs __close with a durable step when a parked body is cancelled", function()
    local cleaned, seen = 0, nil
    local cleanup = moor.step("tbc_cleanup_c", function() cleaned = cleaned + 1; return true end)
    local id = assert(t.start(workflow(function()
      local _g <close> = guard(function(_, e) seen = e; cleanup() end) -- luacheck: ignore
      moor.sleep("1h")
      return "not reached"
    end)))
    t.drive(id)
    assert.is_true(t.cancel(id))
    t.drive(id)
    local _, err = t.outcome(id)
    assert.are.equal("Cancelled", err.code)
    assert.are.equal(1, cleaned)
    assert.is_true(moor.Cancelled.is(seen))
    assert.are.equal(1, #kinds(id, "step.result"))
    assert.is_nil(kinds(id, "run.cancelled")[1].payload.cleanupError)
  end)

  it("replays a logged cancel: the cleanup step in __close runs once", function()
    local cleaned = 0
    local cleanup = moor.step("tbc_cleanup_rc", function() cleaned = cleaned + 1; return true end)
    local id = assert(t.start(workflow(function()
      local _g <close> = guard(function() cleanup() end) -- luacheck: ignore
      moor.sleep("1h")
    end)))
    t.drive(id)
    assert.is_true(t.cancel(id))
    local _, err = t.restart(id) -- the cancel is logged, applied by the replay
    assert.are.equal("Cancelled", err.code)
    assert.are.equal(1, cleaned)
  end)

  it("closes what is still pending when the grace runs out; a step there is refused, not run", function()
    local saved = engine.CANCEL_GRACE
    engine.CANCEL_GRACE = 50
    local cleaned, plain, refused = 0, 0, nil
    local cleanup = moor.step("tbc_cleanup_g", function() cleaned = cleaned + 1; return true end)
    -- retries forever (1 h apart): the cleanup that outlives the grace
    local stuck = moor.step("tbc_stuck_g", function() error(moor.RetryableError { "down", retryAfter = "1h" }) end,
      { retries = 100 })
    local id = assert(t.start(workflow(function()
      local _outer <close> = guard(function() -- luacheck: ignore
        plain = plain + 1 -- plain Lua still runs
        local ok, e = pcall(cleanup)
        refused = not ok and e or nil
      end)
      local _inner <close> = guard(function() stuck() end) -- luacheck: ignore
      moor.sleep("1h")
    end)))
    t.drive(id)
    assert.is_true(t.cancel(id))
    local ok, status = pcall(t.drive, id, 5000)
    engine.CANCEL_GRACE = saved
    assert.is_true(ok, status)
    local _, err = t.outcome(id)
    assert.are.equal("Cancelled", err.code)
    assert.truthy(err.message:find("grace", 1, true))
    assert.are.equal(1, plain)
    assert.are.equal(0, cleaned)
    assert.truthy(refused and tostring(refused.message or refused):find("grace period is over", 1, true))
  end)

  it("records a cleanup that raises after the grace as the cancel's cleanupError", function()
    local saved = engine.CANCEL_GRACE
    engine.CANCEL_GRACE = 50
    local stuck = moor.step("tbc_stuck_e", function() error(moor.RetryableError { "down", retryAfter = "1h" }) end,
      { retries = 100 })
    local cleanup = moor.step("tbc_cleanup_e", function() return true end)
    local id = assert(t.start(workflow(function()
      local _outer <close> = guard(function() cleanup() end) -- luacheck: ignore
      local _inner <close> = guard(function() stuck() end) -- luacheck: ignore
      moor.sleep("1h")
    end)))
    t.drive(id)
    assert.is_true(t.cancel(id))
    t.drive(id, 5000)
    engine.CANCEL_GRACE = saved
    local cancelled = kinds(id, "run.cancelled")[1]
    assert.truthy(cancelled, "no run.cancelled")
    local ce = cancelled.payload.cleanupError
    assert.truthy(ce, "no cleanupError")
    assert.are.equal("CleanupTooLate", ce.code)
    assert.truthy(ce.message:find("tbc_cleanup_e", 1, true))
  end)

  it("closes a plain tool's to-be-closed variables when it raises", function()
    local closed, seen = 0, nil
    local tool = moor.defineTool {
      description = "raises", inputSchema = s.object {},
      execute = function()
        local _g <close> = guard(function(_, e) closed = closed + 1; seen = e end) -- luacheck: ignore
        error("plain tool broke", 0)
      end,
    }
    local res, err = t.call(tool, {})
    assert.is_nil(res)
    assert.truthy(err.message:find("plain tool broke", 1, true))
    assert.are.equal(1, closed)
    assert.are.equal("plain tool broke", seen)
  end)

  it("lets a raising plain tool's __close park on I/O (as moor.fetch does)", function()
    local core = require "moor.core"
    local waited = false
    local tool = moor.defineTool {
      description = "raises, then cleans up over I/O", inputSchema = s.object {},
      execute = function()
        local _g <close> = guard(function() -- luacheck: ignore
          engine.io(function(resume) core.after(5, resume) end) -- parks the step, as a fetch would
          waited = true
        end)
        error("plain tool broke again", 0)
      end,
    }
    local res, err = t.call(tool, {})
    assert.is_nil(res)
    assert.truthy(err.message:find("plain tool broke again", 1, true), err.message)
    assert.is_true(waited)
  end)
end)
