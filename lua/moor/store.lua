--- The store: every SQL statement moor's Lua side runs, as named functions
-- over moor.core (host/store.c: SQLite, its schema and migrations). Nothing
-- else under lua/ writes SQL, so a second backend (PostgreSQL, for several
-- hosts on one database) implements this module's functions and nothing more.
--
-- What a backend must guarantee:
-- * The log is append-only per run: append(run, seq, ...) adds an event and
--   nothing ever updates or deletes one; read_log/events give a run's events
--   in seq order. seq is dense and ordered per run (1, 2, 3, ...), and an
--   append whose seq is already taken fails (two writers never interleave).
-- * Every write between two commit() calls is one transaction (the engine's
--   group commit): commit() makes all of it durable, or none of it (a failed
--   commit rolls it back; the engine takes back what it holds in memory too).
--   Reads see the open transaction's own writes.
-- * One host drives a database at a time: today a file lock held by the host
--   (host/store.c, the lock file beside the database); a shared backend needs
--   a lease (a row with an owner and an expiry, renewed while the host lives)
--   so that a second host waits or refuses instead of replaying the same runs.
-- * Rows of runs, inputs, hooks and deliveries change only inside those
--   transactions, with the same results as the statements below.
local core = require "moor.core"

local M = {}

local query, exec = core.query, core.exec

local function first(rows) return rows and rows[1] end

