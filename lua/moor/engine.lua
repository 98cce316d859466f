--- The durable engine: runs tool bodies as coroutines, answers their ops,
-- records every result in the run's event log before the body sees it, and
-- replays a run from its log after a restart.
--
-- The op protocol (DESIGN.md): a body yields (OP, kind, name, spec) to ask
-- the engine for something durable; any other yield is a progress snapshot.
-- Each durable op gets the next op number ("seq") of its run. Replay answers
-- ops from the log in the order their results were recorded, and switches to
-- live at the first op with no record. An op whose kind or name differs from
-- the log fails the run with a non-determinism error.
local core = require "moor.core"
local json = require "moor.json"
local errors = require "moor.errors"
local schema = require "moor.schema"
local signals = require "moor.signal"

local M = {}

local OPKIND -- log kind -> op kind (set below, with the replay code)
local mark_waiting -- forward

local OP = setmetatable({}, { __name = "moor.op", __tostring = function() return "moor.op" end })
M.OP = OP
-- Seed 001's cap on what a harness agent's tool returns (those tools are not
-- built yet); nothing else is held to it.
M.HARNESS_TOOL_MAX_RESULT = 64 * 1024

-- The largest step result, model answer, tool result or progress snapshot, as
-- JSON: 16 MiB, or $MOOR_MAX_RESULT (bytes, or with a KiB / MiB suffix).
local function max_result(env)
  if env == nil or env == "" then return 16 * 1024 * 1024 end
  local n, unit = env:match("^%s*(%d+)%s*(%a*)%s*$")
  local scale = ({ [""] = 1, b = 1, k = 1024, kib = 1024, m = 1024 * 1024, mib = 1024 * 1024 })[
    unit and unit:lower() or ""]
  n = n and math.tointeger(tonumber(n))
  if not n or not scale or n * scale < 1024 then
    error(("MOOR_MAX_RESULT must be a size of at least 1024 bytes, as 16777216 or 16MiB, not '%s'"):format(env), 0)
  end
  return n * scale
end
M.MAX_RESULT = max_result(os.getenv("MOOR_MAX_RESULT"))
local TOO_LARGE = "; return a summary, or write the data to a file and return its path "
  .. "(or raise the limit with $MOOR_MAX_RESULT)"
M.tools = {}          -- name -> loaded tool definition
M.agent = nil         -- the agent definition from agent/agent.lua, when present

local co_create, co_resume, co_status, co_yield, co_close =
  coroutine.create, coroutine.resume, coroutine.status, coroutine.yield, coroutine.close
local pack, unpack = table.pack, table.unpack
local encode, decode, null = json.encode, json.decode, json.null
local append_event, now_ms = core.append, core.now

local runs = {}               -- id -> run, for runs in memory
local nruns = 0
local runq, qhead, qtail = {}, 1, 0   -- threads ready to resume (FIFO: deterministic)
local pending, npending = {}, 0       -- completions appended, not yet committed
local replaying = {}          -- runs still answering ops from their log (array)
local emitted, nemitted = {}, 0       -- events for the embedder's listener
local heap, nheap = {}, 0     -- timers: binary heap by due time

local current_run = nil       -- the run whose body is executing
local in_body = false         -- true while a body (not a step) executes
local closing = nil           -- why ops are refused: a run's parked threads are being closed
local step_info = nil         -- the step executing now, for moor.stepInfo()

---------------------------------------------------------------------------
-- timers (a binary heap; cancelled entries are skipped when they surface)

local function heap_push(t)
  nheap = nheap + 1
  local i = nheap
  heap[i] = t
  while i > 1 do
    local p = i // 2
    if heap[p].due <= t.due then break end
    heap[i], heap[p] = heap[p], t
    i = p
  end
end

local function heap_pop()
  local top = heap[1]
  local last = heap[nheap]
  heap[nheap] = nil
  nheap = nheap - 1
  if nheap > 0 then
    local i = 1
    heap[1] = last
    while true do
      local l, s = i * 2, i
      if l <= nheap and heap[l].due < heap[s].due then s = l end
      if l + 1 <= nheap and heap[l + 1].due < heap[s].due then s = l + 1 end
      if s == i then break end
      heap[i], heap[s] = heap[s], heap[i]
      i = s
    end
  end
  return top
end

local function add_timer(r, due, fire)
  local t = { due = due, run = r, fire = fire }
  heap_push(t)
  return t
end

---------------------------------------------------------------------------
-- the log

local mirror -- forward: copies a child run's questions and progress to its parent

-- The open transaction (every write between two commits, host/store.c):
-- the index in `emitted` of its first event, and the runs it appended to.
-- When its COMMIT fails the store rolls it back, and the engine takes back
-- what it holds of it in memory too (discard_tx, below).
local tx_first = nil
local tx_runs = {}

local function append(r, op, kind, name, payload)
  if r.parent_id and mirror then mirror(r, kind, name, payload) end
  local seq = r.seq + 1
  r.seq = seq
  local t = now_ms()
  local ok, err = append_event(r.id, seq, op, kind, name, payload, t)
  if not ok then error("cannot record event: " .. tostring(err), 0) end
  if not tx_first then tx_first = nemitted + 1 end
  tx_runs[r] = true
  -- Handed to the embedder's listener and the event streams after the commit.
  nemitted = nemitted + 1
  emitted[nemitted] = { r.id, seq, kind, name, payload, t, op }
  return seq, t
end

local flush_subscribers -- set once M.subscribe exists

local function flush_listener()
  local c_listener = core.has_listener()
  -- Only committed events: those of an open transaction wait for its commit.
  local upto = tx_first and tx_first - 1 or nemitted
  for i = 1, upto do
    local e = emitted[i]
    if c_listener then core.emit(e[1], e[2], e[3], e[4], e[5]) end
    flush_subscribers(e)
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
-- scheduling

local function ready(th, ok, v1, v2)
  th.ok, th.v1, th.v2 = ok, v1, v2
  qtail = qtail + 1
  runq[qtail] = th
  th.run.nready = th.run.nready + 1
end

local function is_replaying(r)
  return r.rpos <= r.nreplay
end

-- The body has not yet re-issued every op the log holds: what it publishes
-- now was published before the restart.
local function behind_log(r)
  return r.rpos <= r.nreplay or r.nops < r.max_op
end

