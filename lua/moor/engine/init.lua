--- The durable engine, as the rest of moor sees it (`require "moor.engine"`):
-- it runs tool bodies as coroutines, answers their ops, records every result
-- in the run's event log before the body sees it, and replays a run from its
-- log after a restart. This file only gathers the parts' public functions:
--
--   state.lua    shared state: runs in memory, the ready queue, what executes now
--   timers.lua   the timer heap (sleeps, step retries, cancel grace periods)
--   log.lua      appending events, the group commit, listeners, a failed commit taken back
--   sched.lua    the ready queue, threads, replay position, recording a result
--   waits.lua    questions, hooks and webhooks, deliveries, abort signals
--   runs.lua     a run's lifecycle: call, start, finish, cancel, steer, child runs
--   steps.lua    steps (retries, I/O inside a step) and progress snapshots
--   replay.lua   loading a run from its log and handing results over in log order
--   ops.lua      where an op is answered; futures; resuming a body's thread
--   loop.lua     the scheduler round (tick)
--   evict.lua    parked runs leave memory, and are replayed when reached
--   inspect.lua  read-only views of runs for the API and the CLI
--
-- The op protocol (DESIGN.md): a body yields (OP, kind, name, spec) to ask
-- the engine for something durable; any other yield is a progress snapshot.
-- Each durable op gets the next op number ("seq") of its run. Replay answers
-- ops from the log in the order their results were recorded, and switches to
-- live at the first op with no record. An op whose kind or name differs from
-- the log fails the run with a non-determinism error.
--
-- The world's entry points (answer, cancel, steer, deliver) return true (or
-- a value), or nil and err = { code, message }; lua/moor/http.lua maps the
-- codes to HTTP statuses, lua/moor/host.lua to what host/moor.c reads.
-- moor.core first: in module mode (a stock Lua, the rockspec) opening it
-- registers moor.json.core and moor.fetch.core.
require "moor.core"
local conf = require "moor.conf"
local json = require "moor.json"
local fence = require "moor.fence"
local signals = require "moor.signal"
local S = require "moor.engine.state"
local timers = require "moor.engine.timers"
local log = require "moor.engine.log"
local waits = require "moor.engine.waits"
local runs = require "moor.engine.runs"
local steps = require "moor.engine.steps"
local replay = require "moor.engine.replay"
local ops = require "moor.engine.ops"
local loop = require "moor.engine.loop"
local evict = require "moor.engine.evict"
local inspect = require "moor.engine.inspect"
local auth = require "moor.engine.auth"

local M = {}

M.OP, M.IO, M.TASK_MESSAGE = S.OP, S.IO, S.TASK_MESSAGE
M.tools = S.tools       -- name -> loaded tool definition
M.agent = nil           -- the agent definition from agent/agent.lua, when present (the loader sets it)
M.agents = nil          -- its subagents by name

function M.register(name, tool) S.tools[name] = tool end

-- the body's view: ops, steps, branches, I/O, signals, clock
M.op, M.async = ops.op, ops.async
M.step, M.io, M.step_recorded = steps.step, steps.io, steps.recorded
M.abort = waits.abort
M.random = runs.random
function M.in_body() return S.in_body end
function M.current() return S.in_body and S.current_run or nil end
function M.step_info() return S.step_info or nil end
M.refuse_waits, M.waits_refused = ops.refuse_waits, ops.waits_refused -- (a harness tool's handler)

--- From a body: publish an event on the run's stream (a session's
-- message.*, turn.*, action.result). Not an op: a replayed body publishes
-- again, in the same order, what its log already holds, so the first
-- r.logged_pubs (counted by replay's load_run: the log's events with no op
-- and no name, but run.note, progress, run.cancel, run.abort) are skipped.
-- Counted rather than judged by position: what a body published after its
-- last op (a turn's answer, before the session waits again) is behind no op.
function M.publish(kind, payload)
  local r = S.current_run
  if not r then return end
  local n = (r.npub or 0) + 1
  r.npub = n
  if n <= (r.logged_pubs or 0) then return end
  log.append(r, nil, kind, nil, type(payload) == "string" and payload or json.encode(payload))
end

-- a session's message.delta (live only, never logged) and message.restarted (a named note from a step)
M.stream, M.note_step = log.stream, log.note

-- runs
M.call, M.cancel, M.steer, M.task_id, M.TASK_ALPHABET = runs.call, runs.cancel, runs.steer, runs.task_id,
  runs.TASK_ALPHABET
M.resume_all, M.reload = replay.resume_all, replay.reload
M.tick = loop.tick
M.subscribe = log.subscribe
--- fn(runId) is called when a run ends (completed, failed or cancelled; not
-- when it is only dropped from memory to be replayed).
function M.on_run_end(fn) S.on_end[#S.on_end + 1] = fn end
--- Work outside the engine that will report back into a run (a harness
-- agent's turn) starts (+1) or ends (-1): while any is under way, tick's due
-- stays within a second, so moor_run and moor call keep the loop turning.
-- run_id: the run it reports into, which is never evicted meanwhile.
M.outside = evict.outside
--- Whether run id is evicted now (engine/evict.lua).
M.evicted = evict.is_evicted

-- the world's side: questions and deliveries
M.answer, M.answer_line, M.format_input, M.inputs = waits.answer, waits.answer_line, waits.format_input, waits.inputs
M.deliver, M.post, M.withdraw_input = waits.deliver, waits.post, waits.withdraw_input

-- sign-in inside a step (engine/auth.lua; moor.auth registers how URLs are made)
M.auth_on_begin, M.auth_complete, M.auth_callback, M.auth_state = auth.on_begin, auth.complete, auth.callback,
  auth.state_of
M.auth_on_forget, M.auth_withdraw = auth.on_forget, auth.withdraw

-- reading runs
M.events, M.run_info, M.run_status = inspect.events, inspect.run_info, inspect.run_status
M.run_details, M.list_runs, M.list_events = inspect.run_details, inspect.list_runs, inspect.list_events

M.commit = log.commit -- true, or nil and the cause

--- Commit what is still open (before the host exits); raises when it cannot.
function M.shutdown()
  local ok, err = log.commit()
  if not ok then error("cannot commit the last writes: " .. tostring(err), 0) end
end

--- Runs in memory and timers pending (an exact count: settled runs' timers
-- are not counted), the timer heap's entries (settled runs' included, when
-- any has not left it yet), runs evicted now, and evictions and wakes since
-- the start.
function M.stats()
  return evict.stats { runs = S.nruns, timers = timers.count(), heap = timers.size() }
end

-- Tunables live in moor.conf (engine.MAX_RESULT = ... in a spec writes
-- there); the store's state in the log.
local CONF = { MAX_RESULT = true, CANCEL_GRACE = true, public_url = true, HARNESS_TOOL_MAX_RESULT = true,
  EVICT_IDLE_MS = true, MAX_PARKED_LIVE = true }
setmetatable(M, {
  __index = function(_, k)
    if CONF[k] then return conf[k] end
    if k == "store_error" then return log.store_error end
  end,
  __newindex = function(t, k, v)
    if CONF[k] then conf[k] = v else rawset(t, k, v) end
  end,
})

fence.install(M)
signals.install(M)

return M
