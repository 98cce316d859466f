--- Steps and progress: running a step's function in its own coroutine
-- (parking it on I/O when it yields IO), recording its result or error,
-- retrying it on a timer with backoff, and recording progress snapshots.
local clock = require "moor.clock"
local json = require "moor.json"
local errors = require "moor.errors"
local duration = require "moor.duration"
local conf = require "moor.conf"
local log = require "moor.engine.log"
local sched = require "moor.engine.sched"
local timers = require "moor.engine.timers"
local runs = require "moor.engine.runs"
local waits = require "moor.engine.waits"
local auth = require "moor.engine.auth"
local replay = require "moor.engine.replay"
local S = require "moor.engine.state"

local M = {}

local co_create, co_resume, co_status, co_yield, co_close =
  coroutine.create, coroutine.resume, coroutine.status, coroutine.yield, coroutine.close
local pack, unpack = table.pack, table.unpack
local encode = json.encode
local step_value = replay.step_value
local now_ms = clock.now
local OP, IO, TASK_MESSAGE = S.OP, S.IO, S.TASK_MESSAGE

--- A progress snapshot v from run r's body or step. Returns false when the
-- run failed instead (a snapshot that cannot be recorded).
function M.progress(r, v)
  r.last_progress = v
  if sched.behind_log(r) then return true end
  local text, err = encode(v, conf.MAX_RESULT, "progress")
  if not text then
    runs.finish_run(r, false, errors.new("InvalidProgress", err))
    return false
  end
  -- Snapshots are last-write-wins: the same one again (a body replayed to
  -- where it last reported) is not news.
  if text == r.last_progress_text then return true end
  r.last_progress_text = text
  log.append(r, nil, "progress", nil, text)
  return true
end

local function backoff(policy, attempt)
  local d = policy.backoff * policy.factor ^ (attempt - 1)
  if d > policy.maxBackoff then d = policy.maxBackoff end
  return math.floor(d)
end

local step_done, exec_step

