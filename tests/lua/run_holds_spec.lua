-- A run started in this process that asked nothing, made no hook and started
-- no run ends without the three queries for them (store.withdraw_run_inputs,
-- close_hooks, running_children: a fifth of a 1-step run's SQL). One that
-- did, or one loaded from its log (it may hold rows an earlier process
-- wrote), still withdraws its questions, closes its hooks and cancels the
-- runs it started.
local moor = require "moor"
local engine = require "moor.engine"
local store = require "moor.store"
local t = moor.testing
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local workflow = support.workflow -- (prefix, execute) -> a fresh tool name

local OPTIONS = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } }
local CLEANUPS = { "withdraw_run_inputs", "close_hooks", "running_children" }

describe("a run's cleanup at its end", function()
  local saved, calls
  before_each(function()
    saved, calls = {}, {}
    for _, fn in ipairs(CLEANUPS) do
      saved[fn] = store[fn]
      store[fn] = function(id, ...)
        calls[#calls + 1] = fn .. " " .. id
        return saved[fn](id, ...)
      end
    end
  end)
  after_each(function()
    for _, fn in ipairs(CLEANUPS) do store[fn] = saved[fn] end
  end)

  local function made(fn, id)
    for _, c in ipairs(calls) do
      if c == fn .. " " .. id then return true end
    end
    return false
  end

  it("queries nothing for a run started here that holds no question, hook or run", function()
    local inc = moor.step("holds_inc", function(x) return x + 1 end)
    local res, err, id = t.call(workflow("holds_plain", function() return inc(1) end), {})
    assert.is_nil(err)
    assert.are.equal(2, res)
    for _, fn in ipairs(CLEANUPS) do assert.is_false(made(fn, id), fn) end
  end)

  it("withdraws the question of a run that asked and was cancelled", function()
    local id = assert(t.start(workflow("holds_ask", function(_, ctx)
      return ctx.ask { prompt = "Go?", options = OPTIONS }
    end), {}))
    t.drive(id)
    local req = assert(t.inputs(id)[1]).requestId
    assert.are.equal("pending", store.input(req).status)
    assert(t.cancel(id))
    t.drive(id)
    assert.are.equal("cancelled", engine.run_status(id))
    assert.is_true(made("withdraw_run_inputs", id))
    assert.are.equal("cancelled", store.input(req).status)
  end)

  it("closes the hook of a run that ended without awaiting it", function()
    local res, err, id = t.call(workflow("holds_hook", function(_, ctx)
      moor.createHook { token = "holds-" .. ctx.runId }
      return "done"
    end), {})
    assert.is_nil(err)
    assert.are.equal("done", res)
    assert.is_true(made("close_hooks", id))
    assert.are.equal(1, store.hook("holds-" .. id).closed)
  end)

  it("cancels the run a run started when it ends first", function()
    local child_tool = workflow("holds_child", function(_, ctx)
      return ctx.ask { prompt = "Child?", options = OPTIONS }
    end)
    local child
    local res, err, id = t.call(workflow("holds_parent", function()
      local ok, started = engine.op("child", child_tool, { tool = child_tool, input = {} })
      assert(ok and started.runId)
      child = started.runId
      return "left"
    end), {})
    assert.is_nil(err)
    assert.are.equal("left", res)
    assert.is_true(made("running_children", id))
    t.drive(child)
    assert.are.equal("cancelled", engine.run_status(child))
  end)

  it("queries all three for a run loaded from its log", function()
    local h = moor.createHook
    local id = assert(t.start(workflow("holds_loaded", function(_, ctx)
      return h { token = "holds-loaded-" .. ctx.runId }:await()
    end), {}))
    t.drive(id)
    t.restart(id) -- (replayed: the engine did not see its rows written)
    calls = {}
    assert(t.deliver("holds-loaded-" .. id, { n = 1 }))
    t.drive(id)
    assert.are.same({ n = 1 }, (t.outcome(id)))
    for _, fn in ipairs(CLEANUPS) do assert.is_true(made(fn, id), fn) end
  end)
end)
