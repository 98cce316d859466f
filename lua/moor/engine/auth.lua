--- Sign-in inside a step (issue 12; seed 000 "Authorize inside a step", 003
-- §3.2): a step attempt that raised AuthRequired (ctx.getToken found no
-- usable token) ends, and its run parks on a callback made for it without
-- holding compute: a hook of kind "auth" whose token is the callback's
-- `state` (32 random bytes), a pending input `{ kind = "authorization", ... }`
-- for GET /v1/inputs, and `authorization.required` on the stream. The
-- callback (GET /v1/auth/callback, M.callback) records its parameters
-- (`authorization.callback`: a one-time code or the provider's error, never a
-- token) and the whole step runs again, its step info carrying them, so the
-- step's getToken exchanges the code; `authorization.completed` (M.complete)
-- is the marker, with no credentials, that makes a later retry of the step
-- read the stored token instead of exchanging the code again. Replay
-- rebuilds all of it from those three events. A run that ends closes its
-- callback (waits.release), so a late callback gets 404 and changes nothing.
local clock = require "moor.clock"
local json = require "moor.json"
local errors = require "moor.errors"
local conf = require "moor.conf"
local store = require "moor.store"
local log = require "moor.engine.log"
local timers = require "moor.engine.timers"
local waits = require "moor.engine.waits"
local S = require "moor.engine.state"

local M = {}

local encode, decode = json.encode, json.decode
local now_ms = clock.now
local append, fail = log.append, errors.fail

local exec_step       -- steps.lua's, given by M.install
local begin = nil     -- the auth module's begin(auth, state, callback_url) -> url | nil, err
local forget = nil    -- the auth module's forget(state): a withdrawn sign-in's verifier goes

--- steps.lua hands over how to run a step's attempt.
function M.install(exec) exec_step = exec end

--- The auth module (lua/moor/auth) makes sign-in URLs: begin(auth, state,
-- callback_url) -> url | nil, message (it keeps the PKCE verifier).
function M.on_begin(fn) begin = fn end

--- ... and forgets what it kept for a sign-in that was withdrawn: forget(state).
function M.on_forget(fn) forget = fn end

local function withdrawn(state)
  if forget then forget(state) end
end

local function waiting(r, state, w)
  r.auths = r.auths or {}
  r.auths[state] = w
  -- A sign-in link that nobody follows ends the wait as timed out.
  timers.add(r, w.expiresAt, function()
    if r.settled or not r.auths or r.auths[state] ~= w then return end
    r.auths[state] = nil
    store.close_hook(state)
    store.withdraw_input(w.requestId, now_ms())
    withdrawn(state)
    append(r, w.n, "authorization.completed", w.name, encode({ connection = w.connection, outcome = "timed-out" }))
    local e = errors.FatalError(("the sign-in to %s was not completed in time"):format(w.connection))
    w.fail(e)
  end)
end

--- Step op n of run r raised AuthRequired at attempt `attempt`: park it on
-- a callback. auth = { connection, description, principal, interactive }.
-- fail(err) fails the step (steps.lua's step_done). Returns true, or nil and
-- the reason the wait cannot be made (the step then fails with it).
function M.park(r, n, name, spec, attempt, auth, fail_step)
  if not conf.callback_url then
    return nil, ("connection %s needs a person to sign in, but this host has no callback address for the "
      .. "provider to return to: run it under `moor dev`, whose HTTP API takes the callback (MOOR_PUBLIC_URL "
      .. "names the address the provider reaches it at, when that is not the listen address; it is needed "
      .. "when moor dev listens on 0.0.0.0 or ::)")
      :format(tostring(auth.connection))
  end
  if not begin then return nil, "no authorization module is loaded" end
  local state = waits.random_token()
  local url, berr = begin(auth, state, conf.callback_url)
  if not url then return nil, berr end
  local t = now_ms()
  local expires = t + conf.AUTH_TTL
  local req_id = ("req_%s_%d_a%d"):format(r.id:sub(5), n, attempt)
  local request = { kind = "authorization", name = auth.connection, description = auth.description,
    authorization = { url = url, expiresAt = expires,
      instructions = "Open the URL in a browser and sign in; the tool goes on by itself once you have." } }
  store.insert_hook(state, r.id, "auth", nil, t)
  store.insert_input(req_id, r.id, n, encode(request), t)
  append(r, n, "authorization.required", name, encode({ requestId = req_id, runId = r.id, callId = r.call_id,
    toolName = r.tool_name, attempt = attempt, state = state, name = auth.connection,
    description = auth.description, authorization = request.authorization }))
  local rec = r.recorded[n] or { kind = "step", name = name }
  r.recorded[n] = rec
  rec.auth = { state = state, requestId = req_id, attempt = attempt, expiresAt = expires,
    connection = auth.connection }
  rec.auth_cb, rec.auth_done = nil, nil
  waiting(r, state, { n = n, name = name, spec = spec, attempt = attempt, requestId = req_id,
    connection = auth.connection, expiresAt = expires, fail = fail_step })
  return true
end

--- After a restart: step op n was parked on a sign-in (rec.auth) when the
-- host stopped; wait on the same callback again.
function M.rewait(r, n, name, spec, rec, fail_step)
  local a = rec.auth
  local h = store.hook(a.state)
  if not h or h.closed ~= 0 then
    return fail_step(errors.FatalError(("the sign-in to %s was withdrawn"):format(tostring(a.connection))))
  end
  waiting(r, a.state, { n = n, name = name, spec = spec, attempt = a.attempt, requestId = a.requestId,
    connection = a.connection, expiresAt = a.expiresAt, fail = fail_step })
end

--- The step attempt that runs after a callback: what its getToken reads.
-- rec.auth_cb: the callback's parameters (and whether the code was already
-- exchanged: rec.auth_done).
-- fresh: this is the attempt right after the callback (the loop guard).
function M.step_auth(r, n, attempt)
  local rec = r.recorded[n]
  if not rec or not rec.auth_cb or not rec.auth then return nil end
  return { callback = rec.auth_cb, state = rec.auth.state, connection = rec.auth.connection,
    exchanged = rec.auth_done, fresh = attempt == rec.auth.attempt + 1, run = r, n = n }
