--- moor.testing: drive tools from busted specs inside the host (`moor test`).
--
--   local t = require("moor").testing
--   local result, err, run = t.call(tool, { n = 1 })
--
-- Runs use the test database `moor test` opened, and the real engine: steps
-- are recorded, timers really wait (use short durations) unless the spec
-- calls t.useVirtualClock() and moves time with t.advance("4h"), and
-- t.restart(run) drops a run from memory and replays it from its log.
local define = require "moor.authoring.define"
local engine = require "moor.engine"
local session = require "moor.session"
local http_status = require "moor.http.status"
local store = require "moor.store"
local core = require "moor.core"
local json = require "moor.json"
local loader = require "moor.loader"
local harness_host = require "moor.harness.host"
local harness_script = require "moor.harness.script"
local tokens = require "moor.auth.tokens"
local clock = require "moor.clock"
local duration = require "moor.duration"
local S = require "moor.engine.state"

local M = {}

local anon = 0

local function resolve(tool)
  if type(tool) == "string" then
    if not engine.tools[tool] then error("unknown tool '" .. tool .. "'", 3) end
    return tool
  end
  if not define.isTool(tool) then
    error("moor.testing: pass a tool name or a defineTool/defineWorkflowTool value", 3)
  end
  if not tool.name then
    anon = anon + 1
    define._bind(tool, "spec_tool_" .. anon, core.hash(tostring(anon)))
  end
  engine.register(tool.name, tool)
  return tool.name
end

-- Steps waiting on I/O, or harness agents' turns under way: real work that
-- reports back into a run, which the virtual clock waits for in real time.
local function busy() return S.io_inflight > 0 or S.outside > 0 end

-- On the virtual clock: tick until nothing is ready now and no real work is
-- under way (waiting at most REAL_WAIT ms of real time for it); returns ms
-- until the next timer, or nil.
local REAL_WAIT = 60000
local function settle()
  local deadline = core.mono() + REAL_WAIT * 1000
  while true do
    local due = engine.tick()
    if busy() then
      if core.mono() > deadline then
        error(("moor.testing: real work (a step's I/O, a harness agent's turn) is still under way after %d ms")
          :format(REAL_WAIT), 3)
      end
      core.wait(math.min(due or 5, 5))
    elseif due ~= 0 then
      return due
    end
  end
end

--- Drive the engine until run id settles, or parks: nothing is due within
-- max_wait ms (default 2000; a run asleep for an hour counts as parked). On
-- the virtual clock a run waiting on a timer is parked: t.advance moves it.
function M.drive(id, max_wait)
  max_wait = max_wait or 2000
  while true do
    if clock.is_virtual() then
      settle()
      return engine.run_status(id)
    end
    local due = engine.tick()
    local status = engine.run_status(id)
    if status ~= "running" then return status end
    if not due or due > max_wait then return status end
    core.wait(due)
  end
end

-- busted's instance (`moor test` loaded it; nothing here when specs run
-- otherwise), to restore the wall clock when a spec ends.
local restore_subscribed = false
local function restore_after_spec()
  if restore_subscribed then return end
  local busted = package.loaded["busted"]
  local subscribe = type(busted) == "table" and busted.subscribe
  if not subscribe then return end
  restore_subscribed = true
  subscribe({ "test", "end" }, function()
    clock.use_wall()
    return nil, true
  end)
end

--- Run the engine on a virtual clock for the rest of this spec (the `it`;
-- the wall clock is back when it ends, or after t.useRealClock()). It
-- starts at start_ms (ms since the epoch; default: now) and moves only with
-- t.advance: timers, step retries, run and event times, and os.time/os.date
-- in bodies all read it. Returns the virtual now.
function M.useVirtualClock(start_ms)
  if start_ms ~= nil and math.type(start_ms) ~= "integer" then
    error("t.useVirtualClock(start): start is ms since the epoch (an integer), or nothing for now", 2)
  end
  clock.use_virtual(start_ms)
  restore_after_spec()
  return clock.now()
end

--- Back to the wall clock (timers recorded meanwhile fall due at their
-- virtual due times, which are in the past or the future of the wall clock).
function M.useRealClock() clock.use_wall() end

--- The engine's now (ms since the epoch): the virtual clock's when it is on.
function M.now() return clock.now() end

