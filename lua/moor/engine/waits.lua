--- What a run waits on from the world: questions (ctx.ask), hooks and
-- webhooks with their queued deliveries, and abort signals. Both sides live
-- here: the ops a body parks on (start_ask, create_hook, await_hook) and the
-- world's answers to them (answer, deliver; the HTTP API, the CLI, steps),
-- which return true, or nil and err = { code, message } (moor.errors.fail).
local store = require "moor.store"
local core = require "moor.core"
local clock = require "moor.clock"
local json = require "moor.json"
local errors = require "moor.errors"
local conf = require "moor.conf"
local base64url = require "moor.base64url"
local log = require "moor.engine.log"
local sched = require "moor.engine.sched"
local S = require "moor.engine.state"

local M = {}

local encode, decode = json.encode, json.decode
local now_ms = clock.now
local append, complete, fail = log.append, sched.complete, errors.fail

local function request_id(r, n)
  return "req_" .. r.id:sub(5) .. "_" .. n
end

--- Withdraw the question of op n: resolved as cancelled unless an answer was
-- recorded first. as_result: the body is still waiting, so the withdrawal is
-- its op's result; otherwise (the run is cancelled or ends) it is only news.
function M.withdraw(r, n, as_result)
  local ask = r.asks[n]
  if not ask then return end
  r.asks[n] = nil
  if not store.withdraw_input(ask.requestId, now_ms()) then return end
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
    if not r.settled and r.waiters[n] and not (rec and rec.done) then M.withdraw(r, n, true) end
  end
  local listeners = signal._listeners
  signal._listeners = nil
  for _, fn in ipairs(listeners or {}) do fn(reason) end
  -- A signal is a future too (moor.signal): its waiters wake with the reason.
  if signal.done == false then sched.settle_future(signal, true, reason) end
end

--- 32 random bytes, base64url without padding (43 characters): unguessable
-- webhook URLs.
function M.random_token() return base64url.encode(core.random_bytes(32)) end

-- Deliveries recorded for a token but not yet taken by its run are capped
-- (conf.MAX_QUEUED, conf.MAX_QUEUED_BYTES), so a sender cannot grow the
-- database while the run waits elsewhere.
local queued = {} -- token -> { n, bytes }: counted from the database once, then kept
local queued_at = 0 -- S.discards when those counts were taken: a failed commit makes them stale

