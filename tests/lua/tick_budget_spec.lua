-- Issue 13, items 1 and 2: a scheduler round with a budget (engine.tick(budget_us))
-- returns with work left and the next round goes on with it, in the order an
-- unbudgeted round takes; settled runs' timers leave the heap with their
-- runs (no pass over the heap, ever), while live runs' timers stay and fire.
local moor = require "moor"
local t = moor.testing
local s = moor.schema
local engine = require "moor.engine"
local timers = require "moor.engine.timers"
local core = require "moor.core"

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

local inc = moor.step("tb_inc", function(x) return x + 1 end)

-- n steps in a row, then k branches of m steps each in one moor.all.
local function steps_tool(n, k, m)
  return workflow(function()
    local x = 0
    for _ = 1, n do x = inc(x) end
    local fs = {}
    for b = 1, k do
      fs[b] = moor.async(function()
        local y = 0
        for _ = 1, m do y = inc(y) end
        return y
      end)
    end
    if k > 0 then
      for _, y in ipairs(moor.all(fs)) do x = x + y end
    end
    return x
  end)
end

-- The ops of a run's log in order: "kind name op" for each event with an op.
local function op_trace(id)
  local out = {}
  for _, e in ipairs(t.events(id)) do
    if e.op then out[#out + 1] = ("%s %s %s"):format(e.kind, tostring(e.name), tostring(e.op)) end
  end
  return out
end

describe("a budgeted tick", function()
  it("returns with work left, and the next ticks finish it", function()
    local id = assert(t.start(steps_tool(2000, 0, 0)))
    local due = engine.tick(1000) -- 1 ms: far less than 2,000 steps take
    assert.are.equal(0, due)      -- work left: the next tick goes on at once
    assert.are.equal("running", engine.run_status(id))
    local done = #t.events(id)
    assert.truthy(done < 2000)    -- not every step was taken
    local ticks = 1
    while engine.run_status(id) == "running" and ticks < 100000 do
      engine.tick(1000)
      ticks = ticks + 1
    end
    assert.are.equal("completed", engine.run_status(id))
    assert.truthy(ticks > 2)
    local status, result = engine.run_info(id)
    assert.are.equal("completed", status)
    assert.are.equal("2000", result)
    -- Every step is in the log once, in op order.
    local trace = op_trace(id)
    local n = 0
    for i, line in ipairs(trace) do
      if line:match("^step.result tb_inc ") then
        n = n + 1
        assert.are.equal(("step.result tb_inc %d"):format(i), line)
      end
    end
    assert.are.equal(2000, n)
  end)

  it("without a budget drains as before", function()
    local id = assert(t.start(steps_tool(300, 0, 0)))
    engine.tick()
    assert.are.equal("completed", engine.run_status(id))
  end)

  it("gives branches the order an unbudgeted round gives them, and the run replays", function()
    local tool = steps_tool(10, 4, 60)
    local plain = assert(t.start(tool))
    t.drive(plain)
    assert.are.equal("completed", engine.run_status(plain))
    local budgeted = assert(t.start(tool))
    local ticks, cut = 0, 0
    while engine.run_status(budgeted) == "running" and ticks < 100000 do
      if engine.tick(200) == 0 then cut = cut + 1 end -- 0.2 ms: cut between branches' steps
      ticks = ticks + 1
    end
    assert.are.equal("completed", engine.run_status(budgeted))
    assert.truthy(cut > 0)
    assert.are.same(op_trace(plain), op_trace(budgeted))
    assert.are.same({ engine.run_info(plain) }, { engine.run_info(budgeted) })
  end)

  it("keeps the order of results held back for a paused thread (moor.pause)", function()
    local tool = workflow(function()
      local slices = moor.async(function()
        local n = 0
        for _ = 1, 30 do moor.pause(); n = n + 1 end
        return n
      end)
      local fs = {}
      for b = 1, 3 do
        fs[b] = moor.async(function()
          local y = 0
          for _ = 1, 20 do y = inc(y) end
          return y
        end)
      end
      local ys = moor.all(fs)
      return moor.await(slices) + ys[1] + ys[2] + ys[3]
    end)
    local plain = assert(t.start(tool))
    t.drive(plain)
    assert.are.equal("completed", engine.run_status(plain))
    local budgeted = assert(t.start(tool))
    local ticks = 0
    while engine.run_status(budgeted) == "running" and ticks < 100000 do
      engine.tick(30)
      ticks = ticks + 1
    end
    assert.are.equal("completed", engine.run_status(budgeted))
    assert.are.same({ engine.run_info(plain) }, { engine.run_info(budgeted) })
    assert.are.same(op_trace(plain), op_trace(budgeted))
  end)

  it("a run parked after budgeted ticks replays from its log to the same place", function()
    local id = assert(t.start(workflow(function()
      local fs = {}
      for b = 1, 3 do
        fs[b] = moor.async(function()
          local y = 0
          for _ = 1, 40 do y = inc(y) end
          return y
        end)
      end
      local ys = moor.all(fs)
      moor.sleep("1h")
      return ys[1] + ys[2] + ys[3]
    end)))
    local ticks = 0
    while ticks < 100000 do
      local due = engine.tick(100)
      ticks = ticks + 1
      if due ~= 0 then break end
    end
    local before = op_trace(id)
    assert.are.equal("timer.scheduled", before[#before]:match("^(%S+)"))
    t.restart(id)
    assert.are.equal("running", engine.run_status(id))
    assert.are.same(before, op_trace(id)) -- replay matched every op: nothing new, no error
  end)
end)

describe("timers of settled runs", function()
  it("leave the heap as their runs settle; live runs' timers stay and fire", function()
    local base = engine.stats()
    local sleepers, winners, short = {}, {}, {}
    for i = 1, 150 do
      sleepers[i] = assert(t.start(workflow(function() moor.sleep("1h") end)))
      -- settles at once, leaving a 1 h timer behind
      winners[i] = assert(t.start(workflow(function()
        return (moor.race { moor.async(function() return "now" end), moor.timer("1h") })
      end)))
    end
    for i = 1, 5 do
      short[i] = assert(t.start(workflow(function() moor.sleep(("%dms"):format(200 + 50 * i)); return i end)))
    end
    engine.tick()
    for i = 1, 150 do assert.are.equal("completed", engine.run_status(winners[i])) end
    local waiting = 0 -- (a short one may have fired already on a slow machine)
    for i = 1, 5 do if engine.run_status(short[i]) == "running" then waiting = waiting + 1 end end
    local st = engine.stats()
    assert.are.equal(base.timers + 150 + waiting, st.timers) -- the winners' timers are not counted ...
    assert.are.equal(st.timers, st.heap)                     -- ... nor in the heap: they left with their runs
    assert.is_true((timers.valid()))
    -- The live ones fire, in due order.
    for i = 1, 5 do assert.are.equal("completed", t.drive(short[i])) end
    local fired = {}
    for i = 1, 5 do
      for _, e in ipairs(t.events(short[i])) do
        if e.kind == "timer.fired" then fired[i] = e.time end
      end
    end
    for i = 2, 5 do assert.truthy(fired[i] >= fired[i - 1]) end
    st = engine.stats()
    assert.are.equal(base.timers + 150, st.timers)
    assert.are.equal(st.timers, st.heap)
    for i = 1, 150 do assert.are.equal("running", engine.run_status(sleepers[i])) end
    -- Cancelled, the sleepers' timers go as well (their cleanup's grace timers
    -- go when they end as cancelled).
    for i = 1, 150 do t.cancel(sleepers[i]) end
    for _ = 1, 20 do engine.tick(); core.wait(1) end
    for i = 1, 150 do assert.are.equal("cancelled", engine.run_status(sleepers[i])) end
    st = engine.stats()
    assert.are.equal(base.timers, st.timers)
    assert.are.equal(base.heap, st.heap)
    assert.is_true((timers.valid()))
  end)

  it("a cancelled timer never fires and leaves the heap at once", function()
    local fired = false
    local r = { settled = false }
    local before = engine.stats()
    local tm = timers.add(r, core.now(), function() fired = true end)
    assert.are.equal(before.timers + 1, engine.stats().timers)
    timers.cancel(tm)
    assert.are.equal(before.timers, engine.stats().timers)
    assert.are.equal(before.heap, engine.stats().heap)
    engine.tick()
    assert.is_false(fired)
  end)

  it("the heap stays ordered through many adds and removals", function()
    local rs, order = {}, {}
    for i = 1, 200 do
      rs[i] = { settled = false }
      timers.add(rs[i], core.now() + 1000000 + (i * 7919) % 1000, function() order[#order + 1] = i end)
    end
    for i = 1, 200, 3 do rs[i].settled = true; timers.drop_run(rs[i]) end
    assert.is_true((timers.valid()))
    for i = 2, 200, 3 do rs[i].settled = true; timers.drop_run(rs[i]) end
    assert.is_true((timers.valid()))
    for i = 3, 200, 3 do rs[i].settled = true; timers.drop_run(rs[i]) end
    assert.is_true((timers.valid()))
    assert.are.same({}, order)
  end)
end)
