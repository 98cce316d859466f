-- A model-written program that computes a long time gives the host its loop
-- back between slices (sandbox option `slice`; the workflow tool pauses its
-- body with moor.pause between them), so other runs go on meanwhile.
local moor = require "moor"
local core = require "moor.core"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local factory = require "moor.tools.workflow"

local function run_sliced(src, opts)
  local o = { slice = 1000, seconds = 5, instructions = 2 ^ 40 }
  for k, v in pairs(opts or {}) do o[k] = v end
  local sb = assert(core.sandbox_new(o))
  assert(sb:load(src, "p"))
  local kind, v = sb:run()
  local slices = 0
  while kind == "slice" and slices < 100000 do
    slices = slices + 1
    kind, v = sb:resume({})
  end
  return kind, v, slices
end

describe("slices", function()
  it("a long computation comes back in slices and ends with the same result", function()
    local kind, v, slices = run_sliced([[
      local n = 0
      for i = 1, 2e6 do n = n + i end
      local co = coroutine.wrap(function() for _ = 1, 1e6 do n = n + 1 end coroutine.yield(n) return 0 end)
      return co()
    ]])
    assert.are.equal("done", kind)
    assert.are.equal(2000001000000 + 1000000, v)
    assert.is_true(slices > 1, tostring(slices))
  end)

  it("a sort comparator is not cut (no pause inside a C call), the time limit holds across slices", function()
    local kind, v = run_sliced([[
      local t = {}
      for i = 1, 200000 do t[i] = (i * 7919) % 200003 end
      table.sort(t, function(a, b) return a < b end)
      for i = 2, #t do if t[i - 1] > t[i] then return "unsorted" end end
      return #t
    ]])
    assert.are.equal("done", kind)
    assert.are.equal(200000, v)
    local k2, e2, slices = run_sliced("while true do end", { seconds = 0.3 })
    assert.are.equal("error", k2)
    assert.matches("time limit", e2.message)
    assert.is_true(slices > 1)
  end)

  it("slicing changes no order: a race of two computations and the calls of ctx.all come out as unsliced",
    function()
      -- (a replay runs the program again, cut at other places: what it does
      -- must not depend on where the slices end)
      local src = [[
        local function spin(n) local x = 0 for _ = 1, n do x = x + 1 end return x end
        local w, i = ctx.race{ function() return spin(4e5) end, function() return spin(2e5) end }
        local r = ctx.all{ function() spin(4e5) return ctx.agent("a", { message = "1" }) end,
          function() spin(1e5) return ctx.agent("b", { message = "2" }) end }
        return { w, i, r[1], r[2] }
      ]]
      local function go(slice)
        local sb = assert(core.sandbox_new { slice = slice, seconds = 10, instructions = 2 ^ 40 })
        assert(sb:load(src, "p"))
        local kind, v = sb:run()
        local calls = {}
        for _ = 1, 100000 do
          if kind == "slice" then
            kind, v = sb:resume({})
          elseif kind == "calls" then
            local replies = {}
            for _, c in ipairs(v) do
              calls[#calls + 1] = c.id .. c.name
              replies[c.id] = { ok = true, value = c.name }
            end
            kind, v = sb:resume(replies)
          else
            break
          end
        end
        return kind, v, table.concat(calls, " ")
      end
      local k0, v0, c0 = go(nil)
      local k1, v1, c1 = go(100)
      assert.are.equal("done", k0)
      assert.are.same({ 400000, 1, "a", "b" }, v0)
      assert.are.equal("1a 2b", c0)
      assert.are.equal(k0, k1)
      assert.are.same(v0, v1)
      assert.are.equal(c0, c1)
    end)

  it("without slice, a program runs until it waits or ends", function()
    local sb = assert(core.sandbox_new { seconds = 5 })
    assert(sb:load("local n = 0 for i = 1, 2e6 do n = n + 1 end return n", "p"))
    local kind, v = sb:run()
    assert.are.equal("done", kind)
    assert.are.equal(2000000, v)
  end)

  it("the workflow tool lets another run's timer fire while its program computes", function()
    support.register("slice_wf", factory { maxSubagents = 1 })
    support.register("slice_nap", moor.defineWorkflowTool {
      description = "naps", inputSchema = s.object {},
      execute = function() moor.sleep("20ms"); return "woke" end,
    })
    local wf = assert(t.start("slice_wf", { lua = "local n = 0 for i = 1, 3e7 do n = n + 1 end return n" }))
    local nap = assert(t.start("slice_nap", {}))
    local order = {}
    local deadline = core.now() + 60000
    while #order < 2 and core.now() < deadline do
      local due = engine.tick()
      for _, id in ipairs { nap, wf } do
        if engine.run_status(id) ~= "running" and not order[id] then
          order[id] = true
          order[#order + 1] = id
        end
      end
      core.wait(due and math.min(due, 5) or 5)
    end
    assert.are.equal(2, #order)
    assert.are.equal(nap, order[1]) -- the nap ended while the program computed
    local result = t.outcome(wf)
    assert.are.equal(30000000, result.result)
  end)
end)

describe("slices and cancellation", function()
  support.register("slice_wf_long", factory { maxSubagents = 1, seconds = 20 })

  it("a cancel reaches a program that computes: it is closed and the run ends cancelled at once", function()
    local id = assert(t.start("slice_wf_long", { lua = [[
      local x <close> = setmetatable({}, { __close = function() print("closed") end })
      while true do end
    ]] }))
    for _ = 1, 5 do engine.tick(); core.wait(1) end -- computing, slice after slice
    assert.are.equal("running", engine.run_status(id))
    local t0 = core.now()
    assert.is_true(t.cancel(id))
    while engine.run_status(id) == "running" and core.now() - t0 < 5000 do
      engine.tick()
      core.wait(1)
    end
    assert.are.equal("cancelled", engine.run_status(id))
    assert.is_true(core.now() - t0 < 3000, tostring(core.now() - t0))
  end)
end)

describe("moor.pause", function()
  local steps = 0
  support.register("pauser", moor.defineWorkflowTool {
    description = "pauses", inputSchema = s.object {},
    execute = function()
      local a = moor.step("pa", function() steps = steps + 1; return 1 end)()
      local nap = moor.async(moor.sleep, "5ms") -- its timer fires while the body pauses: held, then handed over
      for _ = 1, 300 do moor.pause() end
      moor.await(nap)
      moor.sleep("20ms")
      for _ = 1, 30 do moor.pause() end
      local b = moor.step("pb", function() steps = steps + 1; return 2 end)()
      return a + b
    end,
  })

  it("is not recorded: a run that paused replays to the same result, each step once", function()
    local id = assert(t.start("pauser", {}))
    local deadline = core.now() + 10000
    while steps < 1 and core.now() < deadline do
      engine.tick()
      core.wait(1)
    end
    for _ = 1, 20 do engine.tick() end -- part way through the pauses
    assert.are.equal("running", engine.run_status(id))
    local result, err = t.restart(id)
    if result == nil and err == nil then t.drive(id, 5000); result, err = t.outcome(id) end
    assert.is_nil(err, err and err.message)
    assert.are.equal(3, result, engine.run_status(id))
    assert.are.equal(2, steps)
    for _, e in ipairs(t.events(id)) do assert.are_not.equal("pause", e.kind) end
  end)
end)