-- Returns the count, and the token's last delivery number when it was read
-- with it (one query, not two, for a token's first delivery).
local function queued_for(token)
  if queued_at ~= S.discards then queued, queued_at = {}, S.discards end
  local q = queued[token]
  if q then return q end
  local n, bytes, last = store.queued(token)
  q = { n = n, bytes = bytes }
  queued[token] = q
  return q, last
end

-- The next delivery for token that the body has not seen, consumed now.
local function take_delivery(token)
  local d = store.next_delivery(token)
  if not d then return nil end
  store.consume_delivery(token, d.n)
  local q = queued[token]
  if q then q.n, q.bytes = q.n - 1, q.bytes - #d.payload end
  return d.payload
end

--- Op: ask a person (spec = { request, signals }); rec: the op's record when
-- the log already holds the question.
function M.start_ask(r, n, spec, rec)
  if r.channel == "none" and not rec then
    return complete(r, n, "input.resolved", "ask",
      encode({ requestId = request_id(r, n), runId = r.id, outcome = "unavailable" }))
  end
  local id = request_id(r, n)
  r.asks[n] = { requestId = id }
  if not rec then
    local text = encode(spec.request)
    -- (spec.callId: the call a serve body is serving, seed 000 "Resumable tasks")
    append(r, n, "input.requested", "ask", encode({ requestId = id, runId = r.id,
      callId = spec.callId or r.call_id, toolName = r.tool_name, request = spec.request }))
    store.insert_input(id, r.id, n, text, now_ms())
    r.recorded[n] = { kind = "ask", name = "ask" }
  end
  for _, sig in ipairs(spec.signals) do
    if sig.aborted then return M.withdraw(r, n, true) end
    sig._asks = sig._asks or {}
    sig._asks[#sig._asks + 1] = { r, n }
  end
end

--- Op: create a hook or webhook (spec = { kind, token?, respondWith? }).
function M.create_hook(r, n, spec)
  local token = spec.token or M.random_token()
  local h = store.hook(token)
  if h then
    if h.run_id ~= r.id then
      return complete(r, n, "hook.created", spec.kind, encode({ error = ("token '%s' is already used by run %s")
        :format(token, h.run_id) }))
    end
  else
    store.insert_hook(token, r.id, spec.kind, spec.respondWith and encode(spec.respondWith) or nil, now_ms())
  end
  local p = { token = token, kind = spec.kind }
  if spec.kind == "webhook" then p.url = conf.public_url .. "/.well-known/workflow/v1/webhook/" .. token end
  complete(r, n, "hook.created", spec.kind, encode(p))
end

--- Op: the next delivery to token (queued, or the next to come).
function M.await_hook(r, n, token)
  local payload = take_delivery(token)
  if payload then return complete(r, n, "hook.received", "await", payload) end
  sched.mark_waiting(r, n, "hook.waiting", "await", encode({ token = token }))
  local q = r.hook_waiting[token]
  if not q then q = {}; r.hook_waiting[token] = q end
  q[#q + 1] = n -- several branches may await one hook: first come, first served
end

--- Op: the next delivery to token if one is queued now, else none; never
-- parks (hook:poll()). Recorded like any op, so replay gives the same.
function M.poll_hook(r, n, token)
  local payload = take_delivery(token)
  complete(r, n, "hook.polled", "poll", payload and ('{"delivery":' .. payload .. "}") or "{}")
end

--- A run that ends withdraws its questions and closes its hooks (their
-- deliveries get 404 from now on).
function M.release(r)
  if r.fresh and not store.holds(r.id) then return end -- (started here, and asked and hooked nothing)
  for _, row in ipairs(store.withdraw_run_inputs(r.id, now_ms()) or {}) do
    append(r, nil, "input.resolved", "ask", encode({ requestId = row.request_id, runId = r.id, outcome = "cancelled" }))
  end
  for _, row in ipairs(store.close_hooks(r.id) or {}) do queued[row.token] = nil end
end

---------------------------------------------------------------------------
-- the world's side

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
    return fail("approval_unbound", ("'%s' is an approval: the answer must name its call; add %s "
      .. "(request.approval.callId and request.approval.inputHash, from GET /v1/inputs)"):format(req_id,
      table.concat(missing, " and ")))
  end
  if answer.callId ~= ap.callId or answer.inputHash ~= ap.inputHash then
    return fail("approval_mismatch", ("'%s' does not approve the call and input this answer names; "
      .. "read the request again (GET /v1/inputs) and answer what it shows"):format(req_id))
  end
  return true
end

-- Is answer one the request takes? true, or nil and err.
local function check_answer(req_id, req, answer)
  local option, text = answer.optionId, answer.text
  local options = type(req.options) == "table" and req.options or {}
  if option ~= nil then
    local ids = {}
    for _, o in ipairs(options) do
      ids[#ids + 1] = o.id
      if o.id == option then return true end
    end
    return fail("invalid_option", ("option '%s' was never offered for '%s'; offered: %s"):format(
      tostring(option), req_id, #ids > 0 and table.concat(ids, ", ") or "none (answer with text)"))
  end
  if type(text) ~= "string" then return fail("bad_request", "text must be a string") end
  if #options > 0 and not req.allowFreeform and req.display ~= "text" then
    return fail("freeform_not_allowed", ("'%s' does not allow free text; choose one of its options")
      :format(req_id))
  end
  return true
end

--- Answer a pending question: answer = { optionId = ... } or { text = ... };
-- an approval's answer also carries { callId, inputHash } unless bound (an
-- in-process person channel showing the request). Returns true, or nil, err.
function M.answer(req_id, answer, bound)
  local row = store.input(req_id)
  if not row then
    return fail("not_found", ("unknown input request '%s'; GET /v1/inputs lists pending ones"):format(req_id))
  end
  if row.status ~= "pending" then
    return fail("already_resolved", ("input request '%s' is already %s"):format(req_id,
      row.status == "answered" and "answered" or "withdrawn (" .. row.status .. ")"))
  end
  if type(answer) ~= "table" then return fail("bad_request", "the answer must be a JSON object") end
  if (answer.optionId == nil) == (answer.text == nil) then
    return fail("bad_request", "answer with exactly one of optionId or text")
  end
  local req = decode(row.request)
  if req.kind == "authorization" then
    return fail("bad_request", ("input request '%s' is a sign-in: open its authorization.url in a browser; the "
      .. "provider's callback answers it"):format(req_id))
  end
  -- An approval is bound to its call: an answer that names another call or
  -- input (a stale or replayed approval) is refused. The hash compared is
  -- the one recorded with the request (older databases hold FNV-1a ones).
  if type(req.approval) == "table" then
    local ok, err = check_binding(req_id, req.approval, answer, bound)
    if not ok then return errors.relay(err) end
  end
  local ok, err = check_answer(req_id, req, answer)
  if not ok then return errors.relay(err) end
  local payload = encode({ requestId = req_id, runId = row.run_id, outcome = "answered",
    optionId = answer.optionId, text = answer.text })
  store.answer_input(req_id, payload, now_ms())
  local r = S.runs[row.run_id]
  if r then
    complete(r, row.op, "input.resolved", "ask", payload)
  else
    log.append_offline(row.run_id, row.op, "input.resolved", "ask", payload)
  end
  local cok, cerr = log.commit()
  if not cok then return errors.store_unavailable(cerr) end
  if not r then S.wake(row.run_id) end -- (an evicted run replays the answer from its log)
  return true
end

--- Withdraw a pending question from the world's side (an MCP client
-- declined or cancelled its elicitation): resolved as cancelled, as when its
-- run withdraws it. Returns true, or nil, err.
function M.withdraw_input(req_id)
  local row = store.input(req_id)
  if not row then return fail("not_found", ("unknown input request '%s'"):format(req_id)) end
  if row.status ~= "pending" then
    return fail("already_resolved", ("input request '%s' is already %s"):format(req_id, row.status))
  end
  local r = S.runs[row.run_id]
  if r and r.asks[row.op] then
    M.withdraw(r, row.op, true)
  elseif store.withdraw_input(req_id, now_ms()) then
    log.append_offline(row.run_id, row.op, "input.resolved", "ask",
      encode({ requestId = req_id, runId = row.run_id, outcome = "cancelled" }))
  end
  local cok, cerr = log.commit()
  if not cok then return errors.store_unavailable(cerr) end
  return true
end

--- A question as text for a terminal: the prompt, then numbered options.
function M.format_input(req_id)
  local row = store.input(req_id)
  if not row then return nil, ("unknown input request '%s'"):format(req_id) end
  local req = decode(row.request)
  if req.kind == "authorization" and type(req.authorization) == "table" then
    return ("Sign in to %s (%s): open %s\nThe tool goes on by itself once you have."):format(tostring(req.name),
      tostring(req.description), tostring(req.authorization.url))
  end
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
  local row = store.input(req_id)
  if not row then return M.answer(req_id, { text = line }, true) end
  local req = decode(row.request)
  line = line:gsub("^%s+", ""):gsub("%s+$", "")
  for i, o in ipairs(req.options or {}) do
    if line == tostring(i) or line == o.id or line:lower() == o.label:lower() then
      return M.answer(req_id, { optionId = o.id }, true)
    end
  end
  return M.answer(req_id, { text = line }, true)
end

-- The outermost session a run belongs to (its questions surface there), or nil.
local function root_session(run_id, tool, parent_id)
  local found = tool == "moor__session" and run_id or nil
  run_id = parent_id
  for _ = 1, conf.SESSION_DEPTH do
    if not run_id then break end
    local row = store.run(run_id)
    if not row then break end
    if row.tool == "moor__session" then found = run_id end
    run_id = row.parent_id
  end
  return found
end

--- Pending questions: { { requestId, runId, sessionId?, request, created }, ... }
-- (sessionId: the outermost session whose stream shows the question).
function M.inputs()
  -- The asking runs that are sessions or have a parent; the others (most, as
  -- moor call's) belong to no session, and cost no query each.
  local linked = {}
  for _, run in ipairs(store.linked_askers() or {}) do linked[run.id] = run end
  local out = {}
  for i, row in ipairs(store.pending_inputs()) do
    -- (sessionId set apart, only when there is one: four fields fill a table's four slots)
    local o = { requestId = row.request_id, runId = row.run_id, request = decode(row.request), created = row.created }
    local run = linked[row.run_id]
    if run then o.sessionId = root_session(run.id, run.tool, run.parent_id) end
    out[i] = o
  end
  return json.array(out)
end

-- Record a delivery for hook row h and hand it to the branch waiting on
-- the hook, if one is (first come, first served); else it queues.
local function insert_delivery(h, token, payload, last)
  local r = S.runs[h.run_id]
  local q = r and r.hook_waiting[token]
  local dn = store.insert_delivery(token, h.run_id, payload, now_ms(), last)
  if not r then S.wake(h.run_id) end -- (an evicted run takes it when its replayed body awaits the hook)
  local op = q and table.remove(q, 1)
  if q and #q == 0 then r.hook_waiting[token] = nil end
  if op then
    store.consume_delivery(token, dn)
    complete(r, op, "hook.received", "await", payload)
  end
  return op ~= nil
end

--- moor's own delivery to a hook (a task's report to its session's inbox):
-- no caps and no commit (it joins the caller's group commit). Returns true,
-- or false when the hook is closed or unknown.
function M.post(token, request)
  local h = store.hook(token)
  if not h or h.closed ~= 0 then return false end
  if not insert_delivery(h, token, encode(request)) then queued[token] = nil end -- (its count is read again)
  return true
end

--- A task's message to its session (task.postMessage; seed 003 §4): posted
-- to the session's inbox with a delivery id, so a step that runs again
-- after a crash posts nothing new. Returns whether a session took it.
function M.post_task_message(r, msg, delivery_id)
  local s = r.session
  if not (s and s.inbox) then return false end
  return M.post(s.inbox, { task = { kind = "message", taskId = s.taskId, runId = r.id, message = msg.message,
    deliveryId = delivery_id } })
end

--- Deliver to a hook or webhook. request: the payload (hooks) or
-- { method, headers, body, query } (webhooks). via: "webhook" (the webhook
-- route: webhook tokens only) or "hook" (POST /v1/hooks: hook tokens only,
-- never a session's inbox); nil from moor itself. Returns the hook's kind and
-- its respondWith (or nil), or nil, err (not_found, too_many_deliveries, ...).
function M.deliver(token, request, via)
  local h = store.hook(token)
  if not h or h.closed ~= 0 or (via and h.kind ~= via)
      -- a session's inbox (authoring/agent.lua): reached through /v1/sessions only;
      -- a serve task's calls (authoring/serve.lua): through its session only
      or (via and (token == "session-" .. h.run_id or token == "task-" .. h.run_id)) then
    -- The same answer for unknown, closed and refused tokens reveals nothing.
    return fail("not_found", "no open hook or webhook has this token")
  end
  local payload, err = encode(request, conf.MAX_DELIVERY)
  if not payload then return fail("bad_request", err) end
  local r = S.runs[h.run_id]
  local q = r and r.hook_waiting[token]
  -- Counted only for a delivery that will queue (a waiting run takes it now:
  -- a session's next message costs no count query).
  local waiting, last
  if not (q and q[1]) then waiting, last = queued_for(token) end
  if waiting and (waiting.n >= conf.MAX_QUEUED or waiting.bytes + #payload > conf.MAX_QUEUED_BYTES) then
    return fail("too_many_deliveries", ("this %s already has %d deliveries (%.1f MiB) waiting for its run to "
      .. "take them, and takes at most %d or %d MiB: retry later"):format(h.kind, waiting.n,
        waiting.bytes / 1048576, conf.MAX_QUEUED, conf.MAX_QUEUED_BYTES // 1048576))
  end
  insert_delivery(h, token, payload, last)
  local ok, cerr = log.commit()
  if not ok then -- (the failed commit made every count stale: counted again from the database)
    return errors.store_unavailable(cerr)
  end
  if waiting then waiting.n, waiting.bytes = waiting.n + 1, waiting.bytes + #payload end
  return h.kind, h.respond and decode(h.respond) or nil
end

return M
