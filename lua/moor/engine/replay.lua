--- Replay: loading a run from its log after a restart, handing its recorded
-- results to the body in log order (and switching to live at the first op
-- with no record), and delivering a result to the thread waiting on its op,
-- recorded now or replayed. An op whose kind or name differs from the log
-- fails the run with a non-determinism error.
local store = require "moor.store"
local json = require "moor.json"
local errors = require "moor.errors"
local log = require "moor.engine.log"
local sched = require "moor.engine.sched"
local runs = require "moor.engine.runs"
local waits = require "moor.engine.waits"
local auth = require "moor.engine.auth"
local S = require "moor.engine.state"

local M = {}

local encode, decode, null = json.encode, json.decode, json.null
local finish_run = runs.finish_run

--- Fail run r: op n asks for (kind, name) where the log has rec (or no op).
function M.nondeterminism(r, n, rec, kind, name)
  local what
  if rec then
    what = ("the log recorded %s '%s' but the body now asks for %s '%s'"):format(
      rec.kind, rec.name, kind, name)
  else
    what = ("the body asks for %s '%s' where the log has no op, but later ops are recorded"):format(
      kind, name)
  end
  finish_run(r, false, errors.new("NonDeterminism",
    ("non-determinism at seq %d: %s. The tool's code changed under a running run: "
      .. "change live workflows with moor.version, or let old runs finish on the old code"):format(n, what),
    { seq = n }))
end

--- A step.result's payload as the body gets it (a step that returns nothing
-- gives nil), or nil and the decoding error.
function M.step_value(payload)
  local v, err = decode(payload)
  if err then return nil, err end
  if v == null then return nil end
  return v
end
local step_value = M.step_value

--- A completion was recorded (or replayed): take the thread waiting on op n
-- and the values its op returns. Returns nil when the run failed instead.
function M.take(r, n, kind, payload, time)
  if r.settled then return nil end
  local th = r.waiters[n]
  if not th then
    -- After a cancel the op's waiter got Cancelled instead; a result that
    -- arrived in the same round is moot (and replays the same way).
    if r.cancelling then return nil end
    local rec = r.recorded[n]
    return finish_run(r, false, errors.new("NonDeterminism",
      ("non-determinism at seq %d: the log recorded a result for %s '%s' but the body never waited on it"):format(
        n, rec and rec.kind or kind, rec and rec.name or "?"), { seq = n }))
  end
  r.waiters[n] = nil
  if time > r.now then r.now = time end
  if kind == "step.result" then
    local v, err = step_value(payload)
    if err then return finish_run(r, false, errors.new("CorruptLog", "seq " .. n .. ": " .. err)) end
    return th, true, v
  elseif kind == "step.error" then
    local e = decode(payload)
    local err = e and e.error or {}
    return th, false, errors.new(err.code or "Error", err.message or "step failed",
      { seq = n, attempts = e and e.attempt })
  elseif kind == "timer.fired" then
    return th, true, nil
  elseif kind == "input.resolved" then
    r.asks[n] = nil
    local p = decode(payload)
    return th, true, { status = p.outcome, optionId = p.optionId, text = p.text }
  end
  return th, true, decode(payload) -- hook.created, hook.received
end

