--- moor: the authoring API. Names follow eve's (defineTool,
-- defineWorkflowTool, execute, ctx.callId, FatalError, ...) so its docs
-- translate line by line.
--
--   local moor = require "moor"
--   local fetchPlan = moor.step("fetchPlan", function(service) ... end)
--   return moor.defineWorkflowTool {
--     description = "...",
--     inputSchema = moor.schema.object { service = moor.schema.string() },
--     execute = function(input, ctx) local plan = fetchPlan(input.service) ... end,
--   }
local engine = require "moor.engine"
local errors = require "moor.errors"
local duration = require "moor.duration"
local schema = require "moor.schema"
local json = require "moor.json"
local abort_signals = require "moor.signal"
local conf = require "moor.conf"

local M = {
  schema = schema,
  json = json,
  FatalError = errors.FatalError,
  RetryableError = errors.RetryableError,
  Cancelled = errors.Cancelled,
  Error = errors,
  version_string = require("moor.core").version,
}

local definitions = setmetatable({}, { __mode = "k" }) -- tool table -> true

-- A function that raises NotSupported for what (see moor.workflow, ctx.getToken).
local function not_supported(what)
  return function() errors.not_supported(what, 2) end
end

-- Definition errors carry the file and line of the define* call, so the
-- loader can report them as "agent/tools/x.lua:3: ...".
-- `return moor.defineTool{...}` is a tail call, which drops the file's frame,
-- so when no frame of the file being loaded is found the loader points at
-- the define call's line itself.
local function def_error(msg, level)
  local where
  for l = (level or 2) + 1, (level or 2) + 4 do
    local info = debug.getinfo(l, "Sl")
    if not info then break end
    if info.currentline and info.currentline > 0 and info.source:sub(1, 1) == "@"
      and not info.source:find("/moor/[%w_]+%.lua$") then
      where = info.short_src .. ":" .. info.currentline
      break
    end
  end
  error(errors.new("DefinitionError", msg, { where = where }), (level or 2) + 1)
end

local ENTRY_POINTS = { "execute", "task", "serve" }

