--- The log: appending a run's events, the open transaction they belong to,
-- the group commit, and handing committed events to their listeners (the C
-- embedder's and engine.subscribe's: the HTTP event streams). Also the log's
-- vocabulary: which event kinds carry an op's result and which op each
-- belongs to. A child run's questions and progress are mirrored onto its
-- parent's log here, as they are appended.
local store = require "moor.store"
local core = require "moor.core"
local clock = require "moor.clock"
local json = require "moor.json"
local S = require "moor.engine.state"

local M = {}

local encode = json.encode
local now_ms = clock.now

-- Log kinds that carry an op's result, and the op kind each event belongs to.
M.COMPLETIONS = { ["step.result"] = true, ["step.error"] = true, ["timer.fired"] = true,
                  ["input.resolved"] = true, ["hook.created"] = true, ["hook.received"] = true,
                  ["child.started"] = true, ["child.settled"] = true, ["hook.polled"] = true }
M.OPKIND = { ["step.result"] = "step", ["step.error"] = "step", ["step.retry"] = "step",
             ["step.started"] = "step", ["hook.waiting"] = "hook.await", ["child.waiting"] = "child.await",
             ["timer.scheduled"] = "sleep", ["timer.fired"] = "sleep",
             ["input.requested"] = "ask", ["input.resolved"] = "ask",
             ["hook.created"] = "hook", ["hook.received"] = "hook.await",
             ["child.started"] = "child", ["child.settled"] = "child.await", ["hook.polled"] = "hook.poll",
             ["authorization.required"] = "step", ["authorization.callback"] = "step",
             ["authorization.completed"] = "step" }

local emitted, nemitted = {}, 0 -- events for the listeners, committed or in the open transaction

-- The open transaction (every write between two commits, host/store.c):
-- the index in `emitted` of its first event, and the runs it appended to.
-- When its COMMIT fails the store rolls it back, and the engine takes back
-- what it holds of it in memory too (discard, below).
local tx_first = nil
local tx_runs = {}
local tx_n, tx_one = 0, nil -- how many runs tx_runs holds, and the first one

--- The cause while commits fail (nil while they work): the API answers
-- writes 503 and the host retries the engine's round with a backoff.
M.store_error = nil

-- A child's questions, progress and agent.started also appear on its
-- parent's stream (a session shows its tool calls' questions and subagents): as non-op events, which replay
-- ignores, so they can be appended at any time.
local MIRROR = { ["input.requested"] = true, ["input.resolved"] = true, ["progress"] = "action.partial",
                 ["agent.started"] = true, ["authorization.required"] = true, ["authorization.completed"] = true }
local append

-- Append to the log of a run that is not in memory (evicted, or driven by
-- nobody here): its next seq is read from the store. Handed to the listeners
-- after the commit, as append's are (an evicted run's stream stays open).
local function append_stored(run_id, op, kind, name, payload)
  local seq, t = store.last_seq(run_id) + 1, now_ms()
  local ok, err = store.append(run_id, seq, op, kind, name, payload, t)
  if not ok then return nil, err end
  if not tx_first then tx_first = nemitted + 1 end
  nemitted = nemitted + 1
  emitted[nemitted] = { run_id, seq, kind, name, payload, t, op }
  return true
end

local function mirror(child, kind, payload)
  local m = MIRROR[kind]
  if not m then return end
  local p = S.runs[child.parent_id]
  local out_kind = m == true and kind or m
  local text = payload
  if m ~= true then
    text = ('{"callId":%s,"runId":%s,"output":%s}'):format(encode(child.call_id), encode(child.id), payload)
  end
  if p and not p.settled then
    append(p, nil, out_kind, child.tool_name, text)
  else
    local row = store.run(child.parent_id)
    if row and row.status == "running" then
      append_stored(child.parent_id, nil, out_kind, child.tool_name, text)
    elseif row and row.parent_id and kind == "input.resolved" then
      -- A question withdrawn after its parent ended (a subagent's session
      -- cancelled once the workflow that opened it returned): on up, so the
      -- session whose stream showed the question sees it resolved.
      mirror({ id = row.id, parent_id = row.parent_id, tool_name = row.tool, call_id = row.call_id }, kind, payload)
    end
  end
end

--- Append an event to run r's log (op: its op number, or nil for a run-level
-- event). Returns its seq and time. Raises when the store refuses it.
append = function(r, op, kind, name, payload)
  if r.parent_id then mirror(r, kind, payload) end
  local seq = r.seq + 1
  r.seq = seq
  local t = now_ms()
  local ok, err = store.append(r.id, seq, op, kind, name, payload, t)
  if not ok then error("cannot record event: " .. tostring(err), 0) end
  if not tx_first then tx_first = nemitted + 1 end
  if not tx_runs[r] then
    tx_runs[r] = true
    tx_n = tx_n + 1
    if tx_n == 1 then tx_one = r end
  end
  -- Handed to the embedder's listener and the event streams after the commit.
  nemitted = nemitted + 1
  emitted[nemitted] = { r.id, seq, kind, name, payload, t, op }
  return seq, t
end
M.append = append