--- Move the virtual clock forward by d ("4h", "90s", or ms), firing every
-- timer that falls due on the way in due order, each at its own due time,
-- with the engine run to quiescence after each (so what a timer starts,
-- a step or a later timer, happens at that time). Returns the virtual now.
function M.advance(d)
  if not clock.is_virtual() then
    error("t.advance needs the virtual clock: call t.useVirtualClock() first in this spec", 2)
  end
  local ms, err = duration.parse(d)
  if not ms then error("t.advance: " .. err, 2) end
  local target = clock.now() + ms
  while true do
    local due = settle()
    if not due or clock.now() + due > target then break end
    clock.set(clock.now() + due)
  end
  clock.set(target)
  settle()
  return clock.now()
end

local function outcome(id)
  local status, text = engine.run_info(id)
  local v = json.decode(text)
  if status == "completed" then return v, nil, id end
  return nil, v, id
end

--- Start a run of tool with input and drive it to the end.
-- Returns result, nil, runId on success; nil, { code, message }, runId on failure.
function M.call(tool, input, opts)
  local name = resolve(tool)
  local id, err, code = engine.call(name, json.encode(input == nil and {} or input), opts)
  if not id then return nil, { code = code, message = err } end
  M.drive(id)
  return outcome(id)
end

--- Start a run and drive it until it settles or parks (on a question, a
-- hook, or nothing due); drive it on with t.drive(id). opts.noInput: the run
-- has no channel for questions (ctx.ask answers "unavailable").
function M.start(tool, input, opts)
  local name = resolve(tool)
  local id, err, code = engine.call(name, json.encode(input == nil and {} or input), opts)
  if not id then return nil, { code = code, message = err } end
  return id
end

--- The run's outcome now: result, err, runId (both nil while it runs).
function M.outcome(id)
  local status = engine.run_info(id)
  if status == "running" then return nil, nil, id end
  return outcome(id)
end

--- Pending questions of a run and of the runs it started (a session's tool
-- calls): { { requestId, runId, request }, ... }.
function M.inputs(id)
  local ids = { [id] = true }
  local rows = store.run_tree(id)
  for _, r in ipairs(rows or {}) do ids[r.id] = true end
  local out = {}
  for _, q in ipairs(engine.inputs()) do
    if ids[q.runId] then out[#out + 1] = q end
  end
  return out
end

--- Answer a question as the HTTP API would: true or nil, status, code,
-- message. Given a function instead, t.answer(function(turn) ... end) is a
-- scripted harness agent for t.workflow (seed 001 "Testing a tool").
function M.answer(a, ...)
  if type(a) == "function" then return { kind = "harness-script", fn = a } end
  return http_status.with_status(engine.answer(a, ...))
end

--- Complete the sign-in that input request requestId shows, as if the person
-- signed in and the provider gave { token, refreshToken?, expiresIn? (s) }:
-- the token is stored for the sign-in's connection and principal, and the
-- callback resumes the run (its step runs again). true or nil, err.
function M.authorize(request_id, grant)
  local state = engine.auth_state(request_id)
  local pending = state and tokens.pending(state)
  if not pending then
    return nil, { code = "not_found", message = "no sign-in is waiting for " .. tostring(request_id) }
  end
  grant = grant or {}
  local now = core.now()
  tokens.put(pending.connection, pending.principal, { access_token = grant.token or "test-token",
    refresh_token = grant.refreshToken, expires_at = grant.expiresIn and now + grant.expiresIn * 1000 or nil,
    obtained_at = now })
  tokens.drop_pending(state)
  return engine.auth_callback(state, { authorized = true })
end

--- Decline it, as a provider's callback with error=access_denied would.
function M.decline(request_id)
  local state = engine.auth_state(request_id)
  if not state then
    return nil, { code = "not_found", message = "no sign-in is waiting for " .. tostring(request_id) }
  end
  return engine.auth_callback(state, { error = "access_denied", error_description = "the person declined" })
end

local REPLY = harness_script.REPLY
local function reply(reason, error_message)
  return setmetatable({ reason = reason, error = error_message }, REPLY)
end

--- A scripted turn's other endings: return one from t.answer's function, or
-- give one in place of it (agents = { reviewer = t.reply.timedOut() }).
M.reply = {
  timedOut = function() return reply("timed-out") end,
  failed = function(message) return reply("failed", message or "the scripted harness failed") end,
  silent = function() return reply("unanswered") end,
  interrupted = function() return reply("interrupted") end,
  cancelled = function() return reply("cancelled") end,
}

--- Run a workflow tool with its harness agents replaced by scripts:
-- t.workflow(tool, input, { agents = { reviewer = t.answer(function(turn) ... end) } })
-- -> { value, error, runId, status }. A script's turn has prompt, schema and
-- turn.tool(name, input?), which goes through the checks and the handler a
-- real call does: { kind = "result", output } | { kind = "refused", code,
-- error } | { kind = "failed", outcome = "failed", error }. What the function
-- returns is the turn's answer (checked against the turn's schema).
-- opts.timeout: ms the run may take (60000).
function M.workflow(tool, input, opts)
  opts = opts or {}
  local scripts = {}
  for key, a in pairs(opts.agents or {}) do
    if type(a) == "table" and a.kind == "harness-script" then
      scripts[key] = a.fn
    elseif getmetatable(a) == REPLY then
      scripts[key] = function() return a end
    else
      error(("moor.testing.workflow: agents.%s must be t.answer(function(turn) ... end) or a t.reply.*()")
        :format(tostring(key)), 2)
    end
  end
  local name = resolve(tool)
  harness_host.script(scripts, harness_script.run)
  local id, err, code = engine.call(name, json.encode(input == nil and {} or input), opts.call)
  if not id then
    harness_host.script(nil)
    return { error = { code = code, message = err } }
  end
  local deadline = core.mono() + (opts.timeout or 60000) * 1000
  while core.mono() < deadline do
    local due = engine.tick()
    if engine.run_status(id) ~= "running" then break end
    if harness_host.busy() then
      core.wait(math.min(due or 5, 5))
    elseif due and (due == 0 or (due <= 2000 and not clock.is_virtual())) then
      core.wait(due) -- (on the virtual clock a timer waits for t.advance)
    else
      break
    end
  end
  harness_host.script(nil)
  local v, e = M.outcome(id)
  return { value = v, error = e, runId = id, status = engine.run_status(id) }
