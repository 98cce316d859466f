--- The ctx a tool's body sees, built in one place (part of `require "moor"`):
-- moor._ctx(facts) for a workflow body (callId, toolName, runId, abortSignal,
-- session, ctx.ask, ctx.agent, ctx.agents) and moor._plain_ctx(facts) for a
-- plain tool; getToken/requireAuth are moor.auth's; what the seeds' ctx has
-- that moor does not yet raises NotSupported.
local engine = require "moor.engine"
local errors = require "moor.errors"
local json = require "moor.json"
local abort_signals = require "moor.signal"
local flow = require "moor.authoring.flow"
local agent = require "moor.authoring.agent"

local M = {}

--- not_supported(what) -> a function that raises NotSupported for what (see
-- moor.workflow, ctx.getToken, the task argument).
function M.not_supported(what)
  return function() errors.not_supported(what, 2) end
end
local not_supported = M.not_supported

-- ctx.getToken / ctx.requireAuth: moor.auth's (set_auth), which raise a
-- clear error outside a step (a workflow body's ctx) and work inside one.
local get_token, require_auth = nil, nil

--- moor.auth gives its getToken(session, connection, level) and requireAuth.
function M.set_auth(get, req) get_token, require_auth = get, req end

-- In a workflow body's ctx: they raise (a token must never enter the body's
-- log); what the seeds' ctx has that moor does not yet: NotSupported (never
-- retried by a step) instead of "attempt to call a nil value".
local STUBS = {
  getToken = function(c) return get_token(nil, c, 2) end,
  requireAuth = function(c) return require_auth(nil, c, 2) end,
  getSandbox = not_supported("ctx.getSandbox (sandboxes)"),
  getSkill = not_supported("ctx.getSkill (skills)"),
}

-- A workflow's ctx lives as long as its run (10,000 parked runs keep 10,000),
-- so what is the same for every run comes through its metatable: the stubs,
-- and ctx.session's `{}` outside a session, made on first use. pairs() shows
-- the same fields as a plain tool's ctx.
local WORKFLOW_CTX = {
  __index = function(ctx, k)
    if k == "session" then
      local v = {}
      rawset(ctx, "session", v)
      return v
    end
    return STUBS[k]
  end,
  __pairs = function(ctx)
    local _ = ctx.session
    local stubs = false
    return function(_, k)
      local v
      if not stubs then
        k, v = next(ctx, k)
        if k ~= nil then return k, v end
        stubs = true
      end
      repeat k, v = next(STUBS, k) until k == nil or rawget(ctx, k) == nil
      return k, v
    end, ctx, nil
  end,
}

--- The ctx of a plain tool, whoever calls it (a session's model or moor
-- call): { callId, toolName, session = { id?, turnId? }, abortSignal } and
-- getToken/requireAuth (it runs in a step), and the not-yet-supported
-- getSandbox/getSkill.
function M._plain_ctx(f)
  local session = rawget(f, "session") or {}
  local ctx = { callId = f.callId, toolName = f.toolName, abortSignal = f.abortSignal, session = session }
  for k, v in pairs(STUBS) do ctx[k] = v end
  -- A plain tool runs in a step: its getToken works there, as whoever made the call.
  ctx.getToken = function(c) return get_token(session, c, 2) end
  ctx.requireAuth = function(c) return require_auth(session, c, 2) end
  return ctx
end

--- Is v a workflow body's ctx (what a step may be given directly)?
function M.is_workflow_ctx(v) return getmetatable(v) == WORKFLOW_CTX end

local DISPLAYS = { confirmation = true, select = true, text = true }
local STYLES = { primary = true, danger = true, default = true }

local function check_request(req)
  if type(req) ~= "table" then
    error("ctx.ask takes a request table { prompt, display?, options?, allowFreeform? }", 3)
  end
  if type(req.prompt) ~= "string" or req.prompt == "" then error("ctx.ask: prompt must be a non-empty string", 3) end
  if req.display ~= nil and not DISPLAYS[req.display] then
    error("ctx.ask: display must be \"confirmation\", \"select\" or \"text\"", 3)
  end
  if req.allowFreeform ~= nil and type(req.allowFreeform) ~= "boolean" then
    error("ctx.ask: allowFreeform must be a boolean", 3)
  end
  if req.requiresPerson ~= nil and type(req.requiresPerson) ~= "boolean" then
    error("ctx.ask: requiresPerson must be a boolean", 3)
  end
  local options, seen = json.array {}, {}
  if req.options ~= nil then
    if type(req.options) ~= "table" then error("ctx.ask: options must be a list", 3) end
    for i, o in ipairs(req.options) do
      if type(o) ~= "table" or type(o.id) ~= "string" or o.id == "" then
        error(("ctx.ask: options[%d] needs an id (a non-empty string)"):format(i), 3)
      end
      if seen[o.id] then error(("ctx.ask: option id '%s' is used twice"):format(o.id), 3) end
      seen[o.id] = true
      if type(o.label) ~= "string" then error(("ctx.ask: options[%d] needs a label"):format(i), 3) end
      if o.style ~= nil and not STYLES[o.style] then
        error(("ctx.ask: options[%d].style must be primary, danger or default"):format(i), 3)
      end
      if o.description ~= nil and type(o.description) ~= "string" then
        error(("ctx.ask: options[%d].description must be a string"):format(i), 3)
      end
      options[i] = { id = o.id, label = o.label, description = o.description, style = o.style }
    end
  end
  -- requiresPerson: answered only through the input channels (inputResponses,
  -- POST /v1/inputs, moor answer, a terminal prompt), never by message text.
  -- (Set after the constructor, only when true: four fields fill a table's
  -- four slots, and a parked run keeps its request.)
  local clean = { prompt = req.prompt, display = req.display, options = options, allowFreeform = req.allowFreeform }
  if req.requiresPerson then clean.requiresPerson = true end
  return clean
end

local is_signal = abort_signals.is

--- The ctx of a workflow body, built from its run's facts (the engine's
-- { callId, toolName, runId, abortSignal, session }): the one place it is made.
function M._ctx(f)
  -- The facts become the ctx (no copy: a parked run keeps one table).
  local ctx = setmetatable(f, WORKFLOW_CTX)
  --- ctx.agent(name): a session with another agent (see moor.session).
  ctx.agent = function(name)
    flow.need_body("ctx.agent")
    if type(name) ~= "string" then error("ctx.agent needs an agent name", 2) end
    return agent.agent_handle(name, ctx)
  end
  ctx.agents = agent.agents_snapshot(rawget(f, "session"))
  --- ctx.ask(request [, { signal }]) -> { status = "answered", optionId?, text? }
  --   | { status = "cancelled" } | { status = "unavailable" }
  ctx.ask = function(request, opts)
    flow.need_wait("ctx.ask")
    local clean = check_request(request)
    -- (askSignal: a serve body's, withdrawn when a reply settles the calls)
    local signals = { ctx.abortSignal, rawget(ctx, "askSignal") }
    if opts ~= nil then
      if type(opts) ~= "table" then error("ctx.ask: options must be a table { signal }", 2) end
      if opts.signal ~= nil then
        if not is_signal(opts.signal) then error("ctx.ask: signal must come from moor.AbortController()", 2) end
        signals[#signals + 1] = opts.signal
      end
    end
    -- (callId: the call the body serves, which a serve body's receive() moves on)
    local ok, v = engine.op("ask", "ask", { request = clean, signals = signals, callId = ctx.callId })
    if not ok then error(v, 0) end
    return v
  end
  return ctx
end

return M
