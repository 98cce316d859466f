local moor = require "moor"
local t = moor.testing
local s = moor.schema

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

local function count(id, kind)
  local n = 0
  for _, e in ipairs(t.events(id)) do if e.kind == kind then n = n + 1 end end
  return n
end

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
    local engine = require "moor.engine"
    local saved = engine.agent
    engine.agent = agent
    t.restart(c.sessionId)
    engine.agent = saved
    local details = require("moor.session").details(c.sessionId)
    assert.are.equal(2, #details.transcript)
  end)
end)