--- Hand a recorded (or replayed) event to run r: op n's result, or a
-- run-level run.cancel / run.abort.
function M.deliver(r, n, kind, payload, time)
  if r.paused and r.paused > 0 and kind ~= "run.cancel" then
    -- A thread of r is paused (moor.pause): the result waits for it (not a
    -- cancel: a body that computes in slices would never see it).
    local h = r.held
    if not h then
      h = {}
      r.held = h
      S.holding[#S.holding + 1] = r
    end
    h[#h + 1] = { n, kind, payload, time }
    return
  end
  if kind == "run.cancel" then return runs.apply_cancel(r, time) end
  if kind == "run.abort" then
    -- Steering: the call's abort signal aborts (its questions are withdrawn);
    -- nothing is cancelled, the body decides what to return.
    if not r.settled then waits.abort(r.signal, "steered") end
    return
  end
  local th, ok, v = M.take(r, n, kind, payload, time)
  if th then sched.ready(th, ok, v) end
end

--- Load a running run from its row and log and start its body, which
-- replays. Returns the run, or nil and the cause.
function M.load_run(row)
  local tool = S.tools[row.tool]
  local r = runs.new_run(row, tool)
  local n, last_seq, ops, kinds, names, payloads, times = store.read_log(row.id)
  if not n then return nil, last_seq end
  S.unevict(row.id) -- (an evicted run reached, or loaded by resume_all or t.restart)
  -- (before a missing tool fails the run: a task's end still reaches its session)
  if kinds[1] == "run.started" and payloads[1]:find('"session":', 1, true) then
    local p = decode(payloads[1])
    r.session = type(p) == "table" and type(p.session) == "table" and p.session or nil
  end
  if not tool then
    r.seq = last_seq
    r.tool = { name = row.tool }
    finish_run(r, false, errors.new("MissingTool",
      ("tool '%s' is not in this build (no %s.lua under the agent's tools/), so run %s cannot resume"):format(
        row.tool, row.tool, row.id)))
    return r
  end
  local recorded, replay, nreplay, max_op, npub = r.recorded, r.replay, 0, 0, 0
  local OPKIND, COMPLETIONS = log.OPKIND, log.COMPLETIONS
  for i = 1, n do
    local op, kind = ops[i], kinds[i]
    if op then
      local rec = recorded[op]
      if not rec then
        -- (done is in the constructor, nil or not, so the table is made at
        -- its size: set later, it made every replayed op's table grow)
        rec = { kind = OPKIND[kind] or kind, name = names[i] or nil, done = nil }
        recorded[op] = rec
        if op > max_op then max_op = op end
      end
      if COMPLETIONS[kind] then
        rec.done = true
        nreplay = nreplay + 1
        replay[nreplay] = i
      elseif kind == "step.retry" then
        local p = decode(payloads[i])
        rec.attempts, rec.retry_due = p.attempt, p.retryAt
      elseif kind == "timer.scheduled" then
        rec.due = decode(payloads[i]).due
      elseif kind:sub(1, 14) == "authorization." then
        auth.read_event(rec, kind, payloads[i])
      end
    elseif kind == "version" then
      r.versions[names[i]] = decode(payloads[i])
    elseif kind == "progress" then
      r.last_progress_text = payloads[i]
    elseif kind == "run.cancel" or kind == "run.abort" then
      nreplay = nreplay + 1
      replay[nreplay] = i
    elseif not names[i] and kind ~= "run.note" then
      npub = npub + 1 -- what the body published (engine.publish)
    end
  end
  if npub > 0 then r.logged_pubs = npub end
  r.seq = last_seq
  r.max_op, r.nreplay = max_op, nreplay
  -- Replay reads the columns directly: replay[k] is an index into them.
  r.log_ops, r.log_kinds, r.log_payloads, r.log_times = ops, kinds, payloads, times
  if row.source_hash and tool.source_hash and row.source_hash ~= tool.source_hash then
    log.append(r, nil, "run.note", nil, encode({
      message = ("the source of tool '%s' changed since this run started (%s -> %s); replay continues "
        .. "while its ops match the log"):format(row.tool, row.source_hash, tool.source_hash) }))
  end
  if r.nreplay > 0 then S.replaying[#S.replaying + 1] = r end
  runs.start_main(r, decode(row.input))
  return r
end

-- After the last replayed result: drop the log columns and start the live
-- work that waited for the replay.
local function replay_done(r)
  r.log_ops, r.log_kinds, r.log_payloads, r.log_times, r.replay = nil, nil, nil, nil, {}
  local d = r.deferred
  r.deferred = {}
  for j = 1, #d do d[j]() end
end

local function replay_next(r)
  local i = r.replay[r.rpos]
  r.rpos = r.rpos + 1
  M.deliver(r, r.log_ops[i], r.log_kinds[i], r.log_payloads[i], r.log_times[i])
end

--- Hand the next logged result to every replaying run that has nothing
-- ready; end the replay of those with none left. Returns whether any got one.
function M.round()
  local replaying = S.replaying
  local progressed = false
  local i = 1
  while i <= #replaying do
    local r = replaying[i]
    if r.settled then
      table.remove(replaying, i)
    elseif r.rpos > r.nreplay then
      table.remove(replaying, i)
      replay_done(r)
    elseif r.nready == 0 then
      replay_next(r)
      progressed = true
      i = i + 1
    else
      i = i + 1
    end
  end
  return progressed
end

--- Load every running run that is not in memory. Returns how many, or nil and the cause.
function M.resume_all()
  local rows, err = store.running_runs()
  if not rows then return nil, err end
  local n = 0
  for _, row in ipairs(rows) do
    if not S.runs[row.id] then
      local _, lerr = M.load_run(row)
      if lerr then return nil, lerr end
      n = n + 1
    end
  end
  return n
end

--- Load again the runs a failed commit took back (log.take_reloads).
function M.reload_discarded(ids)
  for _, id in ipairs(ids) do
    if not S.runs[id] then
      local row = store.run(id)
      if row and row.status == "running" then M.load_run(row) end
    end
  end
end

--- Drop a run from memory and load it again from its log (a restart in
-- miniature; moor.testing uses it to prove replay).
function M.reload(id)
  local r = S.runs[id]
  if r then runs.end_run(r, r.status) end
  local row = store.run(id)
  if not row then return nil, "unknown run " .. id end
  if row.status ~= "running" then return nil, "run " .. id .. " is " .. row.status end
  return M.load_run(row)
end

return M
