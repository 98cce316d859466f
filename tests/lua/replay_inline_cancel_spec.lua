local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local sa = moor.step("a", function(k) return k * 10 end)
local tool = support.register("spec_diff2", moor.defineWorkflowTool { description = "x", inputSchema = s.object {},
  execute = function()
    -- luacheck: push ignore 211
    local guard <close> = setmetatable({}, { __close = function()
      sa(100); sa(101)
      moor.async(function() return sa(102) end)
      sa(103)
      moor.step("cleanup", function() return "c" end)()
    end })
    -- luacheck: pop
    sa(1); sa(2)
    moor.async(function() sa(3); moor.sleep("1h"); return sa(4) end)
    sa(5)
    moor.sleep("1h")
    return sa(6)
  end })

local function shape(id)
  local o = {}
  for _, e in ipairs(engine.events(id)) do
    o[#o + 1] = ("%s|%s|%s|%s"):format(tostring(e.op), e.kind, tostring(e.name),
      (e.kind:sub(1, 5) == "step." or e.kind == "run.cancelled") and e.payload or "")
  end
  return table.concat(o, "\n")
end

describe("inline replay under cancel", function()
  it("matches", function()
    t.useVirtualClock(1700000000000)
    local live = assert(t.start(tool, {}))
    t.drive(live)
    assert(t.cancel(live))
    for _ = 1, 50 do if engine.run_status(live) ~= "running" then break end; engine.tick(); t.advance("1ms") end
    local id = assert(t.start(tool, {}))
    t.drive(id)
    assert(t.cancel(id))
    for _ = 1, 200 do
      if engine.run_status(id) ~= "running" then break end
      engine.tick()
      if engine.run_status(id) == "running" then assert(engine.reload(id)) end
      engine.tick()
      t.advance("1ms")
    end
    assert.are.equal(engine.run_status(live), engine.run_status(id))
    assert.are.equal(shape(live), shape(id))
  end)
end)
