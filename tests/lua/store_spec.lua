-- The store's statements (issue 13, item 4): every SQL statement the engine
-- runs more than once is prepared once per database and kept (host/store.c's
-- statement cache), so a second round of the same kinds of runs, a restart
-- of a parked run included, prepares none. The log's layout (item 5) stays
-- the WITHOUT ROWID (run_id, seq) key: see host/store.c's migration 1.
local moor = require "moor"
local core = require "moor.core"
local store = require "moor.store"
local t = moor.testing
local s = moor.schema

local inc = moor.step("inc", function(x) return x + 1 end)

local one_step = moor.defineWorkflowTool {
  description = "spec tool", inputSchema = s.object {}, execute = function() return inc(1) end,
}
local asker = moor.defineWorkflowTool {
  description = "spec tool", inputSchema = s.object {},
  execute = function(_, ctx)
    return ctx.ask { prompt = "Go?", options = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } } }
  end,
}
local hooked = moor.defineWorkflowTool {
  description = "spec tool", inputSchema = s.object { token = s.string() },
  execute = function(input) return inc(moor.createHook({ token = input.token }):await().n) end,
}

local function prepared() return core.store_stats().prepared end

-- One of each: a 1-step run, a question answered, a hook resumed after its
-- run was replayed from the log (its hook and deliveries read back).
local function round(k)
  assert.are.equal(2, (t.call(one_step)))
  local id = assert(t.start(asker))
  t.drive(id)
  assert.is_true(t.answer(t.inputs(id)[1].requestId, { optionId = "yes" }))
  assert.are.equal("completed", t.drive(id))
  local token = "store-spec-" .. k
  id = assert(t.start(hooked, { token = token }))
  t.drive(id)
  assert.is_nil((t.restart(id)))
  moor.resumeHook(token, { n = k })
  t.drive(id)
  assert.are.equal(k + 1, (t.outcome(id)))
end

describe("the store's statements", function()
  it("are prepared once per database: later rounds of the same runs prepare none", function()
    round(1) -- (the first round may prepare what nothing before it ran)
    local before = prepared()
    round(2)
    round(3)
    assert.are.equal(0, prepared() - before, "statements prepared again in rounds 2 and 3")
    local kept = core.store_stats().kept
    assert.is_true(kept > 0 and kept <= 128, "kept " .. kept)
  end)

  it("prepares SQL too long to keep for one use, and still answers it", function()
    local ids = {}
    for i = 1, 2100 do ids[i] = "run_none_" .. i end -- (over 4 KiB of SQL)
    local stats = core.store_stats()
    for _ = 1, 2 do assert.are.same({}, store.pending_inputs_of(ids)) end
    local after = core.store_stats()
    assert.are.equal(stats.prepared + 2, after.prepared)
    assert.are.equal(stats.kept, after.kept)
  end)

  it("reports a statement that does not prepare, with its SQL, and keeps nothing of it", function()
    local kept = core.store_stats().kept
    for _ = 1, 2 do
      local rows, err = core.query("SELECT nope FROM nowhere WHERE x=?", 1)
      assert.is_nil(rows)
      assert.truthy(err:find("no such table: nowhere", 1, true), err)
      assert.truthy(err:find("(in: SELECT nope FROM nowhere WHERE x=?)", 1, true), err)
    end
    assert.are.equal(kept, core.store_stats().kept)
  end)
end)

describe("the runs table's indexes", function()
  it("keep runs with no parent out of runs_parent (migration 6), and every query by parent still searches it",
    function()
    local idx = core.query("SELECT sql FROM sqlite_master WHERE type='index' AND name='runs_parent'")
    assert.truthy(idx[1].sql:find("WHERE parent_id IS NOT NULL", 1, true), idx[1].sql)
    for _, sql in ipairs {
      "SELECT id FROM runs WHERE parent_id=? AND status='running'",
      "SELECT id FROM runs WHERE parent_id=? AND parent_op=?",
      "WITH RECURSIVE tree(id) AS (SELECT ? UNION SELECT runs.id FROM runs JOIN tree "
        .. "ON runs.parent_id = tree.id) SELECT id FROM tree",
    } do
      local plan = {}
      for _, row in ipairs(assert(core.query("EXPLAIN QUERY PLAN " .. sql, "x", 1))) do plan[#plan + 1] = row.detail end
      plan = table.concat(plan, "; ")
      assert.truthy(plan:find("USING INDEX runs_parent", 1, true), sql .. ": " .. plan)
    end
  end)
end)

describe("the log", function()
  it("refuses a second event at a seq a run has taken, and reads back in seq order", function()
    local _, _, id = t.call(one_step)
    local n = store.last_seq(id)
    assert.is_true(n >= 3)
    local ok, err = core.append(id, n, nil, "progress", nil, "{}", 0)
    assert.is_nil(ok)
    assert.truthy(err:find("UNIQUE constraint failed: events.run_id, events.seq", 1, true), err)
    local rows = store.events(id)
    assert.are.equal(n, #rows)
    for i, e in ipairs(rows) do assert.are.equal(i, e.seq) end
  end)
end)
