--- ctx.getToken and ctx.requireAuth (issue 12; seeds 000 "Authorize inside a
-- step", 003 §3.2 and §8). They work inside a step (a plain tool's body is
-- one; a workflow's moor.step that receives the call's ctx directly as its
-- first argument gets a restricted step context { session, callId, toolName,
-- abortSignal, getToken, requireAuth }), and raise in a workflow body. A
-- token is read from the token store (moor.auth.tokens), refreshed there when
-- it is about to expire; when there is none, the step attempt ends with
-- AuthRequired and the engine parks the run on a sign-in (engine/auth.lua).
-- The attempt after the callback exchanges its code here, once: the
-- completion marker makes a later retry read the stored token. A token is
-- returned to the step and enters no log, result, stream or message.
local core = require "moor.core"
local engine = require "moor.engine"
local errors = require "moor.errors"
local ctx_builder = require "moor.authoring.ctx"
local flow = require "moor.authoring.flow"
local connection = require "moor.auth.connection"
local tokens = require "moor.auth.tokens"
local oauth = require "moor.auth.oauth"

local type, select, tostring = type, select, tostring
local fmt = string.format
local FatalError = errors.FatalError

local M = {}

local REFRESH_EARLY = 60000 -- ms before expiry a token is refreshed

-- Who a token is for: whoever launched the call (the session's principal at
-- the call), or the agent for a connection that is not user-scoped.
local function principal_of(def, session)
  if not def.userScoped then return "agent" end
  local p = type(session) == "table" and session.principal
  if type(p) == "string" and p ~= "" then return p end
  return "local"
end

local function outside(what, level)
  error(FatalError(("%s belongs in a step: pass the call's ctx directly as the step's first argument "
    .. "(moor.step(\"read\", function(ctx, repo) ... ctx.%s(provider) ... end)); a workflow body is replayed, "
    .. "and a token must never enter its log"):format(what, what:match("%.(%a+)$") or what)), level + 1)
end

local NESTED = "pass the call's ctx directly as the step's first argument (step(ctx, ...)), not %s: "
  .. "only then does the step get ctx.getToken and ctx.requireAuth"

-- session: the caller's (a step context's, a plain tool's), or nil for a
-- workflow body's own ctx: used inside a step, that ctx was nested in an
-- argument or captured, and is refused (it must not resolve as anyone).
local function check(what, session, c, level)
  if engine.in_body() or not engine.step_info() then outside(what, level + 1) end
  if session == nil then
    error(FatalError(fmt(NESTED, "nested in another argument or captured in the step's function")), level + 1)
  end
  local def, name = connection.resolve(c)
  if not def then error(FatalError(what .. ": " .. name), level + 1) end
  return def, name, engine.step_info()
end

engine.auth_on_begin(function(auth, state, callback)
  local def = connection.registry[auth.connection]
  if not def then return nil, "there is no connection named " .. tostring(auth.connection) end
  local verifier, challenge = oauth.pkce()
  local ok, err = tokens.put_pending(state, { verifier = verifier, connection = auth.connection,
    principal = auth.principal, redirect_uri = callback, created = core.now() })
  if not ok then return nil, err end
  return oauth.authorize_url(def, state, challenge, callback)
end)

engine.auth_on_forget(function(state) tokens.drop_pending(state) end)

local function required(def, name, principal)
  error(errors.new("AuthRequired", fmt("%s needs a sign-in", name),
    { auth = { connection = name, description = def.description, principal = principal } }), 0)
end

-- The attempt right after a callback: take its code (or its refusal). The
-- token it gives is stored tagged with the sign-in (a hash of its state), so
-- an attempt that runs again after the host stopped before the completion
-- marker was committed reads that token instead of spending the code twice.
local function take_callback(sa, def, name, principal, info, level)
  sa.used = true
  local cb = sa.callback or {}
  if cb.error then
    engine.auth_complete(sa, "declined")
    tokens.drop_pending(sa.state)
    error(FatalError(fmt("the sign-in to %s was declined (%s%s)", name, tostring(cb.error),
      type(cb.error_description) == "string" and (": " .. cb.error_description:sub(1, 200)) or "")), level + 1)
  end
  local grant = core.sha256(sa.state)
  local have = tokens.get(name, principal)
  if not sa.exchanged and not cb.authorized and not (have and have.grant == grant) then
    local pending = tokens.pending(sa.state)
    if not pending or type(cb.code) ~= "string" then
      engine.auth_complete(sa, "failed")
      error(FatalError(fmt("the sign-in to %s came back without a code to exchange", name)), level + 1)
    end
    local rec, err, kind = oauth.exchange(def, pending, cb.code)
    if not rec and kind == "unreachable" and (info.attempt or 1) <= (info.retries or 0) then
      -- Not a refusal: this attempt fails and the step's next one exchanges
      -- the same code (its verifier is kept).
      error(errors.new("AuthExchangeFailed", fmt("the sign-in to %s is not complete yet: %s", name, err)), level + 1)
    end
    if not rec then
      engine.auth_complete(sa, "failed")
      tokens.drop_pending(sa.state) -- (the code is spent: the verifier is of no more use)
      error(FatalError(fmt("the sign-in to %s failed: %s", name, err)), level + 1)
    end
    rec.grant = grant
    local ok, serr = tokens.put(name, pending.principal, rec)
    if not ok then error(FatalError("cannot keep the token: " .. tostring(serr)), level + 1) end
  end
  tokens.drop_pending(sa.state)
  engine.auth_complete(sa, "authorized")
