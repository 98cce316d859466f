local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

-- A step bounds its own computation with a count hook (a common Lua idiom)
-- and, returning early, leaves the hook on its coroutine.
local bounded = moor.step("bounded", function(n)
  local budget = 100000
  debug.sethook(function()
    budget = budget - 1000
    if budget < 0 then error("step computation over budget") end
  end, "", 1000)
  local x = 0
  for i = 1, n do x = x + i end
  return x -- (the hook is not removed: it was this step's own coroutine)
end)
local count = moor.step("count", function(n) local x = 0; for i = 1, n do x = x + i end; return x end, { retries = 0 })

local a = support.register("spec_hook_a", moor.defineWorkflowTool { description = "x", inputSchema = s.object {},
  execute = function() return bounded(10) end })
local b = support.register("spec_hook_b", moor.defineWorkflowTool { description = "x", inputSchema = s.object {},
  execute = function() return count(10000000) end })

describe("a kept worker", function()
  it("does not keep a step's debug hook for the next run's step", function()
    assert.are.equal(55, (t.call(a)))
    local id = assert(t.start(b))
    t.drive(id, 100000)
    local evs = {}
    for _, e in ipairs(engine.events(id)) do evs[#evs + 1] = e.kind .. " " .. e.payload:sub(1, 120) end
    local res = t.outcome(id)
    assert.are.equal(50000005000000, res)
  end)
end)