--- A live-only event of run run_id (a session's message.delta): handed to
-- the listeners as a committed one is, with seq nil (the C listener gets
-- seq 0), but never written to the log, so replay and a stream read later
-- never see it. Behind the events still waiting for their commit, to keep
-- their order; at once when none waits.
function M.transient(run_id, kind, payload)
  nemitted = nemitted + 1
  emitted[nemitted] = { run_id, nil, kind, nil, payload, now_ms(), nil }
  if not tx_first then M.flush() end
end

--- Publish a live-only event on run run_id's stream (payload: JSON text or a
-- value): listeners and open event streams get it now, the log never does.
-- From anywhere: a fetch's onData too.
function M.stream(run_id, kind, payload)
  local r = S.runs[run_id]
  if not r or r.settled then return end -- (a reply still streaming for a run that ended)
  M.transient(run_id, kind, type(payload) == "string" and payload or encode(payload))
end

--- Record a named event on run run_id's log from inside a step: not an op,
-- and (named) not counted as a body's publish by replay.
function M.note(run_id, kind, name, payload)
  local r = S.runs[run_id]
  if not r or r.settled then return end
  append(r, nil, kind, name, type(payload) == "string" and payload or encode(payload))
end

--- Append to the log of a run that is not in memory (no process drives it, or
-- it has not been resumed yet); `moor resume` replays it in order.
function M.append_offline(run_id, op, kind, name, payload)
  -- (mirrored onto its parent's log as append does: an evicted child's answer)
  local row = MIRROR[kind] and store.run(run_id)
  if row and row.parent_id then
    mirror({ id = row.id, parent_id = row.parent_id, tool_name = row.tool, call_id = row.call_id }, kind, payload)
  end
  local ok, err = append_stored(run_id, op, kind, name, payload)
  if not ok then error("cannot record event: " .. tostring(err), 0) end
end

--- Subscribe to committed events: fn(run_id, seq, kind, name, payload, time, op),
-- op as the log records it (nil for run-level events). Returns an unsubscribe function.
local subscribers = {}
function M.subscribe(fn)
  subscribers[#subscribers + 1] = fn
  return function()
    for i, f in ipairs(subscribers) do
      if f == fn then table.remove(subscribers, i) return end
    end
  end
end

--- Hand the committed events to the listeners (those of an open transaction
-- wait for its commit).
function M.flush()
  local c_listener = core.has_listener()
  local upto = tx_first and tx_first - 1 or nemitted
  for i = 1, upto do
    local e = emitted[i]
    if c_listener then core.emit(e[1], e[2] or 0, e[3], e[4], e[5]) end
    for _, fn in ipairs(subscribers) do fn(e[1], e[2], e[3], e[4], e[5], e[6], e[7]) end
    emitted[i] = nil
  end
  if upto < nemitted then
    table.move(emitted, upto + 1, nemitted, 1)
    for i = nemitted - upto + 1, nemitted do emitted[i] = nil end
    tx_first = 1
  end
  nemitted = nemitted - upto
end

---------------------------------------------------------------------------
-- a failed commit (a full disk, an immutable WAL): nothing of it was recorded

-- Runs a failed commit took back, loaded again from their logs at the start
-- of the next round (not at once: the failure can surface deep inside a
-- body, a step's completion or a run's own ending).
local reload_ids, reload_set = {}, {}

-- The store rolled the transaction back; take it back in memory as well, so
-- that an answered error means nothing happened: its events are never handed
-- out, and every run it touched is dropped and loaded again from its log (a
-- restart in miniature: work that ran in it, steps included, runs again, as
-- after a kill -9 before the commit).
local function discard()
  S.discards = S.discards + 1 -- counts kept from the database (waits' queued deliveries) are stale now
  if tx_first then
    for i = tx_first, nemitted do emitted[i] = nil end
    nemitted = tx_first - 1
  end
  local touched = tx_runs
  tx_first, tx_runs, tx_n, tx_one = nil, {}, 0, nil
  local keep, n = {}, 0
  for i = 1, S.npending do
    local p = S.pending[i]
    if not touched[p[1]] then n = n + 1; keep[n] = p end
  end
  S.pending, S.npending = keep, n
  for r in pairs(touched) do
    if not reload_set[r.id] then
      reload_set[r.id] = true
      reload_ids[#reload_ids + 1] = r.id
    end
    r.settled = true
    if S.runs[r.id] == r then
      r.status = "running" -- not ended: no cleanup runs and nobody is told it settled
      S.drop(r)
    end
  end
end

--- The ids of the runs failed commits took back since the last call, sorted.
function M.take_reloads()
  if not reload_ids[1] then return nil end
  local ids = reload_ids
  reload_ids, reload_set = {}, {}
  table.sort(ids) -- a fixed order, as resume_all has
  return ids
end

--- Every commit goes through here. Returns true, or nil and the cause (the
-- transaction is gone, in the file and in memory).
function M.commit()
  local ok, err = store.commit()
  if ok then
    tx_first = nil
    -- One run touched (the usual round): cleared in place, no new table.
    if tx_n == 1 then tx_runs[tx_one] = nil elseif tx_n > 1 then tx_runs = {} end
    tx_n, tx_one = 0, nil
    if err then M.store_error = nil end -- (err: a transaction was written)
    return true
  end
  M.store_error = tostring(err)
  discard()
  return nil, M.store_error
end

return M