-- Runs this process wrote a question, a hook or a child run for since the
-- engine last forgot them (engine/state.lua's S.drop): a run started here
-- and not in this set holds none of them, so it ends without a query for
-- them (three a run: withdraw_run_inputs, close_hooks, running_children).
local holding = {}

--- Whether this process wrote a question, hook or child for run_id since forget(run_id).
function M.holds(run_id) return holding[run_id] ~= nil end

--- The engine holds run_id no more (it ended, or left memory).
function M.forget(run_id) holding[run_id] = nil end

-- A run and every run under it (children, their children, ...), as tree(id).
local TREE = "WITH RECURSIVE tree(id) AS (SELECT ? UNION SELECT runs.id FROM runs JOIN tree "
  .. "ON runs.parent_id = tree.id) "

---------------------------------------------------------------------------
-- the log (host/store.c binds these directly)

M.append = core.append     -- (run, seq, op, kind, name, payload, time) -> true | nil, err
M.read_log = core.events   -- (run) -> n, last_seq, ops, kinds, names, payloads, times (columns) | nil, err
M.commit = core.commit     -- () -> true, wrote? | nil, err

--- A run's events as rows { seq, op, kind, name, payload, time }, in seq order.
function M.events(run_id)
  return query("SELECT seq, op, kind, name, payload, time FROM event_log WHERE run_id=? ORDER BY seq", run_id)
end

--- The last seq of a run's log (0 for none): for appends to a run no process holds.
function M.last_seq(run_id)
  return query("SELECT coalesce(max(seq), 0) AS seq FROM events WHERE run_id=?", run_id)[1].seq
end

---------------------------------------------------------------------------
-- runs

--- A run's row (every column), or nil.
function M.run(id)
  return first(query("SELECT * FROM runs WHERE id=?", id))
end

--- Every running run, oldest first.
function M.running_runs()
  return query("SELECT * FROM runs WHERE status='running' ORDER BY started, id")
end

--- Every run as { id, tool, status, started, updated }, oldest first.
function M.list_runs()
  return query("SELECT id, tool, status, started, updated FROM runs ORDER BY started, id")
end

-- What makes a running run wait (moor runs --status waiting): a pending
-- question, an open hook or webhook, a sleep not yet fired, a running child.
local WAITING = "status='running' AND (EXISTS (SELECT 1 FROM inputs i WHERE i.run_id=runs.id AND "
  .. "i.status='pending') OR EXISTS (SELECT 1 FROM hooks h WHERE h.run_id=runs.id AND h.closed=0) OR "
  .. "EXISTS (SELECT 1 FROM runs c WHERE c.parent_id=runs.id AND c.status='running') OR EXISTS (SELECT 1 "
  .. "FROM events e WHERE e.run_id=runs.id AND e.kind='timer.scheduled' AND NOT EXISTS (SELECT 1 FROM "
  .. "events f WHERE f.run_id=e.run_id AND f.op=e.op AND f.kind='timer.fired')))"

--- Runs as list_runs gives them, filtered (moor runs --status/--tool/--limit):
-- status ("waiting": running and parked on something), tool, and the newest
-- limit of them (still oldest first); each may be nil.
function M.list_runs_where(status, tool, limit)
  local where, args = {}, {}
  if status == "waiting" then where[#where + 1] = WAITING
  elseif status then where[#where + 1] = "status=?"; args[#args + 1] = status end
  if tool then where[#where + 1] = "tool=?"; args[#args + 1] = tool end
  local sql = "SELECT id, tool, status, started, updated FROM runs"
    .. (#where > 0 and (" WHERE " .. table.concat(where, " AND ")) or "") .. " ORDER BY started DESC, id DESC"
  if limit then sql = sql .. " LIMIT " .. math.tointeger(limit) end
  local rows = query(sql, table.unpack(args))
  local out = {}
  for i = #rows, 1, -1 do out[#out + 1] = rows[i] end
  return out
end

--- A run's sleeps not yet fired, as rows { name, payload } ({"due":ms}), oldest first.
function M.pending_timers(run_id)
  return query("SELECT e.name, e.payload FROM event_log e WHERE e.run_id=? AND e.kind='timer.scheduled' AND "
    .. "NOT EXISTS (SELECT 1 FROM events f WHERE f.run_id=e.run_id AND f.op=e.op AND f.kind='timer.fired') "
    .. "ORDER BY e.seq", run_id)
end

--- A run's open hooks and webhooks, as rows { token, kind }.
function M.open_hooks(run_id)
  return query("SELECT token, kind FROM hooks WHERE run_id=? AND closed=0 ORDER BY created, token", run_id)
end

--- Record a new run (status running). Returns true, or nil and the cause.
function M.insert_run(r)
  if r.parent_id then holding[r.parent_id] = true end
  return exec("INSERT INTO runs(id,tool,entry,status,input,call_id,source_hash,seed,started,"
    .. "updated,channel,parent_id,parent_op) VALUES(?,?,?,'running',?,?,?,?,?,?,?,?,?)", r.id, r.tool, r.entry,
    r.input, r.call_id, r.source_hash, r.seed, r.started, r.started, r.channel, r.parent_id, r.parent_op)
end

--- A run ended: completed with its result (JSON).
function M.complete_run(id, result, t)
  return exec("UPDATE runs SET status='completed', result=?, updated=? WHERE id=?", result, t, id)
end

--- A run ended: status 'failed' or 'cancelled', with its error (JSON).
function M.fail_run(id, status, err, t)
  return exec("UPDATE runs SET status=?, error=?, updated=? WHERE id=?", status, err, t, id)
end

--- Mark a cancel as requested (logged once).
function M.request_cancel(id, t)
  return exec("UPDATE runs SET cancel_requested=1, updated=? WHERE id=?", t, id)
end

--- Running runs a run started.
function M.running_children(id)
  return query("SELECT id FROM runs WHERE parent_id=? AND status='running'", id)
end

--- The id of the run a parent's op n started, or nil.
function M.child_of(parent_id, op)
  local row = first(query("SELECT id FROM runs WHERE parent_id=? AND parent_op=?", parent_id, op))
  return row and row.id
end

--- A run and every run under it (children, their children, ...), as ids.
function M.run_tree(id)
  return query(TREE .. "SELECT id FROM tree", id)
end

---------------------------------------------------------------------------
-- questions (inputs)

--- A question's row (every column), or nil.
function M.input(request_id)
  return first(query("SELECT * FROM inputs WHERE request_id=?", request_id))
end

--- Record a pending question.
function M.insert_input(request_id, run_id, op, request, t)
  holding[run_id] = true
  return exec("INSERT INTO inputs(request_id, run_id, op, request, status, created) VALUES(?,?,?,?,'pending',?)",
    request_id, run_id, op, request, t)
end

--- Withdraw a pending question. Returns true when it was pending (and is now cancelled).
function M.withdraw_input(request_id, t)
  local _, changed = exec("UPDATE inputs SET status='cancelled', resolved=? WHERE request_id=? AND status='pending'",
    t, request_id)
  return changed == 1
end

--- Withdraw every pending question of a run; returns the rows { request_id } withdrawn.
-- (Most runs end with none: a read first spares the UPDATE ... RETURNING its
-- temporary table.)
function M.withdraw_run_inputs(run_id, t)
  local rows, err = query("SELECT 1 FROM inputs WHERE status='pending' AND run_id=? LIMIT 1", run_id)
  if not rows or #rows == 0 then return rows, err end
  return exec("UPDATE inputs SET status='cancelled', resolved=? WHERE run_id=? AND status='pending' "
    .. "RETURNING request_id", t, run_id)
end

--- Record a question's answer (payload: the input.resolved event's JSON).
function M.answer_input(request_id, payload, t)
  return exec("UPDATE inputs SET status='answered', answer=?, resolved=? WHERE request_id=?", payload, t,
    request_id)
end

--- Pending questions as rows { request_id, run_id, request, created }, oldest first.
function M.pending_inputs()
  return query("SELECT request_id, run_id, request, created FROM inputs WHERE status='pending' "
    .. "ORDER BY created, request_id")
end

--- The runs with a pending question that are sessions or have a parent, as
-- rows { id, tool, parent_id } (the others belong to no session).
function M.linked_askers()
  return query("SELECT id, tool, parent_id FROM runs WHERE id IN (SELECT run_id FROM inputs "
    .. "WHERE status='pending') AND (tool='moor__session' OR parent_id IS NOT NULL)")
end

--- Pending questions of the given runs, as rows { request_id, request }.
function M.pending_inputs_of(run_ids)
  local marks = {}
  for i = 1, #run_ids do marks[i] = "?" end
  return query(("SELECT request_id, request FROM inputs WHERE status='pending' AND run_id IN (%s)")
    :format(table.concat(marks, ",")), table.unpack(run_ids))
end

--- Pending questions of a run and the runs under it, as rows { request_id }, oldest first.
function M.pending_inputs_under(id)
  return query(TREE .. "SELECT request_id FROM inputs WHERE status='pending' AND run_id IN "
    .. "(SELECT id FROM tree) ORDER BY created, request_id", id)
end

---------------------------------------------------------------------------
-- hooks, webhooks and their deliveries

--- A hook's row { token, run_id, kind, respond, created, closed }, or nil.
function M.hook(token)
  return first(query("SELECT * FROM hooks WHERE token=?", token))
end

--- Record a hook or webhook (respond: its respondWith as JSON, or nil).
function M.insert_hook(token, run_id, kind, respond, t)
  holding[run_id] = true
  return exec("INSERT INTO hooks(token, run_id, kind, respond, created) VALUES(?,?,?,?,?)", token, run_id, kind,
    respond, t)
end

--- Record a hook unless its token exists (a session's inbox).
function M.ensure_hook(token, run_id, t)
  holding[run_id] = true
  return exec("INSERT OR IGNORE INTO hooks(token, run_id, kind, created) VALUES(?,?,'hook',?)", token, run_id, t)
end

--- Close one hook (a sign-in's callback, used once).
function M.close_hook(token)
  return exec("UPDATE hooks SET closed=1 WHERE token=?", token)
end

--- Close a run's hooks; returns the rows { token } closed (read first, as
-- withdraw_run_inputs).
function M.close_hooks(run_id)
  local rows, err = query("SELECT 1 FROM hooks WHERE run_id=? LIMIT 1", run_id)
  if not rows or #rows == 0 then return rows, err end
  return exec("UPDATE hooks SET closed=1 WHERE run_id=? RETURNING token", run_id)
end

--- Deliveries recorded for a token and not yet taken: count, bytes.
function M.queued(token)
  local row = first(query("SELECT count(*) AS n, coalesce(sum(length(CAST(payload AS BLOB))), 0) AS bytes, "
    .. "(SELECT coalesce(max(n), 0) FROM deliveries WHERE token=?1) AS last "
    .. "FROM deliveries WHERE token=?1 AND consumed=0", token))
  return row and row.n or 0, row and row.bytes or 0, row and row.last or 0
end

--- The oldest delivery not yet taken, as { n, payload }, or nil.
function M.next_delivery(token)
  return first(query("SELECT n, payload FROM deliveries WHERE token=? AND consumed=0 ORDER BY n LIMIT 1", token))
end

--- Mark delivery n of a token as taken.
function M.consume_delivery(token, n)
  return exec("UPDATE deliveries SET consumed=1 WHERE token=? AND n=?", token, n)
end

--- Record the next delivery for a token (after `last`, when the caller has
-- just read it: one query less); returns its number.
function M.insert_delivery(token, run_id, payload, t, last)
  local n = (last or query("SELECT coalesce(max(n), 0) AS n FROM deliveries WHERE token=?", token)[1].n) + 1
  exec("INSERT INTO deliveries(token, n, run_id, payload, time) VALUES(?,?,?,?,?)", token, n, run_id, payload, t)
  return n
end

---------------------------------------------------------------------------
-- harness agents' turns with a live process (lua/moor/harness/host.lua)

--- Record that turn n of a harness agent's hook token runs process pid
-- (the table: host/store.c's migration 5).
function M.insert_harness_turn(token, n, pid, pstart, dir, t)
  return exec("INSERT OR REPLACE INTO harness_turns(token, turn, pid, pstart, dir, created) VALUES(?,?,?,?,?,?)",
    token, n, pid, pstart, dir, t)
end

--- The turn's process is gone.
function M.delete_harness_turn(token, n)
  return exec("DELETE FROM harness_turns WHERE token=? AND turn=?", token, n)
end

--- Every recorded turn, as rows { token, turn, pid, pstart, dir }.
function M.harness_turns()
  return query("SELECT token, turn, pid, pstart, dir FROM harness_turns ORDER BY created, token, turn")
end

return M
