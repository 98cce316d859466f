local moor = require "moor"
local t = moor.testing
local s = moor.schema

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

local function last(id, kind)
  local out
  for _, e in ipairs(t.events(id)) do if e.kind == kind then out = e end end
  return out
end

local OPTS = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } }

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