end
--- Cancel a run as the HTTP API would.
function M.cancel(id) return http_status.with_status(engine.cancel(id)) end
--- Deliver to a hook or webhook as the HTTP API would: its kind and
-- respondWith, or nil, status, code, message.
function M.deliver(...) return http_status.with_status(engine.deliver(...)) end

--- One scheduler round: run what is ready now.
function M.step() return engine.tick() end

--- Forget run id's in-memory state and replay it from the log, then drive it.
function M.restart(id)
  local ok, err = engine.reload(id)
  if not ok then return nil, { message = err } end
  M.drive(id)
  return M.outcome(id)
end

--- The run's event log: { {seq, op, kind, name, payload = decoded}, ... }.
function M.events(id)
  local evs = engine.events(id)
  for _, e in ipairs(evs) do e.payload = json.decode(e.payload) end
  return evs
end

--- A scripted model for an agent: model = t.script(function(turn) ... end)
-- or t.script{ reply1, reply2, ... }. A reply is final text, or
-- { text?, toolCalls = { { name, input, id? } } }, or { error = { code, message } }.
function M.script(script)
  return { kind = "scripted", script = script }
end

--- Hold a conversation with an agent definition (moor.defineAgent{...},
-- typically with a t.script model): sends each message, drives the session
-- until it is idle, and returns { sessionId, events, results, transcript }.
-- results are the action.result payloads; events the whole log, decoded.
function M.converse(agent, messages, opts)
  local saved = engine.agent
  engine.agent = agent
  if not engine.tools[session.TOOL] then engine.register(session.TOOL, session.tool()) end
  loader.register_builtins(engine) -- the built-in tools (tools/), as for every agent
  local id = opts and opts.sessionId or assert(session.create())
  for _, m in ipairs(type(messages) == "table" and messages or { messages }) do
    -- (session.send answers as the HTTP API: nil, status, code, message)
    local ok, _, _, message = session.send(id, type(m) == "table" and m or { message = m })
    if not ok then engine.agent = saved; error(message, 2) end
    M.drive(id, opts and opts.maxWait)
  end
  engine.agent = saved
  local events, results = M.events(id), {}
  for _, e in ipairs(events) do
    if e.kind == "action.result" then results[#results + 1] = e.payload end
  end
  return { sessionId = id, events = events, results = results, transcript = session.details(id).transcript }
end

return M
