--- Runs' lifecycle: creating a run (call), starting its body, ending it
-- (completed, failed, cancelled: the result checked and recorded, its waits
-- released, its parent told), cancelling and steering it, and child runs (a
-- body starts a tool as its own run and parks until it settles).
-- The world's entry points here return true, or nil and err = { code, message }.
local store = require "moor.store"
local core = require "moor.core"
local clock = require "moor.clock"
local json = require "moor.json"
local errors = require "moor.errors"
local schema = require "moor.schema"
local conf = require "moor.conf"
local log = require "moor.engine.log"
local sched = require "moor.engine.sched"
local timers = require "moor.engine.timers"
local waits = require "moor.engine.waits"
local auth = require "moor.engine.auth"
local signals = require "moor.signal"
local S = require "moor.engine.state"

local M = {}

local co_status, co_close = coroutine.status, coroutine.close
local encode, decode = json.encode, json.decode
local now_ms = clock.now
local append, complete, ready = log.append, sched.complete, sched.ready

M.TOO_LARGE = "; return a summary, or write the data to a file and return its path "
  .. "(or raise the limit with $MOOR_MAX_RESULT)"

--- Close the run's parked threads with coroutine.close: their pending
-- to-be-closed variables run now, once, outside the scheduler, so they cannot
-- wait: a step or op there raises `why`. Returns the first error one raised.
function M.close_threads(r, why)
  local first
  local saved_run, saved_body, saved_closing = S.current_run, S.in_body, S.closing
  S.current_run, S.in_body, S.closing = r, true, why
  for _, th in ipairs(r.threads) do
    if not th.dead and co_status(th.co) == "suspended" then
      th.dead = true
      local ok, err = co_close(th.co)
      if not ok and first == nil then first = err end
    end
    th.dead = true
  end
  S.current_run, S.in_body, S.closing = saved_run, saved_body, saved_closing
  return first
end

local function settled_payload(row)
  return encode({ runId = row.id, status = row.status,
    result = row.result and decode(row.result) or nil, error = row.error and decode(row.error) or nil })
end

-- A child settled: the parent parked on it gets its outcome.
local function notify_parent(child)
  local p = S.runs[child.parent_id]
  if not p then return S.wake(child.parent_id) end -- (evicted: it looks the child up when it awaits it again)
  local op = p.child_waiting[child.id]
  if not op then return end -- the parent looks the run up when it awaits it
  p.child_waiting[child.id] = nil
  complete(p, op, "child.settled", "await", settled_payload(store.run(child.id)))
end

-- A task's run ended: its session learns it through its inbox, in the
-- same commit as the run's end and after every message the task posted
-- (seed 003 §4: drained before the completion is reported).
local function report_task(r, status, outcome)
  local s = r.session
  if not (s and s.taskId and s.inbox) then return end
  local v = outcome and decode(outcome)
  waits.post(s.inbox, { task = { kind = "settled", taskId = s.taskId, runId = r.id, status = status,
    result = status == "completed" and v or nil, error = status ~= "completed" and v or nil } })
end