-- Live work for a run waits until its replay is over, so that results keep
-- the order the log gives them.
local function live(r, fn)
  if is_replaying(r) then
    r.deferred[#r.deferred + 1] = fn
  else
    fn()
  end
end

local finish_run -- forward

local function nondeterminism(r, n, rec, kind, name)
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

-- A completion was recorded (or replayed): take the thread waiting on op n
-- and the values its op returns. Returns nil when the run failed instead.
local function take(r, n, kind, payload, time)
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
    local v, err = decode(payload)
    if err then return finish_run(r, false, errors.new("CorruptLog", "seq " .. n .. ": " .. err)) end
    if v == null then v = nil end -- a step that returns nothing gives the body nil
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

local apply_cancel -- forward

local function deliver(r, n, kind, payload, time)
  if kind == "run.cancel" then return apply_cancel(r, time) end
  if kind == "run.abort" then
    -- Steering: the call's abort signal aborts (its questions are withdrawn);
    -- nothing is cancelled, the body decides what to return.
    if not r.settled then M.abort(r.ctx.abortSignal, "steered") end
    return
  end
  local th, ok, v = take(r, n, kind, payload, time)
  if th then ready(th, ok, v) end
end

-- Record a result and queue it for delivery after the next commit. While the
-- run is still replaying its log, delivery waits for the replay to end, so
-- results reach the body in log order.
local function queue_delivery(r, item)
  if is_replaying(r) then
    r.deferred[#r.deferred + 1] = function()
      npending = npending + 1
      pending[npending] = item
    end
  else
    npending = npending + 1
    pending[npending] = item
  end
end

local function complete(r, n, kind, name, payload)
  local _, t = append(r, n, kind, name, payload)
  queue_delivery(r, { r, n, kind, payload, t })
end

local function backoff(policy, attempt)
  local d = policy.backoff * policy.factor ^ (attempt - 1)
  if d > policy.maxBackoff then d = policy.maxBackoff end
  return math.floor(d)
end

local function progress(r, v)
  r.last_progress = v
  if behind_log(r) then return true end
  local text, err = encode(v, M.MAX_RESULT, "progress")
  if not text then
    finish_run(r, false, errors.new("InvalidProgress", err))
    return false
  end
  -- Snapshots are last-write-wins: the same one again (a body replayed to
  -- where it last reported) is not news.
  if text == r.last_progress_text then return true end
  r.last_progress_text = text
  append(r, nil, "progress", nil, text)
  return true
end

local exec_step
-- I/O inside a step (moor.fetch, a provider's backoff): the step's coroutine
-- yields (IO, start); start(resume) begins the work and resume(...) continues
-- the step when it is done. Not durable: a crash re-runs the whole step.
local IO = setmetatable({}, { __name = "moor.io" })
M.IO = IO
M.io_inflight = 0

local step_done

-- Run a step's coroutine until it returns, raises, or parks on I/O.
local function step_run(r, n, name, spec, attempt, co, info, ...)
  step_info = info
  local ok, v, w = co_resume(co, ...)
  while ok and co_status(co) == "suspended" do
    if v == IO then
      step_info = nil
      if not info.marked then
        -- A step parked on I/O leaves a mark, as a waiting op does (above).
        info.marked = true
        mark_waiting(r, n, "step.started", name, "{}")
      end
      local resumed = false
      M.io_inflight = M.io_inflight + 1
      local started, serr = pcall(w, function(...)
        if resumed then return end
        resumed = true
        M.io_inflight = M.io_inflight - 1
        if r.settled or not r.waiters[n] then co_close(co); return end
        step_run(r, n, name, spec, attempt, co, info, ...)
      end)
      if not started and not resumed then
        resumed = true
        M.io_inflight = M.io_inflight - 1
        step_info = info
        ok, v, w = co_resume(co, nil, tostring(serr))
      else
        return
      end
    elseif v ~= OP and not progress(r, v) then
      co_close(co)
      step_info = nil
      return
    else
      step_info = info
      ok, v, w = co_resume(co)
    end
  end
  step_info = nil
  if ok then ok, v = v, w else co_close(co) end -- (false: raised past the pcall)
  step_done(r, n, name, spec, attempt, ok, v)
end

step_done = function(r, n, name, spec, attempt, ok, v)
  if r.settled or not r.waiters[n] then return end
  if ok then
    local text, err, kind = encode(v, M.MAX_RESULT, "result")
    if text then return complete(r, n, "step.result", name, text) end
    v = errors.FatalError(("step '%s' returned a value that cannot be recorded: %s%s"):format(name, err,
      kind == "size" and TOO_LARGE or ""))
  end
  local e = errors.normalize(v)
  if e.code ~= "FatalError" and e.code ~= "NotSupported" and attempt <= spec.policy.retries then
    local delay = e.retryAfter
    if delay ~= nil then delay = require("moor.duration").parse(delay) end
    delay = delay or backoff(spec.policy, attempt)
    local due = now_ms() + delay
    append(r, n, "step.retry", name, encode({ attempt = attempt, error = e, retryAt = due }))
    add_timer(r, due, function() exec_step(r, n, name, spec, attempt + 1) end)
  else
    complete(r, n, "step.error", name, encode({ attempt = attempt, error = e }))
  end
end

exec_step = function(r, n, name, spec, attempt)
  if r.settled or not r.waiters[n] then return end
  local info = { runId = r.id, seq = n, attempt = attempt, name = name, idempotencyKey = r.id .. ":" .. n,
                 signal = r.ctx and r.ctx.abortSignal }
  -- A step, as a branch (new_thread), runs under pcall in its coroutine.
  step_run(r, n, name, spec, attempt, co_create(pcall), info, spec.fn, unpack(spec.args, 1, spec.args.n))
end

--- Inside a step: park the step on I/O. start(resume) begins it; the step
-- continues with what resume is given. Returns those values.
function M.io(start)
  if not step_info or in_body then
    error("I/O that parks (moor.fetch) belongs in a step or a plain tool", 3)
  end
  return co_yield(IO, start)
end

local function fire_sleep(r, n)
  return function()
    if not r.settled and r.waiters[n] then complete(r, n, "timer.fired", "sleep", "{}") end
  end
end

---------------------------------------------------------------------------
-- questions, hooks and webhooks, signals

M.CANCEL_GRACE = 30000
M.public_url = "http://127.0.0.1:7373" -- where webhook URLs point; moor dev sets it

local function request_id(r, n)
  return "req_" .. r.id:sub(5) .. "_" .. n
end

-- Withdraw the question of op n: resolved as cancelled unless an answer was
-- recorded first. as_result: the body is still waiting, so the withdrawal is
-- its op's result; otherwise (the run is cancelled or ends) it is only news.
local function withdraw(r, n, as_result)
  local ask = r.asks[n]
  if not ask then return end
  r.asks[n] = nil
  local _, changed = core.exec(
    "UPDATE inputs SET status='cancelled', resolved=? WHERE request_id=? AND status='pending'", now_ms(), ask.requestId)
  if changed ~= 1 then return end
  local payload = encode({ requestId = ask.requestId, runId = r.id, outcome = "cancelled" })
  if as_result then
    complete(r, n, "input.resolved", "ask", payload)
  else
    append(r, nil, "input.resolved", "ask", payload)
  end
end

--- Abort a signal made by moor.AbortController (or ctx.abortSignal): the
-- questions asked with it are withdrawn.
function M.abort(signal, reason)
  if signal.aborted then return end
  signal.aborted = true
  signal.reason = reason
  local asks = signal._asks
  signal._asks = nil
  for _, a in ipairs(asks or {}) do
    local r, n = a[1], a[2]
    local rec = r.recorded[n]
    if not r.settled and r.waiters[n] and not (rec and rec.done) then withdraw(r, n, true) end
  end
  local listeners = signal._listeners
  signal._listeners = nil
  for _, fn in ipairs(listeners or {}) do fn(reason) end
  -- A signal is a future too (moor.signal): its waiters wake with the reason.
  if signal.done == false then M.settle_future(signal, true, reason) end
end

local B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

-- 32 random bytes, base64url without padding (43 characters): unguessable
-- webhook URLs.
local function random_token()
  local b = core.random_bytes(32) .. "\0"
  local out = {}
  for i = 1, 33, 3 do
    local x = (b:byte(i) << 16) | (b:byte(i + 1) << 8) | b:byte(i + 2)
    for k = 18, 0, -6 do
      local c = (x >> k) & 63
      out[#out + 1] = B64URL:sub(c + 1, c + 1)
    end
  end
  return table.concat(out, "", 1, 43)
end
M.random_token = random_token

-- Deliveries recorded for a token but not yet taken by its run are capped,
-- so a sender cannot grow the database while the run waits elsewhere.
local MAX_QUEUED = 1000                  -- queued deliveries per token
local MAX_QUEUED_BYTES = 4 * 1024 * 1024 -- bytes of queued payloads per token
local queued = {} -- token -> { n, bytes }: counted from the database once, then kept

local function queued_for(token)
  local q = queued[token]
  if not q then
    local rows = core.query("SELECT count(*) AS n, coalesce(sum(length(CAST(payload AS BLOB))), 0) AS bytes "
      .. "FROM deliveries WHERE token=? AND consumed=0", token)
    q = { n = rows and rows[1] and rows[1].n or 0, bytes = rows and rows[1] and rows[1].bytes or 0 }
    queued[token] = q
  end
  return q
end

local function unqueue(token, bytes)
  local q = queued[token]
  if q then q.n, q.bytes = q.n - 1, q.bytes - bytes end
end

-- The next delivery for token that the body has not seen, consumed now.
local function take_delivery(token)
  local rows = core.query("SELECT n, payload FROM deliveries WHERE token=? AND consumed=0 ORDER BY n LIMIT 1", token)
  local d = rows and rows[1]
  if not d then return nil end
  core.exec("UPDATE deliveries SET consumed=1 WHERE token=? AND n=?", token, d.n)
  unqueue(token, #d.payload)
  return d.payload
end

local function start_ask(r, n, spec, rec)
  if r.channel == "none" and not rec then
    return complete(r, n, "input.resolved", "ask",
      encode({ requestId = request_id(r, n), runId = r.id, outcome = "unavailable" }))
  end
  local id = request_id(r, n)
  r.asks[n] = { requestId = id }
  if not rec then
    local text = encode(spec.request)
    append(r, n, "input.requested", "ask", encode({ requestId = id, runId = r.id, callId = r.call_id,
      toolName = r.tool_name, request = spec.request }))
    core.exec("INSERT INTO inputs(request_id, run_id, op, request, status, created) VALUES(?,?,?,?,'pending',?)",
      id, r.id, n, text, now_ms())
    r.recorded[n] = { kind = "ask", name = "ask" }
  end
  for _, sig in ipairs(spec.signals) do
    if sig.aborted then return withdraw(r, n, true) end
    sig._asks = sig._asks or {}
    sig._asks[#sig._asks + 1] = { r, n }
  end
end

local function create_hook(r, n, spec)
  local token = spec.token or random_token()
  local rows = core.query("SELECT run_id, closed FROM hooks WHERE token=?", token)
  if rows and rows[1] then
    if rows[1].run_id ~= r.id then
      return complete(r, n, "hook.created", spec.kind, encode({ error = ("token '%s' is already used by run %s")
        :format(token, rows[1].run_id) }))
    end
  else
    core.exec("INSERT INTO hooks(token, run_id, kind, respond, created) VALUES(?,?,?,?,?)", token, r.id, spec.kind,
      spec.respondWith and encode(spec.respondWith) or nil, now_ms())
  end
  local p = { token = token, kind = spec.kind }
  if spec.kind == "webhook" then p.url = M.public_url .. "/.well-known/workflow/v1/webhook/" .. token end
  complete(r, n, "hook.created", spec.kind, encode(p))
end

-- An op that parks with nothing to record yet still leaves a mark in the log
-- ("waiting"), so a restart after later ops were recorded sees this op in its
-- place instead of a gap.
mark_waiting = function(r, n, kind, name, payload)
  local rec = r.recorded[n]
  if rec then return end
  append(r, n, kind, name, payload)
  r.recorded[n] = { kind = OPKIND[kind], name = name }
end

local function await_hook(r, n, token)
  local payload = take_delivery(token)
  if payload then return complete(r, n, "hook.received", "await", payload) end
  mark_waiting(r, n, "hook.waiting", "await", encode({ token = token }))
  local q = r.hook_waiting[token]
  if not q then q = {}; r.hook_waiting[token] = q end
  q[#q + 1] = n -- several branches may await one hook: first come, first served
end

-- Futures: branches started with moor.async.
local function wait_result(w)
  local fs = w.futures
  if w.mode == "race" then
    for i = 1, #fs do
      local f = fs[i]
      if f.done then return true, f.ok, f.value, i end
    end
    return false
  end
  -- all (await is all of one)
  local values = {}
  for i = 1, #fs do
    local f = fs[i]
    if f.done and not f.ok then return true, false, f.value end
    if not f.done then return false end
    values[i] = f.value
  end
  if w.mode == "await" then return true, true, values[1] end
  return true, true, json.array(values)
end

local function settle_future(f, ok, v)
  f.done, f.ok, f.value = true, ok, v
  local ws = f.waiters
  f.waiters = nil
  if not ws then return end
  for i = 1, #ws do
    local th, w = ws[i][1], ws[i][2]
    if th.wait == w then
      local done, rok, rv, idx = wait_result(w)
      if done then
        th.wait = nil
        ready(th, rok, rv, idx)
      end
    end
  end
end
M.settle_future = settle_future

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
  elseif kind == "version" then
    local id = name
    local v = r.versions[id]
    if v == nil then
      -- First time this marker is met: a run that is still replaying started
      -- before the marker existed, so it takes the oldest supported version.
      v = behind_log(r) and spec.min or spec.max
      r.versions[id] = v
      append(r, nil, "version", id, encode(v))
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
      nondeterminism(r, n, rec, kind, name)
      return false
    end
  elseif n <= r.max_op then
    nondeterminism(r, n, nil, kind, name)
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
      local got, ok, v = take(r, n, r.log_kinds[i], r.log_payloads[i], r.log_times[i])
      if not got then return false end
      return true, ok, v
    end
    return false -- the replay delivers its result in log order
  end
  if kind == "step" then
    local attempt = (rec and rec.attempts or 0) + 1
    local due = rec and rec.retry_due
    live(r, function()
      if due and due > now_ms() then
        add_timer(r, due, function() exec_step(r, n, name, spec, attempt) end)
      else
        exec_step(r, n, name, spec, attempt)
      end
    end)
  elseif kind == "sleep" then
    live(r, function()
      local due = rec and rec.due
      if not due then
        due = now_ms() + spec.ms
        append(r, n, "timer.scheduled", name, encode({ due = due }))
        r.recorded[n] = { kind = kind, name = name, due = due }
      end
      add_timer(r, due, fire_sleep(r, n))
    end)
  elseif kind == "ask" then
    live(r, function() if r.waiters[n] then start_ask(r, n, spec, rec) end end)
  elseif kind == "hook" then
    live(r, function() if r.waiters[n] then create_hook(r, n, spec) end end)
  elseif kind == "hook.await" then
    r.hook_ops[n] = spec.token
    live(r, function() if r.waiters[n] then await_hook(r, n, spec.token) end end)
  elseif kind == "child" then
    live(r, function() if r.waiters[n] then M.start_child(r, n, spec) end end)
  elseif kind == "child.await" then
    live(r, function() if r.waiters[n] then M.await_child(r, n, spec.runId) end end)
  else
    finish_run(r, false, errors.new("UnknownOp", "unknown op kind '" .. tostring(kind) .. "'"))
  end
  return false
end

local function thread_done(th, ok, v)
  local r = th.run
  if th == r.main then
    finish_run(r, ok, v)
  else
    settle_future(th.future, ok, v)
  end
end

local function resume_thread(th)
  local r = th.run
  r.nready = r.nready - 1
  if r.settled or th.dead then return end
  local co = th.co
  -- x1..x3 are what the pending yield returns: (ok, value, extra) for ops.
  local x1, x2, x3 = th.ok, th.v1, th.v2
  th.ok, th.v1, th.v2 = nil, nil, nil
  while true do
    current_run, in_body = r, true
    local ok, a, b, c, d = co_resume(co, x1, x2, x3)
    current_run, in_body = nil, false
    if co_status(co) == "dead" then
      th.dead = true
      if ok then ok, a = a, b else co_close(co) end -- (false: raised past the pcall)
      return thread_done(th, ok, a)
    end
    if a == OP then
      local go
      go, x1, x2, x3 = handle_op(r, th, b, c, d)
      if not go or r.settled then return end
    else
      if not progress(r, a) then return end
      x1, x2, x3 = nil, nil, nil
    end
  end
end

-- A body or a branch runs under pcall inside its own coroutine, so an error
-- (or the Cancelled raised at a parked op) unwinds there: to-be-closed
-- variables close during the unwinding, where their __close may still yield
-- (run steps). coroutine.close, from outside, cannot let them yield.
-- The coroutine is started at once up to a first yield that holds fn and its
-- arguments; its first real resume calls fn (a tail call: no frame is left).
local function start(fn, a, b)
  co_yield()
  return fn(a, b)
end

local function new_thread(r, fn, a, b)
  local co = co_create(pcall)
  co_resume(co, start, fn, a, b)
  local th = { run = r, co = co }
  r.threads[#r.threads + 1] = th
  return th
end

---------------------------------------------------------------------------
-- runs

local notify_parent -- forward

-- Close the run's parked threads with coroutine.close: their pending
-- to-be-closed variables run now, once, outside the scheduler, so they cannot
-- wait: a step or op there raises `why`. Returns the first error one raised.
local function close_threads(r, why)
  local first
  local saved_run, saved_body, saved_closing = current_run, in_body, closing
  current_run, in_body, closing = r, true, why
  for _, th in ipairs(r.threads) do
    if not th.dead and co_status(th.co) == "suspended" then
      th.dead = true
      local ok, err = co_close(th.co)
      if not ok and first == nil then first = err end
    end
    th.dead = true
  end
  current_run, in_body, closing = saved_run, saved_body, saved_closing
  return first
end

local function end_run(r, status)
  r.settled = true
  r.status = status
  if status == "running" then
    -- Dropped from memory to be replayed (t.restart): not ended, so no
    -- cleanup runs and nobody is told it settled.
    for _, th in ipairs(r.threads) do th.dead = true end
    if runs[r.id] then runs[r.id] = nil; nruns = nruns - 1 end
    return
  end
  if r.parent_id then notify_parent(r) end
  -- A run that ends takes the runs it started with it (an agent's session).
  local kids = core.query("SELECT id FROM runs WHERE parent_id=? AND status='running'", r.id)
  for _, k in ipairs(kids or {}) do M.cancel(k.id) end
  close_threads(r, "the run has ended") -- branches still parked (a lost race)
  if runs[r.id] then
    runs[r.id] = nil
    nruns = nruns - 1
  end
end

-- A run that ends withdraws its questions and closes its hooks (their
-- deliveries get 404 from now on).
local function release_waits(r)
  local rows = core.exec("UPDATE inputs SET status='cancelled', resolved=? WHERE run_id=? AND status='pending' "
    .. "RETURNING request_id", now_ms(), r.id)
  for _, row in ipairs(rows or {}) do
    append(r, nil, "input.resolved", "ask", encode({ requestId = row.request_id, runId = r.id, outcome = "cancelled" }))
  end
  local closed = core.exec("UPDATE hooks SET closed=1 WHERE run_id=? RETURNING token", r.id)
  for _, row in ipairs(closed or {}) do queued[row.token] = nil end
end

finish_run = function(r, ok, v)
  if r.settled then return end
  release_waits(r)
  if r.cancelling then
    -- After a cancel the result is discarded, whatever the body did.
    local e = not ok and errors.normalize(v) or nil
    local text = encode({ code = "Cancelled", message = r.cancel_reason or "the run was cancelled",
      cleanupError = e and e.code ~= "Cancelled" and e or nil })
    append(r, nil, "run.cancelled", r.tool_name, text)
    core.exec("UPDATE runs SET status='cancelled', error=?, updated=? WHERE id=?", text, now_ms(), r.id)
    return end_run(r, "cancelled")
  end
  if ok then
    if v == nil then v = r.last_progress end
    if v == nil then v = json.null end
    local text, err, kind = encode(v, M.MAX_RESULT, "result")
    if text and r.tool.outputSchema then
      local vok, verr = schema.validate(r.tool.outputSchema, decode(text), "result")
      if not vok then text, err, kind = nil, "the result does not match outputSchema: " .. verr, "schema" end
    end
    if text then
      append(r, nil, "run.completed", r.tool_name, text)
      core.exec("UPDATE runs SET status='completed', result=?, updated=? WHERE id=?", text, now_ms(), r.id)
      return end_run(r, "completed")
    end
    if kind == "size" then
      err = err .. TOO_LARGE
    end
    v = errors.new(kind == "size" and "ResultTooLarge" or "InvalidResult", err)
  end
  local e = errors.normalize(v)
  local text = encode({ code = e.code, message = e.message })
  -- The log keeps where a tool's error(msg) was raised (moor logs); the run's
  -- error (the API, a parent session's model) is the message as written.
  append(r, nil, "run.failed", r.tool_name, e.where and encode({ code = e.code, message = e.message,
    where = e.where }) or text)
  core.exec("UPDATE runs SET status='failed', error=?, updated=? WHERE id=?", text, now_ms(), r.id)
  end_run(r, "failed")
end

-- A cancel reaches the run (live, or replayed at its place in the log): abort
-- ctx.abortSignal, raise moor.Cancelled at every op a branch is parked on,
-- and give cleanup a grace period before the run ends as cancelled.
apply_cancel = function(r)
  if r.cancelling or r.settled then return end
  r.cancelling = true
  local ops = {}
  for n in pairs(r.waiters) do ops[#ops + 1] = n end
  table.sort(ops) -- a fixed order, so replay wakes the branches the same way
  for _, n in ipairs(ops) do
    local th = r.waiters[n]
    r.waiters[n] = nil
    withdraw(r, n, false)
    local token = r.hook_ops[n]
    local q = token and r.hook_waiting[token]
    if q then
      for i = #q, 1, -1 do
        if q[i] == n then table.remove(q, i) end
      end
    end
    for child, op in pairs(r.child_waiting) do
      if op == n then
        r.child_waiting[child] = nil
        M.cancel(child) -- a cancelled parent cancels the run it waits on
      end
    end
    ready(th, false, errors.Cancelled("the run was cancelled"))
  end
  -- After the parked ops: the signal's questions were withdrawn above.
  M.abort(r.ctx.abortSignal, "cancelled")
  add_timer(r, now_ms() + M.CANCEL_GRACE, function()
    if r.settled then return end
    r.cancel_reason = ("the run was cancelled; cleanup did not finish within the %d s grace period"):format(
      M.CANCEL_GRACE // 1000)
    -- What cleanup is still pending runs now, without steps (see close_threads).
    local cerr = close_threads(r, "the cancel grace period is over")
    finish_run(r, false, cerr ~= nil and cerr or errors.Cancelled(r.cancel_reason)) -- cerr: the cleanupError
  end)
end

-- xorshift64*: math.random in a body is seeded per run, so replay draws the
-- same numbers.
local function rng_next(r)
  local x = r.rng
  x = x ~ (x >> 12)
  x = x ~ (x << 25)
  x = x ~ (x >> 27)
  r.rng = x
  return x * 2685821657736338717
end

local function new_run(row, tool)
  local r = {
    id = row.id, tool_name = row.tool, tool = tool, call_id = row.call_id,
    seq = 0, nops = 0, max_op = 0, nready = 0,
    started = row.started, now = row.started,
    recorded = {}, waiters = {}, threads = {}, versions = {},
    replay = {}, rpos = 1, nreplay = 0, deferred = {},
    asks = {}, hook_ops = {}, hook_waiting = {}, channel = row.channel or "default",
    parent_id = row.parent_id, child_waiting = {}, session = row.session,
    rng = (row.seed ~= 0 and row.seed or 0x9E3779B97F4A7C15),
    status = "running",
  }
  return r
end

local function start_main(r, input)
  local tool = r.tool
  local ctx = {
    callId = r.call_id, toolName = r.tool_name, runId = r.id,
    abortSignal = signals.new(),
    -- The session whose tool call this run serves: { id, turnId }; {} outside one.
    session = { id = r.session and r.session.id, turnId = r.session and r.session.turnId },
  }
  if M.extend_ctx then M.extend_ctx(ctx, r) end
  r.ctx = ctx
  r.main = new_thread(r, tool.body, input, ctx)
  runs[r.id] = r
  nruns = nruns + 1
  ready(r.main, nil)
end

-- Log kinds that carry an op's result, and the op kind each event belongs to.
local COMPLETIONS = { ["step.result"] = true, ["step.error"] = true, ["timer.fired"] = true,
                      ["input.resolved"] = true, ["hook.created"] = true, ["hook.received"] = true,
                      ["child.started"] = true, ["child.settled"] = true }
OPKIND = { ["step.result"] = "step", ["step.error"] = "step", ["step.retry"] = "step",
                 ["step.started"] = "step", ["hook.waiting"] = "hook.await", ["child.waiting"] = "child.await",
                 ["timer.scheduled"] = "sleep", ["timer.fired"] = "sleep",
                 ["input.requested"] = "ask", ["input.resolved"] = "ask",
                 ["hook.created"] = "hook", ["hook.received"] = "hook.await",
                 ["child.started"] = "child", ["child.settled"] = "child.await" }

--- Events of a run as a list of { seq, op, kind, name, payload, time } tables.
function M.events(id)
  return core.query("SELECT seq, op, kind, name, payload, time FROM event_log WHERE run_id=? ORDER BY seq", id)
end

local function load_run(row)
  local tool = M.tools[row.tool]
  local r = new_run(row, tool)
  local n, last_seq, ops, kinds, names, payloads, times = core.events(row.id)
  if not n then return nil, last_seq end
  if not tool then
    r.seq = last_seq
    r.tool = { name = row.tool }
    finish_run(r, false, errors.new("MissingTool",
      ("tool '%s' is not in this build (no %s.lua under the agent's tools/), so run %s cannot resume"):format(
        row.tool, row.tool, row.id)))
    return r
  end
  if kinds[1] == "run.started" then
    local p = decode(payloads[1])
    r.session = type(p) == "table" and type(p.session) == "table" and p.session or nil
  end
  local recorded, replay, nreplay, max_op = r.recorded, r.replay, 0, 0
  for i = 1, n do
    local op, kind = ops[i], kinds[i]
    if op then
      local rec = recorded[op]
      if not rec then
        rec = { kind = OPKIND[kind] or kind, name = names[i] or nil }
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
      end
    elseif kind == "version" then
      r.versions[names[i]] = decode(payloads[i])
    elseif kind == "progress" then
      r.last_progress_text = payloads[i]
    elseif kind == "run.cancel" or kind == "run.abort" then
      nreplay = nreplay + 1
      replay[nreplay] = i
    end
  end
  r.seq = last_seq
  r.max_op, r.nreplay = max_op, nreplay
  -- Replay reads the columns directly: replay[k] is an index into them.
  r.log_ops, r.log_kinds, r.log_payloads, r.log_times = ops, kinds, payloads, times
  if row.source_hash and tool.source_hash and row.source_hash ~= tool.source_hash then
    append(r, nil, "run.note", nil, encode({
      message = ("the source of tool '%s' changed since this run started (%s -> %s); replay continues "
        .. "while its ops match the log"):format(row.tool, row.source_hash, tool.source_hash) }))
  end
  if r.nreplay > 0 then replaying[#replaying + 1] = r end
  start_main(r, decode(row.input))
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

---------------------------------------------------------------------------
-- a failed commit (a full disk, an immutable WAL): nothing of it was recorded

--- The cause while commits fail (nil while they work): the API answers
-- writes 503 and the host retries the engine's round with a backoff.
M.store_error = nil

-- Runs a failed commit took back, loaded again from their logs at the start
-- of the next round (not at once: the failure can surface deep inside a
-- body, a step's completion or a run's own ending).
local reload_ids, reload_set = {}, {}

-- The store rolled the transaction back; take it back in memory as well, so
-- that an answered error means nothing happened: its events are never handed
-- out, and every run it touched is dropped and loaded again from its log (a
-- restart in miniature: work that ran in it, steps included, runs again, as
-- after a kill -9 before the commit).
local function discard_tx()
  if tx_first then
    for i = tx_first, nemitted do emitted[i] = nil end
    nemitted = tx_first - 1
  end
  local touched = tx_runs
  tx_first, tx_runs = nil, {}
  local keep, n = {}, 0
  for i = 1, npending do
    local p = pending[i]
    if not touched[p[1]] then n = n + 1; keep[n] = p end
  end
  pending, npending = keep, n
  for r in pairs(touched) do
    if not reload_set[r.id] then
      reload_set[r.id] = true
      reload_ids[#reload_ids + 1] = r.id
    end
    if runs[r.id] == r then end_run(r, "running") else r.settled = true end
  end
end

local function reload_discarded()
  local ids = reload_ids
  reload_ids, reload_set = {}, {}
  table.sort(ids) -- a fixed order, as resume_all has
  for _, id in ipairs(ids) do
    if not runs[id] then
      local rows = core.query("SELECT * FROM runs WHERE id=?", id)
      if rows and rows[1] and rows[1].status == "running" then load_run(rows[1]) end
    end
  end
end

-- Every commit goes through here. Returns true, or nil and the cause (the
-- transaction is gone, in the file and in memory).
local function commit()
  local ok, err = core.commit()
  if ok then
    tx_first = nil
    if next(tx_runs) then tx_runs = {} end
    if err then M.store_error = nil end -- (err: a transaction was written)
    return true
  end
  M.store_error = tostring(err)
  discard_tx()
  return nil, M.store_error
end

local function store_unavailable(err)
  return nil, 503, "storage_unavailable", ("the database cannot be written now (%s); nothing was recorded: "
    .. "try again later"):format(tostring(err))
end
M.store_unavailable = store_unavailable

---------------------------------------------------------------------------
-- the scheduler round

-- Run every ready thread until all are parked.
local function drain()
  while qhead <= qtail do
    local th = runq[qhead]
    runq[qhead] = nil
    qhead = qhead + 1
    resume_thread(th)
  end
  qhead, qtail = 1, 0
end

-- Commit the batch, then hand its results over one at a time, running to
-- quiescence after each: exactly what replay does with the same log, so the
-- branches wake in the same order (and issue their ops in the same order).
local function commit_and_deliver()
  if not commit() then return false end
  local n = npending
  local list = pending
  pending, npending = {}, 0
  for i = 1, n do
    local p = list[i]
    deliver(p[1], p[2], p[3], p[4], p[5])
    drain()
  end
  return true
end

local function replay_next(r)
  local i = r.replay[r.rpos]
  r.rpos = r.rpos + 1
  deliver(r, r.log_ops[i], r.log_kinds[i], r.log_payloads[i], r.log_times[i])
end

local function replay_round()
  local progressed = false
  local i = 1
  while i <= #replaying do
    local r = replaying[i]
    if r.settled then
      table.remove(replaying, i)
    elseif not is_replaying(r) then
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

-- Timers of settled runs (a lost race against a long timer, a cancel's
-- grace) are dropped now and then rather than kept until they fall due.
local ticks = 0
local function compact_heap()
  local keep = {}
  for i = 1, nheap do
    if not heap[i].run.settled then keep[#keep + 1] = heap[i] end
  end
  if #keep == nheap then return end
  heap, nheap = {}, 0
  for _, t in ipairs(keep) do heap_push(t) end
end
M.compact_timers = compact_heap

--- Run everything that is ready; returns ms until the next timer (or nil),
-- the cause when a commit of this round failed (the host retries after a
-- backoff), and whether the store is known to work (a commit succeeded since
-- the last failure).
function M.tick()
  if reload_ids[1] then reload_discarded() end
  local now = now_ms()
  while nheap > 0 and heap[1].due <= now do
    local t = heap_pop()
    if not t.run.settled then t.fire() end
  end
  local failed = false
  while true do
    drain()
    local progressed = #replaying > 0 and replay_round()
    if npending > 0 then
      -- A failed commit ends the round: what it took back waits for the retry.
      if not commit_and_deliver() then failed = true; break end
    elseif not progressed then
      break
    end
  end
  if not failed and not commit() then failed = true end -- run starts and ends, progress, schedules
  flush_listener()
  while nheap > 0 and heap[1].run.settled do heap_pop() end
  ticks = ticks + 1
  if ticks % 256 == 0 then compact_heap() end
  local store_error = failed and M.store_error or nil
  if nheap > 0 then
    local d = heap[1].due - now_ms()
    if d < 0 then d = 0 end
    if M.io_inflight > 0 and d > 1000 then d = 1000 end
    return d, store_error, M.store_error == nil
  end
  -- Steps waiting on I/O: the loop wakes when it completes.
  if M.io_inflight > 0 then return 1000, store_error, M.store_error == nil end
  return nil, store_error, M.store_error == nil
end

---------------------------------------------------------------------------
-- the body's view: ops, fences, clock

function M.in_body() return in_body end
function M.current() return in_body and current_run or nil end
function M.step_info() return step_info end

--- Yield an op to the engine (raises when not in a workflow body).
function M.op(kind, name, spec)
  if closing then
    error(errors.new("CleanupTooLate", ("%s: cleanup can no longer wait (%s)"):format(closing, tostring(kind))))
  end
  return co_yield(OP, kind, name, spec)
end

-- A step op. When the log already holds this op's result (a replay), the
-- step's function and arguments are never needed, so nothing is packed.
local REPLAYED = {}
function M.step(name, fn, policy, ...)
  if closing then
    error(errors.new("CleanupTooLate", ("%s: cleanup can no longer run step '%s'"):format(closing, name)))
  end
  local r = current_run
  local rec = r.recorded[r.nops + 1]
  if rec and rec.done then return co_yield(OP, "step", name, REPLAYED) end
  return co_yield(OP, "step", name, { fn = fn, args = pack(...), policy = policy })
end

function M.async(fn, ...)
  local r = current_run
  local args = pack(...)
  local f = { done = false }
  local th = new_thread(r, function() return fn(unpack(args, 1, args.n)) end)
  th.future = f
  ready(th, nil)
  return f
end

function M.random(r) return rng_next(r) end

---------------------------------------------------------------------------
-- the embedder's entry points (called from host/moor.c)

local function new_id(prefix)
  return prefix .. ("%011x"):format(now_ms()) .. (core.random_bytes(6):gsub(".", function(c)
    return ("%02x"):format(c:byte())
  end))
end

function M.load_agent(dir)
  return require("moor.loader").load(dir, M)
end

function M.register(name, tool)
  M.tools[name] = tool
end

function M.call(name, input_json, opts)
  local tool = M.tools[name]
  if not tool then
    local names = {}
    for k in pairs(M.tools) do
      -- (built-in tools and a subagent's own tools, "<agent>.<tool>", are not listed)
      if k:sub(1, 6) ~= "moor__" and not k:find(".", 1, true) then names[#names + 1] = k end
    end
    table.sort(names)
    return nil, ("unknown tool '%s'; this agent has: %s"):format(name,
      #names > 0 and table.concat(names, ", ") or "(no tools)"), "unknown"
  end
  local input, err = input_json, nil
  if type(input_json) == "string" then input, err = decode(input_json) end
  if err then return nil, "the input is not valid JSON: " .. err, "json" end
  local ok, verr = schema.validate(tool.inputSchema, input, "input")
  if not ok then
    return nil, ("input refused by tool '%s': %s"):format(name, verr), "input"
  end
  local text = encode(input)
  local id = new_id("run_")
  local seed = string.unpack("<i8", core.random_bytes(8))
  local t = now_ms()
  opts = opts or {}
  local channel = opts.noInput and "none" or "default"
  local row = { id = id, tool = name, call_id = opts.callId or new_id("call_"), seed = seed, started = t,
                channel = channel, parent_id = opts.parent, parent_op = opts.parentOp, session = opts.session }
  local inserted, e = core.exec("INSERT INTO runs(id,tool,entry,status,input,call_id,source_hash,seed,started,"
    .. "updated,channel,parent_id,parent_op) VALUES(?,?,?,'running',?,?,?,?,?,?,?,?,?)", id, name, tool.entry, text,
    row.call_id, tool.source_hash, seed, t, t, channel, opts.parent, opts.parentOp)
  if not inserted then return nil, e, "store" end
  local r = new_run(row, tool)
  append(r, nil, "run.started", name, encode({ input = decode(text), callId = row.call_id, parentId = opts.parent,
    session = opts.session }))
  if opts.setup then opts.setup(id) end
  -- The run is durable before its id is handed out.
  local cok, cerr = commit()
  if not cok then return nil, cerr, "store" end
  start_main(r, decode(text))
  return id, row.call_id
end

function M.resume_all()
  local rows, err = core.query("SELECT * FROM runs WHERE status='running' ORDER BY started, id")
  if not rows then return nil, err end
  local n = 0
  for _, row in ipairs(rows) do
    if not runs[row.id] then
      local _, lerr = load_run(row)
      if lerr then return nil, lerr end
      n = n + 1
    end
  end
  return n
end

--- Drop a run from memory and load it again from its log (a restart in
-- miniature; moor.testing uses it to prove replay).
function M.reload(id)
  local r = runs[id]
  if r then end_run(r, r.status) end
  local rows = core.query("SELECT * FROM runs WHERE id=?", id)
  if not rows or not rows[1] then return nil, "unknown run " .. id end
  if rows[1].status ~= "running" then return nil, "run " .. id .. " is " .. rows[1].status end
  return load_run(rows[1])
end

function M.run_info(id)
  local rows = core.query("SELECT status, result, error FROM runs WHERE id=?", id)
  if not rows or not rows[1] then return nil, ("unknown run '%s'"):format(id) end
  local row = rows[1]
  return row.status, row.result or row.error or "null"
end

local function iso(ms)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", ms // 1000)
end

function M.list_runs(as_json)
  local rows = core.query("SELECT id, tool, status, started, updated FROM runs ORDER BY started, id")
  if as_json then
    for _, row in ipairs(rows) do
      row.started, row.updated = iso(row.started), iso(row.updated)
    end
    return encode(json.array(rows)) .. "\n"
  end
  local out = { ("%-32s %-24s %-10s %-20s %s"):format("ID", "TOOL", "STATUS", "STARTED", "UPDATED") }
  for _, row in ipairs(rows) do
    out[#out + 1] = ("%-32s %-24s %-10s %-20s %s"):format(row.id, row.tool, row.status,
      iso(row.started), iso(row.updated))
  end
  return table.concat(out, "\n") .. "\n"
end

function M.list_events(as_json, id)
  local rows = core.query("SELECT 1 FROM runs WHERE id=?", id)
  if not rows or not rows[1] then
    return nil, ("unknown run '%s'; 'moor runs' lists the runs"):format(id)
  end
  local events = M.events(id)
  if as_json then
    for _, ev in ipairs(events) do
      ev.payload = decode(ev.payload)
      ev.time = iso(ev.time)
    end
    return encode(json.array(events)) .. "\n"
  end
  local out = {}
  for _, ev in ipairs(events) do
    out[#out + 1] = ("%4d  %s  %-6s %-16s %-18s %s"):format(ev.seq, iso(ev.time),
      ev.op and ("op " .. ev.op) or "", ev.kind, ev.name or "", ev.payload)
  end
  return table.concat(out, "\n") .. "\n"
end

---------------------------------------------------------------------------
-- child runs: a body starts a tool as its own run and parks until it settles

function M.start_child(r, n, spec)
  -- A crash between the child's commit and this op's result: reuse the run.
  local existing = core.query("SELECT id FROM runs WHERE parent_id=? AND parent_op=?", r.id, n)
  if existing and existing[1] then
    return complete(r, n, "child.started", spec.tool, encode({ runId = existing[1].id }))
  end
  local id, err, code = M.call(spec.tool, encode(spec.input == nil and {} or spec.input),
    { parent = r.id, parentOp = n, callId = spec.callId, noInput = r.channel == "none", setup = spec.setup,
      session = spec.session })
  if not id then
    return complete(r, n, "child.started", spec.tool, encode({ error = { code = code, message = err } }))
  end
  complete(r, n, "child.started", spec.tool, encode({ runId = id }))
end

local function settled_payload(row)
  return encode({ runId = row.id, status = row.status,
    result = row.result and decode(row.result) or nil, error = row.error and decode(row.error) or nil })
end

function M.await_child(r, n, child_id)
  local rows = core.query("SELECT id, status, result, error FROM runs WHERE id=?", child_id)
  local row = rows and rows[1]
  if not row then
    return complete(r, n, "child.settled", "await", encode({ runId = child_id, status = "failed",
      error = { code = "NotFound", message = "unknown run " .. tostring(child_id) } }))
  end
  if row.status ~= "running" then return complete(r, n, "child.settled", "await", settled_payload(row)) end
  mark_waiting(r, n, "child.waiting", "await", encode({ runId = child_id }))
  r.child_waiting[child_id] = n
end

notify_parent = function(child)
  local p = runs[child.parent_id]
  local op = p and p.child_waiting[child.id]
  if not op then return end -- the parent looks the run up when it awaits it
  p.child_waiting[child.id] = nil
  local rows = core.query("SELECT id, status, result, error FROM runs WHERE id=?", child.id)
  complete(p, op, "child.settled", "await", settled_payload(rows[1]))
end

-- A child's questions, progress and agent.started also appear on its
-- parent's stream (a session shows its tool calls' questions and subagents): as non-op events, which replay
-- ignores, so they can be appended at any time.
local MIRROR = { ["input.requested"] = true, ["input.resolved"] = true, ["progress"] = "action.partial",
                 ["agent.started"] = true }
mirror = function(child, kind, _, payload)
  local m = MIRROR[kind]
  if not m then return end
  local p = runs[child.parent_id]
  local out_kind = m == true and kind or m
  local text = payload
  if m ~= true then
    text = ('{"callId":%s,"runId":%s,"output":%s}'):format(encode(child.call_id), encode(child.id), payload)
  end
  if p and not p.settled then
    append(p, nil, out_kind, child.tool_name, text)
  else
    local rows = core.query("SELECT status FROM runs WHERE id=?", child.parent_id)
    if rows[1] and rows[1].status == "running" then
      local s2 = core.query("SELECT coalesce(max(seq), 0) AS seq FROM events WHERE run_id=?", child.parent_id)
      append_event(child.parent_id, s2[1].seq + 1, nil, out_kind, child.tool_name, text, now_ms())
    end
  end
end

--- From a body: publish an event on the run's stream (a session's
-- message.*, turn.*, action.result). Not an op: skipped while replaying.
function M.publish(kind, payload)
  local r = current_run
  if not r or behind_log(r) then return end
  append(r, nil, kind, nil, type(payload) == "string" and payload or encode(payload))
end

---------------------------------------------------------------------------
-- the world's side: answers, deliveries, cancels (HTTP API, CLI, steps)

-- Append to the log of a run that is not in memory (no process drives it, or
-- it has not been resumed yet); `moor resume` replays it in order.
local function append_offline(run_id, op, kind, name, payload)
  local rows = core.query("SELECT coalesce(max(seq), 0) AS seq FROM events WHERE run_id=?", run_id)
  local ok, err = append_event(run_id, rows[1].seq + 1, op, kind, name, payload, now_ms())
  if not ok then error("cannot record event: " .. tostring(err), 0) end
end

local function api_error(status, code, message)
  return nil, status, code, message
end

-- An approval answer names the call it approves and the hash of the input
-- it showed: both required over the wire; a mismatch says nothing of what
-- the request expects. An in-process person channel (the terminal prompt,
-- moor_answer, a typed chat line) answers the request it shows: bound.
local function check_binding(req_id, ap, answer, bound)
  if bound then return true end
  local missing = {}
  if type(answer.callId) ~= "string" then missing[#missing + 1] = "callId" end
  if type(answer.inputHash) ~= "string" then missing[#missing + 1] = "inputHash" end
  if #missing > 0 then
    return api_error(400, "approval_unbound", ("'%s' is an approval: the answer must name its call; add %s "
      .. "(request.approval.callId and request.approval.inputHash, from GET /v1/inputs)"):format(req_id,
      table.concat(missing, " and ")))
  end
  if answer.callId ~= ap.callId or answer.inputHash ~= ap.inputHash then
    return api_error(409, "approval_mismatch", ("'%s' does not approve the call and input this answer names; "
      .. "read the request again (GET /v1/inputs) and answer what it shows"):format(req_id))
  end
  return true
end

--- Answer a pending question: answer = { optionId = ... } or { text = ... };
-- an approval's answer also carries { callId, inputHash } unless bound (an
-- in-process person channel showing the request). Returns true, or nil,
-- http_status, code, message.
function M.answer(req_id, answer, bound)
  local rows = core.query("SELECT * FROM inputs WHERE request_id=?", req_id)
  local row = rows and rows[1]
  if not row then
    return api_error(404, "not_found", ("unknown input request '%s'; GET /v1/inputs lists pending ones"):format(
      req_id))
  end
  if row.status ~= "pending" then
    return api_error(409, "already_resolved", ("input request '%s' is already %s"):format(req_id,
      row.status == "answered" and "answered" or "withdrawn (" .. row.status .. ")"))
  end
  if type(answer) ~= "table" then return api_error(400, "bad_request", "the answer must be a JSON object") end
  local option, text = answer.optionId, answer.text
  if (option == nil) == (text == nil) then
    return api_error(400, "bad_request", "answer with exactly one of optionId or text")
  end
  local req = decode(row.request)
  -- An approval is bound to its call: an answer that names another call or
  -- input (a stale or replayed approval) is refused. The hash compared is
  -- the one recorded with the request (older databases hold FNV-1a ones).
  if type(req.approval) == "table" then
    local bok, status, code, message = check_binding(req_id, req.approval, answer, bound)
    if not bok then return nil, status, code, message end
  end
  local options = type(req.options) == "table" and req.options or {}
  if option ~= nil then
    local found, ids = false, {}
    for _, o in ipairs(options) do
      ids[#ids + 1] = o.id
      if o.id == option then found = true end
    end
    if not found then
      return api_error(400, "invalid_option", ("option '%s' was never offered for '%s'; offered: %s"):format(
        tostring(option), req_id, #ids > 0 and table.concat(ids, ", ") or "none (answer with text)"))
    end
  else
    if type(text) ~= "string" then return api_error(400, "bad_request", "text must be a string") end
    if #options > 0 and not req.allowFreeform and req.display ~= "text" then
      return api_error(400, "freeform_not_allowed", ("'%s' does not allow free text; choose one of its options")
        :format(req_id))
    end
  end
  local payload = encode({ requestId = req_id, runId = row.run_id, outcome = "answered",
    optionId = option, text = text })
  core.exec("UPDATE inputs SET status='answered', answer=?, resolved=? WHERE request_id=?", payload, now_ms(),
    req_id)
  local r = runs[row.run_id]
  if r then
    complete(r, row.op, "input.resolved", "ask", payload)
  else
    append_offline(row.run_id, row.op, "input.resolved", "ask", payload)
  end
  local ok, err = commit()
  if not ok then return store_unavailable(err) end
  return true
end

--- A question as text for a terminal: the prompt, then numbered options.
function M.format_input(req_id)
  local rows = core.query("SELECT request FROM inputs WHERE request_id=?", req_id)
  if not rows or not rows[1] then return nil, ("unknown input request '%s'"):format(req_id) end
  local req = decode(rows[1].request)
  local out = { req.prompt }
  for i, o in ipairs(req.options or {}) do
    out[#out + 1] = ("  %d) %s [%s]%s"):format(i, o.label, o.id, o.description and (" - " .. o.description) or "")
  end
  local nopts = #(req.options or {})
  local free = nopts == 0 or req.allowFreeform or req.display == "text"
  out[#out + 1] = nopts > 0 and ("answer with a number or an option id" .. (free and ", or type text" or ""))
    or "type your answer"
  return table.concat(out, "\n")
end

--- Answer from a line a person typed at the terminal showing the request
-- (moor call's prompt, moor chat): an option's number, id or label, else free
-- text. A person channel, so an approval is bound to the request shown.
function M.answer_line(req_id, line)
  local rows = core.query("SELECT request FROM inputs WHERE request_id=?", req_id)
  if not rows or not rows[1] then return M.answer(req_id, { text = line }, true) end
  local req = decode(rows[1].request)
  line = line:gsub("^%s+", ""):gsub("%s+$", "")
  for i, o in ipairs(req.options or {}) do
    if line == tostring(i) or line == o.id or line:lower() == o.label:lower() then
      return M.answer(req_id, { optionId = o.id }, true)
    end
  end
  return M.answer(req_id, { text = line }, true)
end

-- The outermost session a run belongs to (its questions surface there), or nil.
local function root_session(run_id)
  local found
  for _ = 1, 64 do
    local rows = core.query("SELECT tool, parent_id FROM runs WHERE id=?", run_id)
    local row = rows and rows[1]
    if not row then break end
    if row.tool == "moor__session" then found = run_id end
    run_id = row.parent_id
    if not run_id then break end
  end
  return found
end

--- Pending questions: { { requestId, runId, sessionId?, request, created }, ... }
-- (sessionId: the outermost session whose stream shows the question).
function M.inputs()
  local rows = core.query("SELECT request_id, run_id, request, created FROM inputs WHERE status='pending' "
    .. "ORDER BY created, request_id")
  local out = {}
  for i, row in ipairs(rows) do
    out[i] = { requestId = row.request_id, runId = row.run_id, request = decode(row.request),
               created = row.created, sessionId = root_session(row.run_id) }
  end
  return json.array(out)
end

-- Record a run-level event (run.cancel, run.abort) and deliver it in log
-- order; a run not in memory gets it when it resumes.
local function signal_run(run_id, kind)
  local r = runs[run_id]
  local payload = encode({ requested = now_ms() })
  if r then
    local _, t = append(r, nil, kind, nil, payload)
    queue_delivery(r, { r, nil, kind, payload, t })
  else
    append_offline(run_id, nil, kind, nil, payload)
  end
end

--- Abort a running run's ctx.abortSignal without cancelling it (a session's
-- steering message). Returns true, or nil, http_status, code, message.
function M.steer(run_id)
  local rows = core.query("SELECT status FROM runs WHERE id=?", run_id)
  if not rows or not rows[1] then return api_error(404, "not_found", ("unknown run '%s'"):format(run_id)) end
  if rows[1].status ~= "running" then return true end
  signal_run(run_id, "run.abort")
  local ok, err = commit()
  if not ok then return store_unavailable(err) end
  return true
end

--- Cancel a run. Returns true, or nil, http_status, code, message.
function M.cancel(run_id)
  local rows = core.query("SELECT status, cancel_requested FROM runs WHERE id=?", run_id)
  if not rows or not rows[1] then return api_error(404, "not_found", ("unknown run '%s'"):format(run_id)) end
  if rows[1].status ~= "running" then
    return api_error(409, "already_settled", ("run '%s' is already %s"):format(run_id, rows[1].status))
  end
  if rows[1].cancel_requested == 1 then return true end -- logged once; it is on its way
  core.exec("UPDATE runs SET cancel_requested=1, updated=? WHERE id=?", now_ms(), run_id)
  signal_run(run_id, "run.cancel")
  local ok, err = commit()
  if not ok then return store_unavailable(err) end
  return true
end

--- Deliver to a hook or webhook. request: the payload (hooks) or
-- { method, headers, body, query } (webhooks). via: "webhook" (the webhook
-- route: webhook tokens only) or "hook" (POST /v1/hooks: hook tokens only,
-- never a session's inbox); nil from moor itself. Returns the hook's kind and
-- its respondWith (or nil), or nil, status (404, 429, ...), code, message.
function M.deliver(token, request, via)
  local rows = core.query("SELECT run_id, kind, respond, closed FROM hooks WHERE token=?", token)
  local h = rows and rows[1]
  if not h or h.closed ~= 0 or (via and h.kind ~= via)
      or (via and token == "session-" .. h.run_id) then -- session.lua's inbox: reached through /v1/sessions
    -- The same answer for unknown, closed and refused tokens reveals nothing.
    return api_error(404, "not_found", "no open hook or webhook has this token")
  end
  local payload, err = encode(request, 1024 * 1024 + 65536)
  if not payload then return api_error(400, "bad_request", err) end
  local r = runs[h.run_id]
  local q = r and r.hook_waiting[token]
  local waiting = queued_for(token)
  if not (q and q[1]) and (waiting.n >= MAX_QUEUED or waiting.bytes + #payload > MAX_QUEUED_BYTES) then
    return api_error(429, "too_many_deliveries", ("this %s already has %d deliveries (%.1f MiB) waiting for its run to "
      .. "take them, and takes at most %d or %d MiB: retry later"):format(h.kind, waiting.n,
        waiting.bytes / 1048576, MAX_QUEUED, MAX_QUEUED_BYTES // 1048576))
  end
  local nrow = core.query("SELECT coalesce(max(n), 0) AS n FROM deliveries WHERE token=?", token)
  core.exec("INSERT INTO deliveries(token, n, run_id, payload, time) VALUES(?,?,?,?,?)", token, nrow[1].n + 1,
    h.run_id, payload, now_ms())
  local op = q and table.remove(q, 1)
  if q and #q == 0 then r.hook_waiting[token] = nil end
  if op then
    core.exec("UPDATE deliveries SET consumed=1 WHERE token=? AND n=?", token, nrow[1].n + 1)
    complete(r, op, "hook.received", "await", payload)
  end
  local ok, cerr = commit()
  if not ok then
    queued[token] = nil -- counted again from the database next time
    return store_unavailable(cerr)
  end
  if not op then waiting.n, waiting.bytes = waiting.n + 1, waiting.bytes + #payload end
  return h.kind, h.respond and decode(h.respond) or nil
end

--- A run's row as the API shows it.
function M.run_details(id)
  local rows = core.query("SELECT id, tool, status, call_id, result, error, started, updated, cancel_requested "
    .. "FROM runs WHERE id=?", id)
  local row = rows and rows[1]
  if not row then return nil end
  return {
    id = row.id, tool = row.tool, status = row.status, callId = row.call_id,
    result = row.result and decode(row.result) or nil, error = row.error and decode(row.error) or nil,
    started = iso(row.started), updated = iso(row.updated), cancelRequested = row.cancel_requested == 1,
  }
end

--- Subscribe to committed events: fn(run_id, seq, kind, name, payload, time, op),
-- op as the log records it (nil for run-level events).
local subscribers = {}
function M.subscribe(fn)
  subscribers[#subscribers + 1] = fn
  return function()
    for i, f in ipairs(subscribers) do
      if f == fn then table.remove(subscribers, i) return end
    end
  end
end
M._subscribers = subscribers
flush_subscribers = function(e)
  for _, fn in ipairs(subscribers) do fn(e[1], e[2], e[3], e[4], e[5], e[6], e[7]) end
end

--- HTTP (host/moor.c calls these while moor_listen'd; lua/moor/http.lua routes).
function M.http_request(req) return require("moor.http").handle(req) end
function M.http_closed(conn) return require("moor.http").closed(conn) end
-- $MOOR_PUBLIC_URL (scheme://host[:port], e.g. a tunnel's or proxy's
-- address) is the base of webhook URLs and a Host the API answers to.
-- Returns nil, or a message when it is malformed.
function M.serving(url)
  local http = require "moor.http"
  local public = os.getenv("MOOR_PUBLIC_URL")
  if public == "" then public = nil end
  if public and not http.split_origin(public) then
    return ("MOOR_PUBLIC_URL must be http(s)://host[:port] with no path, not '%s'"):format(public)
  end
  M.public_url = public and public:gsub("/$", "") or url
  http.configure { url = url, token = os.getenv("MOOR_API_TOKEN"), public_url = public }
end

--- Sessions from the C API (moor_session_start / moor_session_send).
function M.session_start(message)
  local session = require "moor.session"
  if not M.tools[session.TOOL] then return nil, "this agent has no agent.lua, so it cannot hold sessions" end
  return session.create(message)
end

function M.session_send(id, body)
  return require("moor.session").send(id, body)
end

function M.session_line(id, line)
  return require("moor.session").line(id, line)
end

--- One readable line for a terminal channel (moor chat), or nil.
function M.format_event(run_id, kind, payload)
  local p = decode(payload) or {}
  if kind == "message.completed" then return "agent: " .. tostring(p.text) end
  if kind == "action.started" then
    return ("  -> %s %s"):format(p.toolName, encode(p.input))
  elseif kind == "action.result" then
    if p.denied then return ("  <- %s: denied"):format(p.toolName) end
    if p.isError then return ("  <- %s failed: %s"):format(p.toolName, tostring(p.error)) end
    local out = encode(p.output) or ""
    if #out > 200 then out = out:sub(1, 200) .. "..." end
    return ("  <- %s: %s"):format(p.toolName, out)
  elseif kind == "action.partial" then
    return ("  .. %s"):format(encode(p.output))
  elseif kind == "turn.failed" then
    return ("turn failed: %s"):format(p.error and p.error.message or "?")
  elseif kind == "agent.started" then
    return ("  (agent %s joined)"):format(p.name)
  elseif kind == "input.resolved" and p.outcome == "cancelled" then
    return "  (question withdrawn)"
  end
  return nil, run_id
end

function M.run_tests(args)
  return require("moor.testrunner").run(args)
end

function M.shutdown()
  local ok, err = commit()
  if not ok then error("cannot commit the last writes: " .. tostring(err), 0) end
end

function M.stats()
  M.compact_timers()
  return { runs = nruns, timers = nheap }
end

function M.run_status(id)
  local r = runs[id]
  if r then return r.status end
  local rows = core.query("SELECT status FROM runs WHERE id=?", id)
  return rows and rows[1] and rows[1].status
end

require("moor.fence").install(M)
signals.install(M)

return M
