local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local upper = moor.step("upper", function(w) return w:upper() end)
local tool = support.register("spec_yieldable", moor.defineWorkflowTool { description = "x", inputSchema = s.object {},
  execute = function()
    -- a step called where the body cannot yield (a gsub callback): live, it raises
    local ok = pcall(string.gsub, "ab cd", "%w+", function(w) return upper(w) end)
    local a = upper("ab") -- op 1
    moor.sleep("1h")      -- op 2: parks
    return { ok = ok, a = a }
  end })

describe("a replayed step where the body cannot yield", function()
  it("replays as it ran", function()
    t.useVirtualClock(1700000000000)
    local id = assert(t.start(tool, {}))
    t.drive(id)
    assert.are.equal("running", engine.run_status(id))
    assert(engine.reload(id)) -- (a restart, or an eviction's reload)
    t.drive(id)
    t.advance("2h")
    local res, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.same({ ok = false, a = "AB" }, res)
  end)
end)
