--- Where an op is answered: a body's thread yields (OP, kind, name, spec)
-- and handle_op numbers it, checks it against the log, and either answers
-- at once (a replayed result next in line, a settled future, a version
-- marker) or parks the thread and starts the live work: a step, a sleep, a
-- question, a hook, a child run. Also futures (moor.async, race, all) and
-- resuming a body's thread until it parks.
local clock = require "moor.clock"
local json = require "moor.json"
local errors = require "moor.errors"
local log = require "moor.engine.log"
local sched = require "moor.engine.sched"
local timers = require "moor.engine.timers"
local waits = require "moor.engine.waits"
local runs = require "moor.engine.runs"
local steps = require "moor.engine.steps"
local replay = require "moor.engine.replay"
local evict = require "moor.engine.evict"
local auth = require "moor.engine.auth"
local S = require "moor.engine.state"

local M = {}

local co_resume, co_status, co_yield, co_close = coroutine.resume, coroutine.status, coroutine.yield, coroutine.close
local pack, unpack = table.pack, table.unpack
local encode = json.encode
local now_ms = clock.now
local OP, TASK_MESSAGE = S.OP, S.TASK_MESSAGE
local POST_POLICY = { retries = 0, backoff = 0, factor = 1, maxBackoff = 0 }

-- The step that posts a body's task message; its delivery id is the op.
local function post_message(r, msg)
  return waits.post_task_message(r, msg, r.id .. ":" .. S.step_info.seq)
end
local ready, live, finish_run = sched.ready, sched.live, runs.finish_run
local touch = evict.touch

---------------------------------------------------------------------------
-- futures: branches started with moor.async

local wait_result, settle_future = sched.wait_result, sched.settle_future

---------------------------------------------------------------------------
-- ops

local function fire_sleep(r, n)
  return function()
    if not r.settled and r.waiters[n] then sched.complete(r, n, "timer.fired", "sleep", "{}") end
  end
end

-- Start op n's live work (once the run's replay is over).
local function start_live(r, n, kind, name, spec, rec)
  if kind == "step" then
    local attempt = (rec and rec.attempts or 0) + 1
    local due = rec and rec.retry_due
    if rec and rec.auth and not rec.auth_cb then
      -- parked on a sign-in when the host stopped: wait on its callback again
      return live(r, function()
        auth.rewait(r, n, name, spec, rec, function(e) steps.fail(r, n, name, spec, rec.auth.attempt, e) end)
      end)
    end
    live(r, function()
      if due and due > now_ms() then
        timers.add(r, due, function() steps.exec(r, n, name, spec, attempt) end)
      else
        steps.exec(r, n, name, spec, attempt)
      end
    end)
  elseif kind == "sleep" then
    live(r, function()
      local due = rec and rec.due
      if not due then
        due = now_ms() + spec.ms
        log.append(r, n, "timer.scheduled", name, encode({ due = due }))
        r.recorded[n] = { kind = kind, name = name, due = due }
      end
      timers.add(r, due, fire_sleep(r, n))
    end)
  elseif kind == "ask" then
    -- A question the log holds is only registered (r.asks, its signals): at
    -- once, so a cancel or steer replayed before the replay ends withdraws
    -- it as it did live.
    if rec then return waits.start_ask(r, n, spec, rec) end
    live(r, function() if r.waiters[n] then waits.start_ask(r, n, spec, rec) end end)
  elseif kind == "hook" then
    live(r, function() if r.waiters[n] then waits.create_hook(r, n, spec) end end)
  elseif kind == "hook.poll" then
    live(r, function() if r.waiters[n] then waits.poll_hook(r, n, spec.token) end end)
  elseif kind == "hook.await" then
    r.hook_ops[n] = spec.token
    live(r, function() if r.waiters[n] then waits.await_hook(r, n, spec.token) end end)
  elseif kind == "child" then
    live(r, function() if r.waiters[n] then runs.start_child(r, n, spec) end end)
  elseif kind == "child.await" then
    -- A wait the log holds is registered at once, so a cancel replayed before
    -- the replay ends cancels the child as it did live.
    if rec then r.child_waiting[spec.runId] = n end
    live(r, function()
      if r.waiters[n] and (not rec or r.child_waiting[spec.runId] == n) then runs.await_child(r, n, spec.runId) end
    end)
  else
    finish_run(r, false, errors.new("UnknownOp", "unknown op kind '" .. tostring(kind) .. "'"))
  end
end