local function check_common(kind, def)
  if type(def) ~= "table" then def_error(kind .. " takes a table { description, inputSchema, execute }", 3) end
  if type(def.description) ~= "string" or def.description:match("^%s*$") then
    def_error("missing description: " .. kind .. " needs a description string, written for the model", 3)
  end
  if def.inputSchema == nil then
    def_error("missing inputSchema: pass moor.schema.object{ ... } (moor.schema.object{} for no input)", 3)
  end
  for _, field in ipairs { "inputSchema", "outputSchema" } do
    local s = def[field]
    if s ~= nil then
      if type(s) ~= "table" then def_error(field .. " must be a JSON Schema table or a moor.schema builder", 3) end
      local ok, err = schema.check(s)
      if not ok then def_error(field .. " is not a valid schema: " .. err, 3) end
    end
  end
  if def.inputSchema.type ~= "object" then
    def_error("inputSchema must describe a JSON object (type = \"object\"): a tool's input is an object", 3)
  end
  local found = {}
  for _, e in ipairs(ENTRY_POINTS) do
    if def[e] ~= nil then
      if type(def[e]) ~= "function" then def_error(e .. " must be a function", 3) end
      found[#found + 1] = e
    end
  end
  if #found == 0 then def_error(kind .. " needs exactly one entry point: execute (task and serve come later)", 3) end
  if #found > 1 then
    def_error(kind .. " needs exactly one entry point, but defines " .. table.concat(found, " and "), 3)
  end
  local entry = found[1]
  if entry ~= "execute" then
    def_error(("'%s' entry points are not supported yet: define execute instead"):format(entry), 3)
  end
  if def.execution ~= nil then
    def_error(("execution = %q is not supported yet: background tools come with tasks"):format(
      tostring(def.execution)), 3)
  end
  if def.toModelOutput ~= nil and type(def.toModelOutput) ~= "function" then
    def_error("toModelOutput must be a function", 3)
  end
  local a = def.approval
  if a ~= nil and type(a) ~= "function" and not (type(a) == "table" and a.kind == "approval") then
    def_error("approval must be moor.approval.always(), once(), never() or a policy function", 3)
  end
  return entry
end

local function finish(def, entry, suspend)
  local tool = {}
  for k, v in pairs(def) do tool[k] = v end
  tool.entry = entry
  -- The four cells are data (DESIGN.md): consumers switch on shape.
  tool.shape = { lifetime = entry == "execute" and "step" or "task", suspend = suspend }
  definitions[tool] = true
  return tool
end

--- A plain tool: execute(input, ctx) runs once per call, like a step
-- (coroutine.yield(v) inside it publishes a progress snapshot).
function M.defineTool(def)
  local entry = check_common("defineTool", def)
  return finish(def, entry, "none")
end

--- A workflow tool: execute(input, ctx) is a durable body, replayed after a
-- restart; its side effects go in moor.step functions.
function M.defineWorkflowTool(def)
  local entry = check_common("defineWorkflowTool", def)
  return finish(def, entry, "workflow")
end

function M.isTool(t) return definitions[t] == true end

local DISABLED = setmetatable({ kind = "disabled" }, { __name = "moor.disabledTool" })

--- `return moor.disableTool()` as the whole of agent/tools/<name>.lua hides
-- the built-in tool (tools/<name>.lua: ask_question, sleep) or the subagent
-- of that name from the agent's model. A hidden subagent stays callable
-- through ctx.agent.
function M.disableTool() return DISABLED end

function M.isDisabledTool(v) return v == DISABLED end

--- Seed names moor does not have yet: they raise NotSupported (not retried).
M.workflow = not_supported("moor.workflow (the runtime-generated workflow tool)")
M.defineDynamic = not_supported("moor.defineDynamic (dynamic tools)")
M.NotSupported = errors.NotSupported

--- An agent definition (agent/agent.lua, a subagent's agent.lua), validated at load;
-- the turn loop (moor.session) holds its sessions.
function M.defineAgent(def)
  if type(def) ~= "table" then def_error("defineAgent takes a table { model, description, instructions }") end
  if type(def.model) ~= "string" and type(def.model) ~= "table" and type(def.model) ~= "function" then
    def_error("defineAgent needs a model, as \"provider/model\" (\"openai/gpt-5.5\")")
  end
  if type(def.model) == "string" and not def.model:match("^[%w_-]+/.+") then
    def_error(("model %q must be \"provider/model\", as \"openai/gpt-5.5\" or \"anthropic/claude-sonnet-5\""):format(
      def.model))
  end
  if type(def.model) == "string" then
    local ok, err = require("moor.providers").resolve(def.model, function() return nil end)
    if not ok and err.code == "unknown_provider" then def_error(err.message) end
  end
  if def.modelTimeout ~= nil and not duration.parse(def.modelTimeout) then
    def_error("modelTimeout must be a duration, as \"30s\" or milliseconds")
  end
  if def.description ~= nil and type(def.description) ~= "string" then def_error("description must be a string") end
  if type(def.instructions) ~= "string" then def_error("defineAgent needs instructions (a string)") end
  if def.maxSteps ~= nil and (math.type(def.maxSteps) ~= "integer" or def.maxSteps < 1) then
    def_error("maxSteps must be an integer >= 1")
  end
  local agent = {}
  for k, v in pairs(def) do agent[k] = v end
  agent.kind = "agent"
  definitions[agent] = true
  return agent
end

-- What the seeds' ctx has that moor does not yet: a clear NotSupported
-- (never retried by a step) instead of "attempt to call a nil value".
local STUBS = {
  getToken = not_supported("ctx.getToken (provider sign-in)"),
  requireAuth = not_supported("ctx.requireAuth (provider sign-in)"),
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
-- the not-yet-supported getToken/requireAuth/getSandbox/getSkill.
function M._plain_ctx(f)
  local ctx = { callId = f.callId, toolName = f.toolName, abortSignal = f.abortSignal,
                session = rawget(f, "session") or {} }
  for k, v in pairs(STUBS) do ctx[k] = v end
  return ctx
end

-- The third argument of execute (seed 003's task): not built yet, so every
-- field of it (task.postMessage, ...) raises NotSupported.
local TASK = setmetatable({}, {
  __index = function(_, k) return not_supported("task." .. tostring(k) .. " (background tasks)") end,
  __newindex = function() errors.not_supported("task (background tasks)", 2) end,
})

-- error("msg") in a tool's own file reaches the model (and the API) as
-- written: the "file:line: " Lua prepends moves to the error's `where`,
-- which the log keeps (moor logs shows it).
local function relocate(src, e)
  if type(e) == "string" then
    local file, line, msg = e:match("^(.-):(%d+): (.*)$")
    if file == src then return errors.new("Error", msg, { where = file .. ":" .. line }) end
  end
  return e
end

local function locate(src, ok, ...)
  if ok then return ... end
  error(relocate(src, (...)), 0)
end

-- Bind a loaded tool to its name: the loader calls this once per file.
function M._bind(tool, name, source_hash)
  tool.name = name
  tool.source_hash = source_hash
  local fn = tool[tool.entry]
  local info = debug.getinfo(fn, "S")
  local src = info and info.short_src
  local execute = function(input, ctx) return locate(src, pcall(fn, input, ctx, TASK)) end
  tool.invoke = execute
  if tool.shape.suspend == "workflow" then
    -- The engine builds the body's ctx from its run's facts with tool.ctx
    -- (moor._ctx, the one place a ctx is made) and runs the body unwrapped
    -- (a wrapper's frames would stay on the stack of every parked run): it
    -- passes tool.task third and takes the run's error through tool.locate.
    tool.body, tool.task, tool.ctx = fn, TASK, M._ctx
    tool.locate = function(e) return relocate(src, e) end
  else
    -- A plain tool runs as one step of its run: not replayed, not retried
    -- (eve does not retry authored tools), progress still published.
    local policy = { retries = 0, backoff = 0, factor = 1, maxBackoff = 0 }
    tool.body = function(input, ctx)
      return M._step_call(name, execute, policy, input, M._plain_ctx(ctx))
    end
  end
  return tool
end

local DEFAULT_POLICY = conf.STEP_POLICY

local function make_policy(p)
  if p == nil then return DEFAULT_POLICY end
  if type(p) ~= "table" then error("a step policy is a table { retries, backoff, factor, maxBackoff }", 3) end
  local policy = {}
  for k, v in pairs(DEFAULT_POLICY) do policy[k] = v end
  for k, v in pairs(p) do
    if DEFAULT_POLICY[k] == nil then error(("unknown step policy option '%s'"):format(tostring(k)), 3) end
    if k == "retries" then
      if math.type(v) ~= "integer" or v < 0 then error("retries must be an integer >= 0", 3) end
      policy.retries = v
    elseif k == "factor" then
      if type(v) ~= "number" or v < 1 then error("factor must be a number >= 1", 3) end
      policy.factor = v
    else
      policy[k] = duration.check(v, 3)
    end
  end
  return policy
end

function M._step_call(name, fn, policy, ...)
  if not engine.in_body() then return fn(...) end
  local ok, v = engine.step(name, fn, policy, ...)
  if ok then return v end
  error(v, 0)
end

--- moor.step(name, fn [, policy]) -> a function. Called in a workflow body it
-- is a durable step: run once, its result recorded and replayed; retried on
-- error (3 retries, exponential backoff from 1s, unless policy says
-- otherwise; FatalError is never retried). Called anywhere else it is a
-- plain call. policy = { retries, backoff, factor, maxBackoff }.
function M.step(name, fn, policy)
  if type(name) ~= "string" or name == "" then error("moor.step needs a name (a non-empty string)", 2) end
  if type(fn) ~= "function" then error("moor.step needs a function", 2) end
  local pol = make_policy(policy)
  local in_body, engine_step = engine.in_body, engine.step
  return function(...)
    if not in_body() then return fn(...) end
    local ok, v = engine_step(name, fn, pol, ...)
    if ok then return v end
    error(v, 0)
  end
end

--- Inside a running step: { runId, seq, attempt, name, idempotencyKey }.
-- idempotencyKey (run id + op seq) is stable across retries and restarts:
-- hand it to services that deduplicate, since steps are at-least-once.
function M.stepInfo() return engine.step_info() end

local function need_body(what)
  if not engine.in_body() then
    error(what .. " belongs in a workflow body (defineWorkflowTool's execute), not in a step or plain code", 3)
  end
end

--- Durable sleep: parks the run without holding compute; survives restarts.
function M.sleep(d)
  -- parse, not check: a frame less at the deepest point of a run that parks
  -- here, which keeps its coroutine within Lua's first stack (issue 7 bench)
  local ms, err = duration.parse(d)
  if not ms then error(err, 2) end
  need_body("moor.sleep")
  local ok, v = engine.op("sleep", "sleep", { ms = ms })
  if not ok then error(v, 0) end
end

--- moor.async(fn, ...) -> future: run fn as a branch of this run.
function M.async(fn, ...)
  need_body("moor.async")
  if type(fn) ~= "function" then error("moor.async needs a function", 2) end
  return engine.async(fn, ...)
end

--- A future that settles (with nil) after d: for moor.race.
function M.timer(d)
  local ms = duration.check(d, 2)
  need_body("moor.timer")
  return engine.async(M.sleep, ms)
end

local function check_futures(list, what)
  if type(list) ~= "table" or #list == 0 then error(what .. " takes a non-empty list of futures", 3) end
  for i, f in ipairs(list) do
    if type(f) ~= "table" or f.done == nil then
      error(("%s: item %d is not a future (make one with moor.async or moor.timer, or pass a signal)"):format(
        what, i), 3)
    end
  end
end

local function wait(mode, futures)
  local ok, v, idx = engine.op("wait", mode, { mode = mode, futures = futures })
  if not ok then error(v, 0) end
  return v, idx
end

-- A signal (ctx.abortSignal, moor.AbortController().signal) is a future too:
-- it settles with its reason when it aborts (lua/moor/signal.lua).

--- Wait for every future; returns their values as an array (raises the first error).
function M.all(futures)
  need_body("moor.all")
  check_futures(futures, "moor.all")
  return (wait("all", futures))
end

--- Wait for the first future to settle; returns its value and its index.
function M.race(futures)
  need_body("moor.race")
  check_futures(futures, "moor.race")
  return wait("race", futures)
end

--- Wait for one future.
function M.await(f)
  need_body("moor.await")
  check_futures({ f }, "moor.await")
  return (wait("await", { f }))
end

--- moor.version(id, min, max): change a live workflow deliberately, as
-- Temporal's patching. New runs record max; runs that reached this point
-- before the marker existed get min.
function M.version(id, min, max)
  need_body("moor.version")
  if type(id) ~= "string" then error("moor.version needs an id string", 2) end
  if math.type(min) ~= "integer" or math.type(max) ~= "integer" or min > max then
    error("moor.version(id, min, max) needs integers with min <= max", 2)
  end
  local ok, v = engine.op("version", id, { min = min, max = max })
  if not ok then error(v, 0) end
  return v
end

---------------------------------------------------------------------------
-- waiting on the world: questions, signals, hooks and webhooks

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

--- moor.AbortController(): { signal, abort(reason) }, as the web's. Pass
-- the signal to ctx.ask to withdraw the question when it aborts; wait for it
-- with signal:wait(), moor.race or moor.all; signal:addEventListener("abort",
-- fn). Both ac.abort(reason) and ac:abort(reason) keep the reason (signal.reason).
function M.AbortController()
  local signal = abort_signals.new()
  local ac = { signal = signal }
  ac.abort = function(a, b)
    if a == ac then a = b end
    engine.abort(signal, a)
  end
  return ac
end

--- The ctx of a workflow body, built from its run's facts (the engine's
-- { callId, toolName, runId, abortSignal, session }): the one place it is made.
function M._ctx(f)
  -- The facts become the ctx (no copy: a parked run keeps one table).
  local ctx = setmetatable(f, WORKFLOW_CTX)
  --- ctx.agent(name): a session with another agent (see moor.session).
  ctx.agent = function(name)
    need_body("ctx.agent")
    if type(name) ~= "string" then error("ctx.agent needs an agent name", 2) end
    return require("moor.session").agent_handle(name, ctx) -- here: moor.session requires moor (a cycle)
  end
  ctx.agents = require("moor.session").agents_snapshot() -- (the same cycle)
  --- ctx.ask(request [, { signal }]) -> { status = "answered", optionId?, text? }
  --   | { status = "cancelled" } | { status = "unavailable" }
  ctx.ask = function(request, opts)
    need_body("ctx.ask")
    local clean = check_request(request)
    local signals = { ctx.abortSignal }
    if opts ~= nil then
      if type(opts) ~= "table" then error("ctx.ask: options must be a table { signal }", 2) end
      if opts.signal ~= nil then
        if not is_signal(opts.signal) then error("ctx.ask: signal must come from moor.AbortController()", 2) end
        signals[2] = opts.signal
      end
    end
    local ok, v = engine.op("ask", "ask", { request = clean, signals = signals })
    if not ok then error(v, 0) end
    return v
  end
  return ctx
end

local Request = {}
Request.__index = Request
--- request:json(): the body decoded as JSON (raises a clear error when it is not).
function Request:json()
  local v, err = json.decode(self.body or "")
  if err then error(errors.new("InvalidJSON", "the webhook request body is not JSON: " .. err), 2) end
  return v
end
function Request:text() return self.body end

local Hook = {}
Hook.__index = Hook

--- hook:await(): park the run until the next delivery; returns its payload
-- (a hook) or a request { method, headers, body, query, :json() } (a webhook).
function Hook.await(self)
  need_body("hook:await")
  local ok, v = engine.op("hook.await", "await", { token = self.token })
  if not ok then error(v, 0) end
  if self.kind == "webhook" then return setmetatable(v, Request) end
  return v
end

--- for request in hook:requests() do ... end: every delivery, in order.
function Hook.requests(self)
  return function() return self:await() end
end

local TOKEN_RULE = "^[%w._:-]+$"

local function make_hook(kind, spec)
  local ok, v = engine.op("hook", kind, spec)
  if not ok then error(v, 0) end
  if v.error then error(errors.new("HookConflict", v.error), 3) end
  return setmetatable({ token = v.token, url = v.url, kind = kind }, Hook)
end

--- moor.createHook{ token? }: a hook resumed by moor.resumeHook(token, payload)
-- or POST /v1/hooks/{token}. Give a token for a deterministic one.
function M.createHook(opts)
  need_body("moor.createHook")
  opts = opts or {}
  if opts.token ~= nil and (type(opts.token) ~= "string" or #opts.token > 200 or not opts.token:match(TOKEN_RULE)) then
    error("moor.createHook: token must be 1-200 letters, digits or . _ : -", 2)
  end
  return make_hook("hook", { kind = "hook", token = opts.token })
end

-- Headers that frame an HTTP answer: moor's, never a respondWith's.
local FRAMING = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true }

--- moor.createWebhook{ respondWith? }: a URL under /.well-known/workflow/v1/webhook/
-- with a 32-byte random token. respondWith = { status, headers, body } answers
-- each delivery (default 202 {"ok":true}).
function M.createWebhook(opts)
  need_body("moor.createWebhook")
  opts = opts or {}
  local rw = opts.respondWith
  if rw ~= nil then
    if type(rw) ~= "table" or (rw.status ~= nil and math.type(rw.status) ~= "integer") then
      error("moor.createWebhook: respondWith is { status = 200, headers = {...}, body = \"...\" }", 2)
    end
    -- Checked here, not at each delivery (which is recorded before it is
    -- answered, so a sender that gets a 500 sends it again): names are
    -- tokens, values strings or numbers without CR, LF or another control
    -- byte, and none of the headers moor frames the answer with. (The HTTP
    -- writer refuses the same, with a 500.)
    if rw.headers ~= nil then
      if type(rw.headers) ~= "table" then
        error("moor.createWebhook: respondWith.headers is a table { [\"Name\"] = \"value\" }", 2)
      end
      for k, v in pairs(rw.headers) do
        local why
        if type(k) ~= "string" or not k:match("^[%w!#$%%&'*+%-.^_`|~]+$") then
          why = "the name is not a header name"
        elseif type(v) ~= "string" and type(v) ~= "number" then
          why = "the value is a " .. type(v) .. ", not a string or number"
        elseif tostring(v):find("[%z\1-\8\10-\31\127]") then
          why = "the value holds CR, LF or another control character"
        elseif FRAMING[k:lower()] then
          why = "moor writes that header itself"
        end
        if why then
          error(("moor.createWebhook: respondWith.headers[%q]: %s"):format(tostring(k), why), 2)
        end
      end
    end
  end
  return make_hook("webhook", { kind = "webhook", respondWith = rw })
end

--- moor.resumeHook(token, payload): deliver to a hook, from a step or plain code.
function M.resumeHook(token, payload)
  if engine.in_body() then
    error("moor.resumeHook belongs in a step: a workflow body is replayed, so the delivery would repeat", 2)
  end
  local kind, err = engine.deliver(token, payload == nil and json.null or payload)
  if not kind then error(errors.new(err.code == "not_found" and "HookNotFound" or "HookError", err.message), 2) end
  return true
end

---------------------------------------------------------------------------
-- approvals and what the model sees (seed 002)

--- approval = moor.approval.always() | once() | never() | function(call) -> boolean,
-- where call = { toolName, toolInput, callId, sessionId }. A gated call asks a
-- person (approve / deny) before it runs; once() remembers an approval for
-- the session.
M.approval = {
  always = function() return { kind = "approval", mode = "always" } end,
  once = function() return { kind = "approval", mode = "once" } end,
  never = function() return { kind = "approval", mode = "never" } end,
}

--- toModelOutput builders: { type = "text", value }, { type = "json", value },
-- { type = "content", value = parts }.
M.toolOutput = {
  text = function(v) return { type = "text", value = tostring(v) } end,
  json = function(v) return { type = "json", value = v } end,
  content = function(parts)
    if type(parts) ~= "table" then error("toolOutput.content takes a list of parts", 2) end
    return { type = "content", value = json.array(parts) }
  end,
}

M.toolOutputPart = {
  text = function(text) return { type = "text", text = tostring(text) } end,
  --- file(base64, { mediaType }): raw bytes are refused; they do not survive
  -- the durable JSON boundary.
  file = function(data, opts)
    if type(data) ~= "string" or data:find("[^A-Za-z0-9+/=\r\n]") then
      error("toolOutputPart.file: data must be a base64 string; raw bytes are refused (encode them first)", 2)
    end
    if type(opts) ~= "table" or type(opts.mediaType) ~= "string" then
      error("toolOutputPart.file: pass { mediaType = \"image/png\" }", 2)
    end
    return { type = "file", data = data, mediaType = opts.mediaType }
  end,
}

---------------------------------------------------------------------------
-- HTTP from steps

local function fetch_core() return require "moor.fetch.core" end

--- moor.fetch(url [, opts]) or moor.fetch{ url, method, headers, body, timeout }
-- -> { status, headers, body } | nil, message, timedOut. Non-blocking on the
-- engine's loop: inside a step or a plain tool it parks only that step. Not
-- durable (a crash re-runs the step), so it belongs in a step; a workflow body
-- must not call it.
function M.fetch(url, opts)
  local req = {}
  if type(url) == "table" then
    for k, v in pairs(url) do req[k] = v end
  else
    req.url = url
    for k, v in pairs(opts or {}) do req[k] = v end
  end
  if engine.in_body() then
    error(errors.new("Fenced", "moor.fetch belongs in a step: a workflow body is replayed, so its I/O would repeat"), 2)
  end
  local f = fetch_core()
  if engine.step_info() then
    return engine.io(function(resume) f.start(req, resume) end)
  end
  -- Plain code (a spec, a tool file's top level): wait on the loop.
  local done
  f.start(req, function(...) done = table.pack(...) end)
  local core = require "moor.core"
  while not done do core.wait(20) end
  return table.unpack(done, 1, done.n)
end

--- moor.call(toolName, input) -> runId | nil, message: start a run (an
-- embedder's entry point when moor is a Lua module; tools are registered
-- with moor.register(name, tool) or moor.load(dir)).
function M.call(name, input, opts)
  local id, err = engine.call(name, json.encode(input == nil and {} or input), opts)
  return id, err
end

--- moor.register(name, tool): make a tool callable by name.
function M.register(name, tool)
  if not M.isTool(tool) then error("moor.register needs a defineTool/defineWorkflowTool value", 2) end
  engine.register(name, M._bind(tool, name, require("moor.core").hash(name)))
end

--- moor.load(dir): load an agent project (tools/, agent.lua, subagents/).
function M.load(dir)
  -- required here: moor.loader requires moor (a real cycle)
  return require("moor.loader").load(dir, engine)
end

--- moor.resume(): load every unfinished run from the database.
function M.resume() return engine.resume_all() end

--- moor.tick() -> ms until the next timer | nil: run what is ready, for a
-- host that owns its loop (a game's frame).
function M.tick() return engine.tick() end

--- moor.run(): drive every run until none is runnable or due (blocking).
function M.run()
  local core = require "moor.core"
  while true do
    local due = engine.tick()
    if not due then return end
    core.wait(due)
  end
end

--- moor.status(runId) -> status, result-or-error JSON text.
function M.status(id) return engine.run_info(id) end

--- pairs in a stable (sorted-key) order: Lua's pairs order differs between
-- processes, so a body that makes ops while iterating must use this.
function M.sortedPairs(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    return a < b
  end)
  local i = 0
  return function()
    i = i + 1
    local k = keys[i]
    if k ~= nil then return k, t[k] end
  end
end

M.testing = setmetatable({}, { __index = function(_, k) return require("moor.testing")[k] end })

return M