end

--- GET /v1/auth/callback?state=...&code=... (or &error=...): the provider
-- sends the person back. Returns true, or nil and err (not_found for a
-- state that names no waiting sign-in: unknown, used, withdrawn, expired).
function M.callback(state, params)
  local h = type(state) == "string" and store.hook(state) or nil
  if not h or h.closed ~= 0 or h.kind ~= "auth" then
    return fail("not_found", "no sign-in is waiting for this callback (it was used, withdrawn or has expired)")
  end
  local r = S.runs[h.run_id]
  local w = r and not r.settled and r.auths and r.auths[state]
  if not w then return fail("not_found", "no sign-in is waiting for this callback") end
  r.auths[state] = nil
  store.close_hook(state)
  local p = { code = params.code, error = params.error, error_description = params.error_description,
    authorized = params.authorized }
  local t = now_ms()
  store.answer_input(w.requestId, encode({ requestId = w.requestId, outcome = p.error and "declined" or "signed-in" }),
    t)
  append(r, w.n, "authorization.callback", w.name, encode({ attempt = w.attempt, params = p }))
  local rec = r.recorded[w.n]
  rec.auth_cb, rec.attempts = p, w.attempt
  exec_step(r, w.n, w.name, w.spec, w.attempt + 1)
  local ok, cerr = log.commit()
  if not ok then return errors.store_unavailable(cerr) end
  return true
end

--- The marker after a sign-in, with no credentials: outcome "authorized",
-- "declined" or "failed" (recorded once per callback: a later attempt of the
-- step, which reads the stored token, records no second one).
function M.complete(sa, outcome)
  if not sa or sa.marked then return end
  sa.marked = true
  local r, n = sa.run, sa.n
  if r.settled then return end
  local rec = r.recorded[n]
  if outcome == "authorized" and rec and rec.auth_done then return end
  if outcome == "authorized" and rec then rec.auth_done = true end
  append(r, n, "authorization.completed", rec and rec.name or nil,
    encode({ connection = sa.connection, outcome = outcome }))
end

--- A run that ends (runs.finish_run, with waits.release closing its hooks)
-- withdraws the sign-ins it still waits on: what was kept for them goes.
function M.release(r)
  for state in pairs(r.auths or {}) do withdrawn(state) end
  r.auths = nil
end

--- A cancelled turn withdraws the sign-ins run run_id waits on (seed 000:
-- cancellation goes the turn's way, with no authorization.completed): each
-- callback closes (a late one gets not_found), its request is resolved as
-- cancelled, and its step fails with `why`. Returns true, or nil, err.
function M.withdraw(run_id, why)
  local r = S.runs[run_id]
  if not r or r.settled or not r.auths then return true end
  local t = now_ms()
  local list = {}
  for state, w in pairs(r.auths) do list[#list + 1] = { state, w } end
  table.sort(list, function(a, b) return a[2].n < b[2].n end)
  for _, sw in ipairs(list) do
    local state, w = sw[1], sw[2]
    if not r.settled and r.auths[state] == w then
      r.auths[state] = nil
      store.close_hook(state)
      store.withdraw_input(w.requestId, t)
      append(r, nil, "input.resolved", "ask", encode({ requestId = w.requestId, runId = r.id, outcome = "cancelled" }))
      withdrawn(state)
      w.fail(errors.FatalError(("the sign-in to %s was withdrawn: %s"):format(w.connection, why)))
    end
  end
  local ok, err = log.commit()
  if not ok then return errors.store_unavailable(err) end
  return true
end

--- The callback state of the sign-in that input request req_id shows, or nil.
function M.state_of(req_id)
  local row = store.input(req_id)
  local r = row and S.runs[row.run_id]
  for state, w in pairs(r and r.auths or {}) do
    if w.requestId == req_id then return state end
  end
  return nil
end

--- Replay: the three events of a sign-in, read into op n's record.
function M.read_event(rec, kind, payload)
  local p = decode(payload)
  if type(p) ~= "table" then return end
  if kind == "authorization.required" then
    rec.auth = { state = p.state, requestId = p.requestId, attempt = p.attempt,
      expiresAt = p.authorization and p.authorization.expiresAt, connection = p.name }
    rec.auth_cb, rec.auth_done, rec.attempts = nil, nil, p.attempt
  elseif kind == "authorization.callback" then
    rec.auth_cb, rec.attempts = p.params, p.attempt
  elseif kind == "authorization.completed" and p.outcome == "authorized" then
    rec.auth_done = true
  end
end

return M
