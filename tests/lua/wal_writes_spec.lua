-- The store's VFS (host/store_vfs.c): a transaction's WAL frames reach the
-- file in one write at its commit (SQLite writes each frame as two: its
-- header, then its page), and what a commit wrote is in the file when the
-- commit returns: another process reads it at once, and nothing is held back.
local moor = require "moor"
local core = require "moor.core"
local t = moor.testing
local s = moor.schema

local big = moor.step("big", function(n) return ("x"):rep(n) end)
local tool = moor.defineWorkflowTool {
  description = "spec tool", inputSchema = s.object { n = s.integer() },
  execute = function(input) return #big(input.n) end,
}

local function stats()
  local st = core.store_stats()
  return st.wal_appends, st.wal_writes
end

local function db_file()
  for _, row in ipairs(core.query("PRAGMA database_list")) do
    if row.name == "main" then return row.file end
  end
end

describe("the store's WAL writes", function()
  it("are one write a commit, however many frames it has", function()
    local a0, w0 = stats()
    assert.is_number(a0, "core.store_stats() has no wal_appends")
    assert.are.equal(40000, (t.call(tool, { n = 40000 }))) -- (a result over ten pages)
    local a1, w1 = stats()
    local appends, writes = a1 - a0, w1 - w0
    assert.is_true(appends >= 24, "appends: " .. appends)
    assert.is_true(writes * 4 <= appends, ("%d writes for %d appends"):format(writes, appends))
  end)

  it("leave a commit in the file when it returns: another process reads it", function()
    local path = db_file()
    assert.is_string(path)
    local id = assert(t.start(tool, { n = 10 }))
    assert.are.equal("completed", t.drive(id))
    local p = assert(io.popen(("sqlite3 -readonly '%s' \"SELECT count(*) FROM events WHERE run_id='%s' AND "
      .. "kind='run.completed'\" 2>&1"):format(path, id)))
    local out = p:read("a")
    p:close()
    assert.are.equal("1", out:match("^%s*(.-)%s*$"))
  end)
end)
