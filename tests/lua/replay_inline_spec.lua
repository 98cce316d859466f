local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local calls = {}
local sa = moor.step("a", function(k) calls[#calls + 1] = k; return k * 10 end)
local snil = moor.step("nil", function() return nil end)
local sfail = moor.step("fail", function() error(moor.FatalError("boom")) end, { retries = 0 })
local sflaky_n = 0
local sflaky = moor.step("flaky", function()
  sflaky_n = sflaky_n + 1
  if sflaky_n % 2 == 1 then error("again") end
  return "ok"
end,
  { retries = 2, backoff = 10 })

local tool = support.register("spec_diff", moor.defineWorkflowTool { description = "x", inputSchema = s.object {},
  execute = function()
    local out = {}
    out[#out + 1] = sa(1)
    local ok, e = pcall(sfail)
    out[#out + 1] = ok and "?" or e.code
    out[#out + 1] = sflaky()
    local f1 = moor.async(function() return sa(2) + sa(3) end)
    local f2 = moor.async(function() moor.sleep("10ms"); return sa(4) end)
    out[#out + 1] = sa(5)
    moor.pause()
    out[#out + 1] = sa(6)
    local r = moor.all { f1, f2 }
    out[#out + 1] = r[1] + r[2]
    local x = moor.race { moor.async(function() return sa(7) end), moor.timer("1h") }
    out[#out + 1] = x
    out[#out + 1] = tostring(snil())
    out[#out + 1] = os.time()
    moor.sleep("5ms")
    local co = coroutine.wrap(function() local v = sa(8); coroutine.yield(v); return sa(9) end)
    out[#out + 1] = co()
    out[#out + 1] = co()
    for i = 10, 40 do out[#out + 1] = sa(i) end
    local g = moor.async(function() moor.pause(); return sa(41) end)
    out[#out + 1] = sa(42)
    out[#out + 1] = moor.await and moor.await(g) or moor.all { g }[1]
    out[#out + 1] = os.time()
    local ans = moor.step("last", function() return "fin" end)()
    out[#out + 1] = ans
    return table.concat(out, ",")
  end })

local function shape(id)
  local o = {}
  for _, e in ipairs(engine.events(id)) do
    o[#o + 1] = ("%s|%s|%s|%s"):format(tostring(e.op), e.kind, tostring(e.name),
      (e.kind == "step.result" or e.kind == "step.error") and e.payload or "")
  end
  return table.concat(o, "\n")
end

describe("inline replay", function()
  it("gives what a live run gives, restarted after every round", function()
    t.useVirtualClock(1700000000000)
    sflaky_n = 0
    local live_id = assert(t.start(tool, {}))
    for _ = 1, 200 do
      if engine.run_status(live_id) ~= "running" then break end
      t.advance("20ms")
    end
    local live_res = t.outcome(live_id)
    sflaky_n = 0
    local id = assert(t.start(tool, {}))
    local restarts = 0
    for _ = 1, 400 do
      if engine.run_status(id) ~= "running" then break end
      engine.tick()
      if engine.run_status(id) == "running" then assert(engine.reload(id)); restarts = restarts + 1 end
      engine.tick()
      if engine.run_status(id) == "running" then t.advance("1ms") end
    end
    local res = t.outcome(id)
    assert.are.equal(live_res, res)
    local a, b = shape(live_id), shape(id)
    assert.are.equal(a, b)
  end)
end)