-- Handle one op from thread th. Returns true, ok, v1, v2 when the thread
-- continues at once; false when it parks.
local function handle_op(r, th, kind, name, spec)
  if kind == "wait" then
    local done, ok, v, idx = wait_result(spec)
    if done then return true, ok, v, idx end
    th.wait = spec
    for _, f in ipairs(spec.futures) do
      f.waiters = f.waiters or {}
      f.waiters[#f.waiters + 1] = { th, spec }
    end
    return false
  elseif kind == "pause" then
    -- moor.pause(): not an op of the log (no number, no record); the thread
    -- lets the loop turn once. It counts as ready meanwhile, so neither a
    -- replayed nor a live result reaches its run first (replay.deliver holds
    -- them): the run sees what it would have seen without the pause.
    r.paused = (r.paused or 0) + 1
    r.nready = r.nready + 1
    S.later[#S.later + 1] = th
    return false
  elseif kind == "version" then
    local id = name
    local v = r.versions[id]
    if v == nil then
      -- First time this marker is met: a run that is still replaying started
      -- before the marker existed, so it takes the oldest supported version.
      v = sched.behind_log(r) and spec.min or spec.max
      r.versions[id] = v
      log.append(r, nil, "version", id, encode(v))
    end
    if v < spec.min or v > spec.max then
      finish_run(r, false, errors.new("NonDeterminism",
        ("moor.version('%s'): this run recorded version %d, outside the supported %d..%d"):format(
          id, v, spec.min, spec.max)))
      return false
    end
    return true, true, v
  end
  if r.cancelling and kind ~= "step" and kind ~= "hook" then
    -- After a cancel, cleanup may run steps but not wait on the world.
    return true, false, errors.Cancelled("the run was cancelled")
  end
  local n = r.nops + 1
  r.nops = n
  local rec = r.recorded[n]
  if rec then
    if rec.kind ~= kind or rec.name ~= name then
      replay.nondeterminism(r, n, rec, kind, name)
      return false
    end
  elseif n <= r.max_op then
    replay.nondeterminism(r, n, nil, kind, name)
    return false
  end
  r.waiters[n] = th
  if rec and rec.done then
    -- Fast path: when this op's result is the next one the log gives and no
    -- other branch of the run is ready, the queue would deliver it to this
    -- thread next anyway; hand it over now.
    local i = r.replay[r.rpos]
    if r.nready == 0 and i and r.log_ops[i] == n then
      r.rpos = r.rpos + 1
      local got, ok, v = replay.take(r, n, r.log_kinds[i], r.log_payloads[i], r.log_times[i])
      if not got then return false end
      return true, ok, v
    end
    return false -- the replay delivers its result in log order
  end
  start_live(r, n, kind, name, spec, rec)
  return false
end

---------------------------------------------------------------------------
-- threads

local function thread_done(th, ok, v)
  local r = th.run
  if th == r.main then
    finish_run(r, ok, v)
  else
    settle_future(th.future, ok, v)
  end
end

--- Resume a ready thread and answer its ops until it parks or ends.
function M.resume_thread(th)
  local r = th.run
  r.nready = r.nready - 1
  if r.settled or th.dead then return end
  touch(r) -- (the least recently active parked runs are evicted first)
  local co = th.co
  -- x1..x3 are what the pending yield returns: (ok, value, extra) for ops.
  local x1, x2, x3 = th.ok, th.v1, th.v2
  th.ok, th.v1, th.v2 = nil, nil, nil
  while true do
    S.current_run, S.in_body, S.current_thread = r, true, th
    local ok, a, b, c, d = co_resume(co, x1, x2, x3)
    S.current_run, S.in_body, S.current_thread = false, false, false
    if co_status(co) == "dead" then
      th.dead = true
      if ok then ok, a = a, b else co_close(co) end -- (false: raised past the pcall)
      return thread_done(th, ok, a)
    end
    if a == OP then
      local go
      go, x1, x2, x3 = handle_op(r, th, b, c, d)
      if not go or r.settled then return end
    elseif getmetatable(a) == TASK_MESSAGE then
      -- coroutine.yield(task.postMessage(msg)) in a body: a step, so it is
      -- posted once and replayed from the log (the yield returns true).
      local go
      go, x1, x2, x3 = handle_op(r, th, "step", "task.postMessage", { fn = post_message, args = pack(r, a),
        policy = POST_POLICY })
      if not go or r.settled then return end
    else
      if not steps.progress(r, a) then return end
      x1, x2, x3 = nil, nil, nil
    end
  end
end

--- The body thread executing now may not wait on the world (a harness
-- tool's handler: seed 001 "What a handler can't do"): why, or false to lift it.
function M.refuse_waits(why) local th = S.current_thread; if th then th.no_wait = why end end
--- Why the body thread executing now may not wait, or nil.
function M.waits_refused() local th = S.current_thread; return th and th.no_wait or nil end

--- Yield an op to the engine (raises when not in a workflow body).
function M.op(kind, name, spec)
  if S.closing then
    error(errors.new("CleanupTooLate", ("%s: cleanup can no longer wait (%s)"):format(S.closing, tostring(kind))))
  end
  return co_yield(OP, kind, name, spec)
end

--- Start fn(...) as a branch of the current run; returns its future.
function M.async(fn, ...)
  local r = S.current_run
  local args = pack(...)
  local f = { done = false }
  local th = sched.new_thread(r, function() return fn(unpack(args, 1, args.n)) end)
  th.future = f
  ready(th, nil)
  return f
end

return M