-- Steps run in worker coroutines, kept for the next step once one returns
-- (a coroutine made and collected per step was churn on every step's path).
-- A worker calls the step it is handed under pcall, then yields DONE with
-- the outcome and waits for the next. One parked on I/O and abandoned, or
-- dead, is never reused. The step to run is handed over in next_fn/next_args,
-- set just before the resume that takes them (and cleared at once, so a
-- kept worker holds no step's function, arguments or result).
local DONE = setmetatable({}, { __name = "moor.step.done" })
local next_fn, next_args = nil, nil
local workers, nworkers = {}, 0

local function call_next()
  local fn, args = next_fn, next_args
  next_fn, next_args = nil, nil
  return fn(unpack(args, 1, args.n))
end

local function worker()
  while true do co_yield(DONE, pcall(call_next)) end
end

local function take_worker()
  if nworkers == 0 then return co_create(worker) end
  local co = workers[nworkers]
  workers[nworkers], nworkers = nil, nworkers - 1
  return co
end

-- Run a step's worker until the step returns, raises, or parks on I/O.
local function step_run(r, n, name, spec, attempt, co, info, ...)
  S.step_info = info
  local ok, v, w, x = co_resume(co, ...)
  while ok and v ~= DONE and co_status(co) == "suspended" do
    if v == IO then
      S.step_info = false
      if not info.marked then
        -- A step parked on I/O leaves a mark, as a waiting op does.
        info.marked = true
        sched.mark_waiting(r, n, "step.started", name, "{}")
        r.recorded[n].ran = true
      end
      local resumed = false
      S.io_inflight = S.io_inflight + 1
      r.io = (r.io or 0) + 1 -- (a run with a step on I/O is not evicted)
      local started, serr = pcall(w, function(...)
        if resumed then return end
        resumed = true
        S.io_inflight = S.io_inflight - 1
        r.io = r.io - 1
        if r.settled or not r.waiters[n] then co_close(co); return end
        step_run(r, n, name, spec, attempt, co, info, ...)
      end)
      if not started and not resumed then
        resumed = true
        S.io_inflight = S.io_inflight - 1
        r.io = r.io - 1
        S.step_info = info
        ok, v, w, x = co_resume(co, nil, tostring(serr))
      else
        return
      end
    elseif getmetatable(v) == TASK_MESSAGE then
      -- A background tool's task.postMessage: posted now; a step run again
      -- after a crash posts the same delivery ids, which its session drops.
      info.posts = (info.posts or 0) + 1
      local posted = waits.post_task_message(r, v, ("%s:%d:%d"):format(r.id, n, info.posts))
      S.step_info = info
      ok, v, w, x = co_resume(co, posted)
    elseif v ~= OP and not M.progress(r, v) then
      co_close(co)
      S.step_info = false
      return
    else
      S.step_info = info
      ok, v, w, x = co_resume(co)
    end
  end
  S.step_info = false
  if ok and v == DONE then
    ok, v = w, x
    -- (not one whose step left a debug hook on it: the hook is the coroutine's)
    if nworkers < conf.STEP_WORKERS and debug.gethook(co) == nil then
      nworkers = nworkers + 1
      workers[nworkers] = co
    end
  else
    co_close(co) -- (raised past the pcall)
    ok, v = false, ok and "a step's coroutine ended without its result" or v
  end
  step_done(r, n, name, spec, attempt, ok, v)
end

step_done = function(r, n, name, spec, attempt, ok, v)
  if r.settled or not r.waiters[n] then return end
  if not ok and getmetatable(v) == errors.Error and v.code == "AuthRequired" and type(v.auth) == "table" then
    -- ctx.getToken found no usable token: the attempt ends and the run
    -- parks on a sign-in (engine/auth.lua); the callback runs the step again.
    local parked, perr = auth.park(r, n, name, spec, attempt, v.auth, function(e)
      step_done(r, n, name, spec, attempt, false, e)
    end)
    if parked then return end
    v = errors.FatalError(perr)
  end
  if ok then
    local text, err, kind = encode(v, conf.MAX_RESULT, "result")
    if text then return sched.complete(r, n, "step.result", name, text) end
    v = errors.FatalError(("step '%s' returned a value that cannot be recorded: %s%s"):format(name, err,
      kind == "size" and runs.TOO_LARGE or ""))
  end
  local e = errors.normalize(v)
  if e.code ~= "FatalError" and e.code ~= "NotSupported" and attempt <= spec.policy.retries then
    local delay = e.retryAfter
    if delay ~= nil then delay = duration.parse(delay) end
    delay = delay or backoff(spec.policy, attempt)
    local due = now_ms() + delay
    log.append(r, n, "step.retry", name, encode({ attempt = attempt, error = e, retryAt = due }))
    timers.add(r, due, function() exec_step(r, n, name, spec, attempt + 1) end)
  else
    sched.complete(r, n, "step.error", name, encode({ attempt = attempt, error = e }))
  end
end

--- Run attempt `attempt` of step op n (spec = { fn, args, policy }).
exec_step = function(r, n, name, spec, attempt)
  if r.settled or not r.waiters[n] then return end
  -- rerun: the log shows the step started before this process ran it (a restart cut it short)
  local rec = r.recorded[n]
  local info = { runId = r.id, seq = n, attempt = attempt, name = name, idempotencyKey = r.id .. ":" .. n,
                 signal = r.signal, auth = auth.step_auth(r, n, attempt), retries = spec.policy.retries,
                 rerun = rec ~= nil and not rec.ran }
  if rec then rec.ran = true end
  -- A step, as a branch (new_thread), runs under pcall in its coroutine (a worker's).
  local co = take_worker()
  next_fn, next_args = spec.fn, spec.args
  step_run(r, n, name, spec, attempt, co, info)
end
M.exec = exec_step
auth.install(exec_step)
--- Fail step op n at attempt (a sign-in that cannot be waited on again).
function M.fail(r, n, name, spec, attempt, err) return step_done(r, n, name, spec, attempt, false, err) end

--- Inside a step: park the step on I/O. start(resume) begins it; the step
-- continues with what resume is given. Returns those values.
function M.io(start)
  if not S.step_info or S.in_body then
    error("I/O that parks (moor.fetch) belongs in a step or a plain tool", 3)
  end
  return co_yield(IO, start)
end

--- Is the running body's next op a step whose result the log already holds
-- (a replay)? Then its function and arguments are never needed.
function M.recorded()
  local r = S.current_run
  local rec = r and r.recorded[r.nops + 1]
  return rec ~= nil and rec.done == true
end

-- A step op. When the log already holds this op's result (a replay), the
-- step's function and arguments are never needed, so nothing is packed.
local REPLAYED = {}
function M.step(name, fn, policy, ...)
  if S.closing then
    error(errors.new("CleanupTooLate", ("%s: cleanup can no longer run step '%s'"):format(S.closing, name)))
  end
  local r = S.current_run
  local n = r.nops + 1
  local rec = r.recorded[n]
  if rec and rec.done then
    -- Replay without a yield: when the log's next result is this op's, a
    -- result (not an error) of this very step, and no other branch of the
    -- run is ready, the engine would hand it straight back (ops.lua's
    -- handle_op, "Fast path"); take it here. Anything else (a mismatch, an
    -- error, a result the engine must check or order) goes through the yield.
    local i = r.replay[r.rpos]
    if i and r.nready == 0 and coroutine.isyieldable() and r.log_ops[i] == n and rec.kind == "step" and rec.name == name
      and r.log_kinds[i] == "step.result" then
      local v, err = step_value(r.log_payloads[i])
      if not err then
        r.nops, r.rpos = n, r.rpos + 1
        local t = r.log_times[i]
        if t > r.now then r.now = t end
        return true, v
      end
    end
    return co_yield(OP, "step", name, REPLAYED)
  end
  return co_yield(OP, "step", name, { fn = fn, args = pack(...), policy = policy })
end

return M
