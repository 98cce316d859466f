local moor = require "moor"
local engine = require "moor.engine"
local json = require "moor.json"
local store = require "moor.store"
local s = moor.schema

local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
support.register("spec_echo", moor.defineWorkflowTool {
  description = "spec tool", inputSchema = s.object {},
  execute = function() return true end,
})

local function started_payload(id)
  for _, e in ipairs(store.events(id)) do
    if e.kind == "run.started" then return e.payload end
  end
end

describe("run.started", function()
  it("is what encode gives", function()
    local inputs = {
      '{"a":null,"b":[],"c":{},"d":[1,null,2.5,-0.0,1e300],"e":"\\u0001\\u2028/\\"x\\\\"}',
      '{"z":1,"A":2,"_":3,"aa":{"y":[[],[{}]]}}',
      '{"big":9007199254740993,"f":0.1,"g":123456789012345678}',
      '{"s":"caf\\u00e9 \\ud83d\\ude00"}',
    }
    local ids = { "call_\"quoted\"\\x", "ünï\1code", "plain" }
    for _, inp in ipairs(inputs) do
      for _, cid in ipairs(ids) do
        local sess = { id = "s\"1", turnId = 3, principal = { sub = "u\1", groups = json.array {} }, taskId = "t-1",
          inbox = "tok" }
        local id, err = engine.call("spec_echo", inp, { callId = cid, parent = "run_\"p", session = sess })
        if not id then
          -- resolve by registering
          error(tostring(err))
        end
        local p = started_payload(id)
        local row = store.run(id)
        local want = json.encode({ input = json.decode(row.input), callId = cid, parentId = "run_\"p", session = sess })
        assert.are.equal(want, p)
      end
    end
  end)
end)