end

--- ctx.getToken(connection) -> { token }
function M.get_token(session, c, level)
  level = level or 1
  local def, name, info = check("ctx.getToken", session, c, level + 1)
  local sa = info.auth
  local principal = principal_of(def, session)
  if sa and sa.connection == name and not sa.used then take_callback(sa, def, name, principal, info, level + 1) end
  local rec = tokens.get(name, principal)
  if rec and (not rec.expires_at or rec.expires_at > core.now() + REFRESH_EARLY) then
    return { token = rec.access_token }
  end
  if rec and rec.refresh_token then
    local fresh, ferr, kind = oauth.refresh(def, rec.refresh_token)
    if fresh then
      fresh.grant = rec.grant -- (still the sign-in's: see take_callback)
      tokens.put(name, principal, fresh)
      return { token = fresh.access_token }
    end
    if kind == "unreachable" then
      -- Not a refusal: keep both tokens; one not expired yet still serves,
      -- else the attempt fails (and the step retries) rather than sign in again.
      if rec.expires_at > core.now() then return { token = rec.access_token } end
      error(errors.new("AuthRefreshFailed", fmt("cannot refresh the token for %s: %s", name, ferr)), level + 1)
    end
    -- Refused: another step may have refreshed it meanwhile, spending this
    -- refresh token (providers rotate them); its fresh token serves.
    local cur = tokens.get(name, principal)
    if cur and cur.access_token ~= rec.access_token and (not cur.expires_at or cur.expires_at > core.now()) then
      return { token = cur.access_token }
    end
  end
  local cur = rec and tokens.get(name, principal)
  if cur and cur.access_token == rec.access_token then tokens.drop(name, principal) end -- (only what was tried)
  required(def, name, principal)
end

--- ctx.requireAuth(connection): the token was rejected (a 401): drop it and
-- sign in again; right after a sign-in, fail instead (the loop guard).
function M.require_auth(session, c, level)
  level = level or 1
  local def, name, info = check("ctx.requireAuth", session, c, level + 1)
  local principal = principal_of(def, session)
  tokens.drop(name, principal)
  local sa = info.auth
  if sa and sa.connection == name and sa.fresh then
    error(FatalError(fmt("%s rejected the token it gave right after the sign-in; not asking to sign in again",
      name)), level + 1)
  end
  required(def, name, principal)
end

--- The restricted context a step gets in place of the call's ctx.
function M.step_ctx(ctx)
  local session = ctx.session
  local sc = { session = session, callId = ctx.callId, toolName = ctx.toolName, abortSignal = ctx.abortSignal }
  sc.getToken = function(c) return M.get_token(session, c, 2) end
  sc.requireAuth = function(c) return M.require_auth(session, c, 2) end
  return sc
end

ctx_builder.set_auth(M.get_token, M.require_auth)

-- A step's arguments: ctx passed directly becomes the step context; a ctx
-- passed as another argument or captured by the step's function is refused
-- here. This runs on every moor.step call, so it looks no deeper than the
-- arguments themselves (a ctx nested inside one is refused when the step
-- uses it: check above), and scans a function's upvalues once.
local is_ctx = ctx_builder.is_workflow_ctx
local checked = setmetatable({}, { __mode = "k" })

flow.set_step_args(function(name, fn, ...)
  if not checked[fn] then
    for i = 1, 255 do
      local up, v = debug.getupvalue(fn, i)
      if not up then break end
      if is_ctx(v) then error(fmt("step '%s': " .. NESTED, name, "captured in the step's function"), 3) end
    end
    checked[fn] = true
  end
  local n = select("#", ...)
  if n == 0 then return ... end
  local first = ...
  for i = 2, n do
    if is_ctx((select(i, ...))) then error(fmt("step '%s': " .. NESTED, name, "as another argument"), 3) end
  end
  if is_ctx(first) then
    if n == 1 then return M.step_ctx(first) end
    local args = table.pack(...)
    args[1] = M.step_ctx(first)
    return table.unpack(args, 1, n)
  end
  return ...
end)

return M