--- The run's body is over (or it is dropped from memory: status "running");
-- outcome: the result or error JSON it ended with.
function M.end_run(r, status, outcome)
  r.settled = true
  r.status = status
  if status == "running" then
    -- Dropped from memory to be replayed (t.restart): not ended, so no
    -- cleanup runs and nobody is told it settled.
    return S.drop(r)
  end
  if r.parent_id then notify_parent(r) end
  report_task(r, status, outcome)
  -- A run that ends takes the runs it started with it (an agent's session).
  if not r.fresh or store.holds(r.id) then -- (else: started here, and it started no run)
    for _, k in ipairs(store.running_children(r.id) or {}) do M.cancel(k.id) end
  end
  M.close_threads(r, "the run has ended") -- branches still parked (a lost race)
  S.drop(r)
  for _, fn in ipairs(S.on_end) do fn(r.id) end -- (what a run holds outside the engine: harness agents)
end

--- End run r: ok and the body's value, or false and what it raised.
function M.finish_run(r, ok, v)
  if r.settled then return end
  if not ok and r.tool.locate then v = r.tool.locate(v) end -- (moor._bind: the error as written)
  waits.release(r)
  auth.release(r) -- (its sign-ins still waiting: their verifiers go)
  if r.cancelling then
    -- After a cancel the result is discarded, whatever the body did.
    local e = not ok and errors.normalize(v) or nil
    local text = encode({ code = "Cancelled", message = r.cancel_reason or "the run was cancelled",
      cleanupError = e and e.code ~= "Cancelled" and e or nil })
    append(r, nil, "run.cancelled", r.tool_name, text)
    store.fail_run(r.id, "cancelled", text, now_ms())
    return M.end_run(r, "cancelled", text)
  end
  if ok then
    if v == nil then v = r.last_progress end
    if v == nil then v = json.null end
    local text, err, kind = encode(v, conf.MAX_RESULT, "result")
    if text and r.tool.outputSchema then
      local vok, verr = schema.validate(r.tool.outputSchema, decode(text), "result")
      if not vok then text, err, kind = nil, "the result does not match outputSchema: " .. verr, "schema" end
    end
    if text then
      append(r, nil, "run.completed", r.tool_name, text)
      store.complete_run(r.id, text, now_ms())
      return M.end_run(r, "completed", text)
    end
    if kind == "size" then
      err = err .. M.TOO_LARGE
    end
    v = errors.new(kind == "size" and "ResultTooLarge" or "InvalidResult", err)
  end
  local e = errors.normalize(v)
  local text = encode({ code = e.code, message = e.message })
  -- The log keeps where a tool's error(msg) was raised (moor logs); the run's
  -- error (the API, a parent session's model) is the message as written.
  append(r, nil, "run.failed", r.tool_name, e.where and encode({ code = e.code, message = e.message,
    where = e.where }) or text)
  store.fail_run(r.id, "failed", text, now_ms())
  M.end_run(r, "failed", text)
end

--- A cancel reaches the run (live, or replayed at its place in the log): abort
-- ctx.abortSignal, raise moor.Cancelled at every op a branch is parked on,
-- and give cleanup a grace period before the run ends as cancelled.
function M.apply_cancel(r)
  if r.cancelling or r.settled then return end
  r.cancelling = true
  local ops = {}
  for n in pairs(r.waiters) do ops[#ops + 1] = n end
  table.sort(ops) -- a fixed order, so replay wakes the branches the same way
  for _, n in ipairs(ops) do
    local th = r.waiters[n]
    r.waiters[n] = nil
    waits.withdraw(r, n, false)
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
  -- A thread paused by moor.pause (a computing workflow program) is told
  -- when it goes on, as a parked op would be now.
  for _, th in ipairs(S.later) do
    if th.run == r then th.pause_cancelled = true end
  end
  -- After the parked ops: the signal's questions were withdrawn above.
  waits.abort(r.signal, "cancelled")
  timers.add(r, now_ms() + conf.CANCEL_GRACE, function()
    if r.settled then return end
    r.cancel_reason = ("the run was cancelled; cleanup did not finish within the %d s grace period"):format(
      conf.CANCEL_GRACE // 1000)
    -- What cleanup is still pending runs now, without steps (see close_threads).
    local cerr = M.close_threads(r, "the cancel grace period is over")
    M.finish_run(r, false, cerr ~= nil and cerr or errors.Cancelled(r.cancel_reason)) -- cerr: the cleanupError
  end)
end

--- xorshift64*: math.random in a body is seeded per run, so replay draws the
-- same numbers.
function M.random(r)
  local x = r.rng
  x = x ~ (x >> 12)
  x = x ~ (x << 25)
  x = x ~ (x >> 27)
  r.rng = x
  return x * 2685821657736338717
end

--- A run in memory from its row (not yet started).
function M.new_run(row, tool)
  local r = {
    id = row.id, tool_name = row.tool, tool = tool, call_id = row.call_id,
    seq = 0, nops = 0, max_op = 0, nready = 0,
    started = row.started, now = row.started,
    recorded = {}, waiters = {}, threads = {}, versions = {},
    replay = {}, rpos = 1, nreplay = 0, deferred = {},
    asks = {}, hook_ops = {}, hook_waiting = {}, channel = row.channel or "default",
    parent_id = row.parent_id, child_waiting = {},
    rng = (row.seed ~= 0 and row.seed or 0x9E3779B97F4A7C15),
    status = "running",
  }
  r.session = row.session -- (not in the constructor: a slot in every run)
  return r
end

--- Start r's body. It gets the run's facts, from which the authoring API
-- (lua/moor/authoring/define.lua, moor._bind: tool.ctx) builds the ctx the tool sees:
-- { callId, toolName, runId, abortSignal, session = { id?, turnId?, principal? } }.
function M.start_main(r, input)
  r.signal = signals.new()
  local facts = {
    callId = r.call_id, toolName = r.tool_name, runId = r.id, abortSignal = r.signal,
    -- The session whose tool call this run serves: { id, turnId }; outside
    -- one, the ctx gives {} on first use.
    session = r.session and { id = r.session.id, turnId = r.session.turnId, principal = r.session.principal },
  }
  local tool = r.tool
  -- A task's body gets its task (seed 003 §3.1: { taskId, postMessage }) third.
  local task = tool.task
  if task then task = task(r.session and r.session.taskId) end
  r.main = sched.new_thread(r, tool.body, input, tool.ctx and tool.ctx(facts) or facts, task)
  S.runs[r.id] = r
  S.nruns = S.nruns + 1
  ready(r.main, nil)
end

--- Task ids: `<tool>-` and 6 characters of Crockford's base 32 in lower
-- case (seed 000: deploy-4hd8sa).
M.TASK_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
function M.task_id(tool_name, rand)
  rand = rand or function(n) return core.random_bytes(1):byte() % n + 1 end
  local out = {}
  for i = 1, 6 do
    local k = rand(32)
    out[i] = M.TASK_ALPHABET:sub(k, k)
  end
  return tool_name .. "-" .. table.concat(out)
end

-- An id: the prefix, the time in ms (11 hex digits) and 6 random bytes in hex
-- (rand: 6 bytes or more of core.random_bytes, from offset at).
local HEX = {} -- (byte -> two hex digits: string.format's %02x is a snprintf a byte)
for b = 0, 255 do HEX[b] = ("%02x"):format(b) end
local function new_id(prefix, rand, at)
  local b1, b2, b3, b4, b5, b6 = rand:byte(at, at + 5)
  return prefix .. ("%011x"):format(now_ms()) .. HEX[b1] .. HEX[b2] .. HEX[b3] .. HEX[b4] .. HEX[b5] .. HEX[b6]
end

--- Start a run of tool `name` with input (JSON text or a value). opts:
-- { noInput, callId, parent, parentOp, session, setup(id) }. Returns the
-- run id and call id, or nil, message, code ("unknown", "json", "input",
-- "store": host/error.c maps "unknown", "json" and "input"; a child.started error
-- records them).
function M.call(name, input_json, opts)
  local tool = S.tools[name]
  if not tool then
    local names = {}
    for k in pairs(S.tools) do
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
  opts = opts or {}
  local session = opts.session
  if tool.shape and tool.shape.lifetime == "task" and not (session and session.taskId) then
    -- A task called on its own (moor call, POST /v1/tools): it still has an id.
    session = { id = session and session.id, turnId = session and session.turnId,
      principal = session and session.principal, taskId = M.task_id(name) }
  end
  local rand = core.random_bytes(20) -- (one read of the kernel's CSPRNG: both ids and the seed)
  local row = { id = new_id("run_", rand, 1), tool = name, entry = tool.entry, input = text,
                call_id = opts.callId or new_id("call_", rand, 7), source_hash = tool.source_hash,
                seed = string.unpack("<i8", rand, 13), started = now_ms(),
                channel = opts.noInput and "none" or "default", parent_id = opts.parent, parent_op = opts.parentOp,
                session = session }
  local inserted, e = store.insert_run(row)
  if not inserted then return nil, e, "store" end
  local r = M.new_run(row, tool)
  r.fresh = true -- (its rows are this process's alone: store.holds tells what it holds)
  -- (the input as the row has it, not decoded and encoded again: the encoder
  -- sorts keys, so this is the text encode({ callId, input, parentId, session }) gives)
  append(r, nil, "run.started", name, '{"callId":' .. encode(row.call_id) .. ',"input":' .. text
    .. (opts.parent and (',"parentId":' .. encode(opts.parent)) or "")
    .. (session and (',"session":' .. encode(session)) or "") .. "}")
  if session and session.taskId and not session.inbox then
    -- No session takes its result: its own stream shows the receipt (moor call prints it).
    -- (the words of moor.session.tasktext's receipt; tasks_spec checks they agree)
    append(r, nil, "task.started", name, encode({ taskId = session.taskId, callId = row.call_id, name = name,
      kind = tool.entry == "serve" and "serve" or (tool.shape.suspend == "none" and "background" or "task"),
      receipt = ("Started task %s. Its result will arrive in a <task_result> message."):format(session.taskId) }))
  end
  if opts.setup then opts.setup(row.id) end
  -- The run is durable before its id is handed out.
  local cok, cerr = log.commit()
  if not cok then return nil, cerr, "store" end
  M.start_main(r, decode(text))
  return row.id, row.call_id
end

--- Op: start a child run (spec = { tool, input, callId?, setup?, session? }).
function M.start_child(r, n, spec)
  -- A crash between the child's commit and this op's result: reuse the run.
  local existing = store.child_of(r.id, n)
  if existing then
    return complete(r, n, "child.started", spec.tool, encode({ runId = existing }))
  end
  local id, err, code = M.call(spec.tool, encode(spec.input == nil and {} or spec.input),
    { parent = r.id, parentOp = n, callId = spec.callId, noInput = r.channel == "none", setup = spec.setup,
      session = spec.session })
  if not id then
    return complete(r, n, "child.started", spec.tool, encode({ error = { code = code, message = err } }))
  end
  complete(r, n, "child.started", spec.tool, encode({ runId = id }))
end

--- Op: park until child run child_id settles.
function M.await_child(r, n, child_id)
  local row = store.run(child_id)
  if not row then
    return complete(r, n, "child.settled", "await", encode({ runId = child_id, status = "failed",
      error = { code = "NotFound", message = "unknown run " .. tostring(child_id) } }))
  end
  if row.status ~= "running" then return complete(r, n, "child.settled", "await", settled_payload(row)) end
  sched.mark_waiting(r, n, "child.waiting", "await", encode({ runId = child_id }))
  r.child_waiting[child_id] = n
end

-- Record a run-level event (run.cancel, run.abort) and deliver it in log
-- order; a run not in memory gets it when it resumes. Returns true then.
local function signal_run(run_id, kind)
  local r = S.runs[run_id]
  local payload = encode({ requested = now_ms() })
  if r then
    local _, t = append(r, nil, kind, nil, payload)
    sched.queue_delivery(r, { r, nil, kind, payload, t })
  else
    log.append_offline(run_id, nil, kind, nil, payload)
    return true
  end
end

--- Abort a running run's ctx.abortSignal without cancelling it (a session's
-- steering message). Returns true, or nil, err.
function M.steer(run_id)
  local row = store.run(run_id)
  if not row then return errors.fail("not_found", ("unknown run '%s'"):format(run_id)) end
  if row.status ~= "running" then return true end
  local offline = signal_run(run_id, "run.abort")
  local ok, err = log.commit()
  if not ok then return errors.store_unavailable(err) end
  if offline then S.wake(run_id) end -- (an evicted run replays it from its log)
  return true
end

--- Cancel a run. Returns true, or nil, err.
function M.cancel(run_id)
  local row = store.run(run_id)
  if not row then return errors.fail("not_found", ("unknown run '%s'"):format(run_id)) end
  if row.status ~= "running" then
    return errors.fail("already_settled", ("run '%s' is already %s"):format(run_id, row.status))
  end
  if row.cancel_requested == 1 then return true end -- logged once; it is on its way
  store.request_cancel(run_id, now_ms())
  local offline = signal_run(run_id, "run.cancel")
  local ok, err = log.commit()
  if not ok then return errors.store_unavailable(err) end
  if offline then S.wake(run_id) end -- (an evicted run replays it from its log)
  return true
end

return M
