--- Sessions: a conversation with the agent, as a durable run whose body is
-- the turn loop below. It waits for messages on its inbox (a hook), calls the
-- model (each call a step, recorded with its usage, so a restart never calls
-- the model again for a finished step), runs the model's tool calls by shape
-- (a plain tool in a step; a workflow tool as a child run the turn parks on),
-- feeds the results back, and ends the turn on a final answer or maxSteps.
local moor = require "moor"
local engine = require "moor.engine"
local core = require "moor.core"
local json = require "moor.json"
local schema = require "moor.schema"
local errors = require "moor.errors"
local signals = require "moor.signal"
local store = require "moor.store"
local conf = require "moor.conf"
local http_status = require "moor.http.status"
local providers = require "moor.providers"
local scripted = require "moor.providers.scripted"

local M = {}

M.TOOL = "moor__session"
M.DEFAULT_MAX_STEPS = conf.MAX_STEPS

local function inbox_token(run_id) return "session-" .. run_id end
M.inbox_token = inbox_token

-- Resolve the agent's model: "provider/model", or a scripted model from
-- moor.testing.script (a table marked kind = "scripted").
local function resolve(model)
  if type(model) == "table" and model.kind == "scripted" then
    return scripted.new(model.script)
  end
  return providers.resolve(model)
end

-- I/O for a provider inside the model step: non-blocking fetch and sleep on
-- the engine's loop.
local step_io = {
  fetch = function(req) return moor.fetch(req) end,
  sleep = function(ms) return engine.io(function(resume) core.after(ms, resume) end) end,
}

local callModel = moor.step("model", function(model, req)
  local provider, err = resolve(model)
  if not provider then error(errors.new(err.code or "config", err.message)) end
  -- A scripted model numbers its calls per session: the session's own count
  -- (replayed state) tells it, so a restart does not renumber them.
  if provider.calls ~= nil and req.callNumber then provider.calls = req.callNumber - 1 end
  local res, perr = provider:complete(req, step_io)
  if not res then
    -- The provider already retried what can be retried; the step does not
    -- (retries = 0), and the turn fails with the provider's code.
    error(errors.new(perr.code or "model_error", perr.message, { status = perr.status }))
  end
  return res
end, { retries = 0 })

-- The agent's tools: model-facing name -> registered name. An agent loaded
-- from agent/ has a toolset; one defined in a spec sees every plain name.
local function toolset(agent)
  if agent.toolset then return agent.toolset end
  local set = {}
  for name in pairs(engine.tools) do
    if name:sub(1, 6) ~= "moor__" and not name:find(".", 1, true) then set[name] = name end
  end
  return set
end

local function model_tools(set)
  local out = json.array {}
  local names = {}
  for name in pairs(set) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local t = engine.tools[set[name]]
    if t then out[#out + 1] = { name = name, description = t.description, inputSchema = t.inputSchema } end
  end
  return out
end

local function error_text(e)
  if type(e) == "table" and e.message then return tostring(e.message) end
  return tostring(e)
end

M.CONTENT_WARN_BYTES = conf.CONTENT_WARN_BYTES

-- What the model reads for a tool's output (toModelOutput when the tool has
-- it): text, JSON text, or content parts. Hooks and the event stream always
-- get the full output.
local function model_content(tool, output)
  if tool.toModelOutput then
    local ok, v = pcall(tool.toModelOutput, output)
    if not ok then return nil, "toModelOutput failed: " .. error_text(v) end
    if type(v) ~= "table" then return nil, "toModelOutput must return moor.toolOutput.text/json/content(...)" end
    if v.type == "text" then return tostring(v.value) end
    if v.type == "json" then
      local text, err = json.encode(v.value)
      if not text then return nil, "toModelOutput json: " .. err end
      return text
    end
    if v.type == "content" then
      local size = #(json.encode(v.value) or "")
      if size > M.CONTENT_WARN_BYTES then
        engine.publish("warning", { message = ("tool '%s' sent %d bytes of content parts to the model (over 3 MiB)")
          :format(tool.name or "?", size) })
      end
      return v.value
    end
    return nil, "toModelOutput returned an unknown type: " .. tostring(v.type)
  end
  if type(output) == "string" then return output end
  return json.encode(output == nil and json.null or output)
end

local APPROVE_OPTIONS = {
  { id = "approve", label = "Approve", style = "primary" },
  { id = "deny", label = "Deny", style = "danger" },
}

-- Does this call need a person's approval before it runs?
local function needs_approval(tool, call, state, session_id)
  local a = tool.approval
  if a == nil then return false end
  if type(a) == "function" then
    local ok, v = pcall(a, { toolName = call.name, toolInput = call.input, callId = call.id, sessionId = session_id })
    return not ok or v == true -- a policy that fails gates the call
  end
  if a.mode == "never" then return false end
  if a.mode == "once" and state.approved[call.name] then return false end
  return true
end

-- Ask for approval of one call, bound to its call id and the SHA-256 of its
-- input's canonical JSON (json.encode sorts keys). Answered only through the
-- input channels, with both; a replay keeps the recorded request (and hash).
local function approve(tool, call, state)
  local request = {
    prompt = ("Allow %s?\n\n%s"):format(call.name, json.encode(call.input)),
    display = "confirmation",
    options = json.array(APPROVE_OPTIONS),
    approval = { callId = call.id, toolName = call.name, inputHash = core.sha256(json.encode(call.input)),
                 input = call.input },
  }
  local ok, answer = engine.op("ask", "ask", { request = request, signals = {} })
  if not ok then error(answer, 0) end
  local approved = answer.status == "answered" and answer.optionId == "approve"
  if approved and tool.approval and tool.approval.mode == "once" then state.approved[call.name] = true end
  return approved
end

-- Run one tool call of the model by the tool's shape. Returns a tool message.
local function run_call(call, session_id, state, turn_id)
  local registered = state.tools[call.name]
  local tool = registered and engine.tools[registered]
  local msg = { role = "tool", toolCallId = call.id, name = call.name }
  if not tool then
    msg.content, msg.isError = ("unknown tool '%s'"):format(tostring(call.name)), true
    return msg
  end
  local ok, verr = schema.validate(tool.inputSchema, call.input, "input")
  if not ok then
    msg.content, msg.isError = "input refused: " .. verr, true
    return msg
  end
  if needs_approval(tool, call, state, session_id) and not approve(tool, call, state) then
    msg.content, msg.isError = ("The user denied this call to %s; it did not run."):format(call.name), true
    engine.publish("action.result", { callId = call.id, toolName = call.name, output = json.null, isError = true,
      denied = true, error = msg.content })
    return msg
  end
  local output
  if tool.shape.suspend == "none" then
    local execute = tool.invoke or tool[tool.entry]
    -- The plain tool's ctx, as under moor call; its signal aborts with the
    -- session's (a cancel).
    local signal = signals.new()
    local outer = state.signal
    local function follow() engine.abort(signal, outer.reason) end
    if outer.aborted then follow() else outer:addEventListener("abort", follow) end
    local ctx = moor._plain_ctx { callId = call.id, toolName = call.name, abortSignal = signal,
      session = { id = session_id, turnId = turn_id } }
    local step = moor.step("tool:" .. call.name, function(input) return execute(input, ctx) end, { retries = 0 })
    local sok, v = pcall(step, call.input)
    outer:removeEventListener("abort", follow)
    if not sok then
      if errors.is(v, "Cancelled") then error(v, 0) end
      msg.content, msg.isError = error_text(v), true
    else
      output = v
    end
  else
    local sok, started = engine.op("child", registered, { tool = registered, input = call.input, callId = call.id,
      session = { id = session_id, turnId = turn_id } })
    if not sok then error(started, 0) end
    if started.error then
      msg.content, msg.isError = started.error.message, true
    else
      state.running[started.runId] = call.id
      local aok, settled = engine.op("child.await", "await", { runId = started.runId })
      state.running[started.runId] = nil
      if not aok then error(settled, 0) end
      if settled.status == "completed" then
        output = settled.result
      elseif state.steered[started.runId] then
        -- A body that rejects after a steering abort settles as interrupted.
        output = { interrupted = true }
      else
        msg.content = settled.error and settled.error.message or ("the tool run " .. settled.status)
        msg.isError = true
      end
    end
  end
  if not msg.isError then
    local content, cerr = model_content(tool, output)
    if content == nil then msg.content, msg.isError = cerr, true else msg.content = content end
  end
  engine.publish("action.result", { callId = call.id, toolName = call.name, output = output == nil and json.null
    or output, isError = msg.isError or false, error = msg.isError and msg.content or nil })
  return msg
end

local function add_usage(total, u)
  if type(u) ~= "table" then return end
  total.inputTokens = total.inputTokens + (math.tointeger(u.inputTokens) or 0)
  total.outputTokens = total.outputTokens + (math.tointeger(u.outputTokens) or 0)
end

-- One turn: model steps and tool calls until a final answer or maxSteps.
local function run_turn(agent, transcript, turn_id, session_id, counter, state, output_schema)
  engine.publish("turn.started", { turnId = turn_id })
  local usage = { inputTokens = 0, outputTokens = 0 }
  local max_steps = agent.maxSteps or M.DEFAULT_MAX_STEPS
  local tools = model_tools(state.tools)
  for step = 1, max_steps do
    counter.calls = counter.calls + 1
    local ok, res = pcall(callModel, agent.model, {
      system = agent.instructions, messages = json.array(transcript), tools = tools, callNumber = counter.calls,
      outputSchema = output_schema, timeout = agent.modelTimeout,
    })
    if not ok then
      if errors.is(res, "Cancelled") then error(res, 0) end
      local e = errors.normalize(res)
      engine.publish("turn.failed", { turnId = turn_id, error = e })
      return { status = "failed", error = e }
    end
    add_usage(usage, res.usage)
    local m = res.message or {}
    local calls = m.toolCalls
    transcript[#transcript + 1] = { role = "assistant", content = m.content, toolCalls = calls }
    if type(calls) ~= "table" or #calls == 0 then
      engine.publish("message.completed", { turnId = turn_id, role = "assistant", text = m.content or "",
        usage = res.usage })
      engine.publish("turn.completed", { turnId = turn_id, steps = step, usage = usage })
      -- The seed's MessageResult: the session now waits for its next
      -- message; message, or data when the turn asked for outputSchema.
      if not output_schema then return { status = "waiting", message = m.content or "" } end
      -- Structured output: the final text must be JSON that fits the schema.
      local data, derr = json.decode(m.content or "")
      local vok, verr
      if derr == nil then vok, verr = schema.validate(output_schema, data, "output") end
      if derr or not vok then
        return { status = "failed", error = { code = "InvalidOutput",
          message = "the model's answer does not match outputSchema: " .. (derr or verr) } }
      end
      return { status = "waiting", data = data }
    end
    for _, call in ipairs(calls) do
      engine.publish("action.started", { turnId = turn_id, callId = call.id, toolName = call.name,
        input = call.input })
    end
    -- Parallel tool calls in one model step run concurrently, as branches;
    -- meanwhile the inbox is watched, so a message can steer or answer.
    local futures = {}
    for i, call in ipairs(calls) do futures[i] = moor.async(run_call, call, session_id, state, turn_id) end
    local all = moor.async(moor.all, futures)
    local results
    while true do
      local v, idx = moor.race { all, state.next_delivery() }
      if idx == 1 then
        results = v
        break
      end
      state.take_delivery()
      state.during_turn(v)
    end
    for _, msg in ipairs(results) do transcript[#transcript + 1] = msg end
    if state.cancel_turn then
      -- The sender's signal aborted: the turn ends here, reported as cancelled.
      state.cancel_turn = false
      engine.publish("turn.completed", { turnId = turn_id, steps = step, usage = usage, cancelled = true })
      return { status = "waiting" }
    end
    -- Steering messages reach the model once the calls they stopped settle.
    for _, text in ipairs(state.steers) do
      transcript[#transcript + 1] = { role = "user", content = text }
    end
    state.steers = {}
  end
  local reason = ("stopped after maxSteps (%d) model steps"):format(max_steps)
  engine.publish("turn.completed", { turnId = turn_id, steps = max_steps, usage = usage, reason = reason })
  return { status = "failed", error = { code = "MaxSteps", message = reason } }
end

-- Deliveries to another run, as steps: recorded, so a replay does not send
-- again (a crash between the delivery and the step's commit can: steps are
-- at-least-once).
local deliver_step = moor.step("agent.deliver", function(token, payload)
  local kind, err = engine.deliver(token, payload)
  if not kind then error(moor.FatalError(err.message)) end
  return true
end, { retries = 0 })
M.deliver_step = deliver_step

local function agent_named(name)
  if name == nil or name == "agent" then return engine.agent end
  return engine.agents and engine.agents[name]
end
M.agent_named = agent_named

-- Does a message answer the sole pending question of this session (or of a
-- tool run it waits on)? A step, so the decision is recorded for replay.
-- Never an approval or a question marked requiresPerson (those take the
-- input channels), and never a message a workflow relayed (ctx.agent).
local answer_step = moor.step("session.answer", function(run_ids, text, relayed)
  if relayed then return false end
  local rows = store.pending_inputs_of(run_ids)
  if not rows or #rows ~= 1 then return false end
  local req = json.decode(rows[1].request)
  if req.approval ~= nil or req.requiresPerson then return false end
  local answer
  for _, o in ipairs(req.options or {}) do
    if text == o.id or text:lower() == tostring(o.label):lower() then answer = { optionId = o.id } end
  end
  if not answer and (req.allowFreeform or req.display == "text" or #(req.options or {}) == 0) then
    answer = { text = text }
  end
  if not answer then return false end
  return engine.answer(rows[1].request_id, answer) == true
end, { retries = 0 })

local steer_step = moor.step("session.steer", function(run_id)
  engine.steer(run_id)
  return true
end, { retries = 0 })

local function session_body(input, ctx)
  local agent = agent_named(input.agent)
  if not agent then
    error(moor.FatalError(input.agent and ("unknown agent '%s'"):format(input.agent)
      or "this agent has no agent.lua, so it cannot hold sessions"))
  end
  local inbox = moor.createHook { token = inbox_token(ctx.runId) }
  local transcript = {}
  local turns = 0
  local counter = { calls = 0 }
  local queued = {}
  local state = {
    approved = {},        -- once() approvals live per session
    tools = toolset(agent),
    running = {},         -- child run id -> call id, for the calls the turn waits on
    steered = {},         -- child runs a steering message aborted
    steers = {},          -- steering messages for the model, once the calls settle
    joined = {},          -- reply hooks of messages that joined the running turn
    signal = ctx.abortSignal, -- the session's: plain tool calls' signals follow it
  }
  -- One waiter on the inbox at a time, shared by the idle loop and the turns.
  local pending_delivery
  function state.next_delivery()
    pending_delivery = pending_delivery or moor.async(inbox.await, inbox)
    return pending_delivery
  end
  function state.take_delivery() pending_delivery = nil end

  local function pending_runs()
    local ids = { ctx.runId }
    for id in moor.sortedPairs(state.running) do ids[#ids + 1] = id end
    return ids
  end

  -- A message that arrives while a turn waits on tool calls: it answers the
  -- sole pending question if it fits (answers never steer), waits for the
  -- turn (queue), or aborts the calls' signals and reaches the model when
  -- they settle (steer, the default).
  function state.during_turn(d)
    if type(d) == "table" and d.cancelTurn then
      -- A ctx.agent sender's signal aborted: stop the calls, end the turn.
      state.cancel_turn = true
      for id in moor.sortedPairs(state.running) do
        state.steered[id] = true
        steer_step(id)
      end
      return
    end
    if type(d) ~= "table" or type(d.message) ~= "string" then return end
    engine.publish("message.received", { role = "user", text = d.message, turnPolicy = d.turnPolicy })
    if answer_step(pending_runs(), d.message, d.turnPolicy == "join") then return end
    if d.turnPolicy == "queue" then
      queued[#queued + 1] = d
      return
    end
    if d.turnPolicy == "join" then
      -- ctx.agent's sends join the running turn: the model reads them at its
      -- next step, nothing is aborted, and the turn's outcome answers them.
      state.steers[#state.steers + 1] = d.message
      if d.replyTo then state.joined[#state.joined + 1] = d.replyTo end
      return
    end
    for id in moor.sortedPairs(state.running) do
      state.steered[id] = true
      steer_step(id)
    end
    state.steers[#state.steers + 1] = d.message
  end

  while true do
    local d = table.remove(queued, 1)
    local published = d ~= nil
    if not d then
      d = moor.await(state.next_delivery())
      state.take_delivery()
    end
    if type(d) == "table" and type(d.message) == "string" then
      if not published then
        engine.publish("message.received", { role = "user", text = d.message })
      end
      if published or not answer_step(pending_runs(), d.message, d.turnPolicy == "join") then
        turns = turns + 1
        transcript[#transcript + 1] = { role = "user", content = d.message }
        local ok, outcome = pcall(run_turn, agent, transcript, ("turn_%d"):format(turns), ctx.runId, counter,
          state, d.outputSchema)
        local replies = state.joined
        state.joined = {}
        if d.replyTo then table.insert(replies, 1, d.replyTo) end
        if not ok then
          -- A cancelled turn answers its senders "waiting" (neither message nor
          -- error), then the cancel goes on.
          for _, to in ipairs(replies) do pcall(deliver_step, to, { status = "waiting" }) end
          error(outcome, 0)
        end
        for _, to in ipairs(replies) do deliver_step(to, outcome) end
      end
    end
  end
end

--- The built-in session tool (registered by the loader when agent.lua exists).
function M.tool()
  local tool = moor.defineWorkflowTool {
    description = "A conversation with the agent (moor's built-in session).",
    inputSchema = schema.object { agent = schema.optional(schema.string()) },
    execute = session_body,
  }
  return moor._bind(tool, M.TOOL, core.hash("moor.session/1"))
end

-- The inbox exists before the session's body first runs, so messages sent
-- right away wait for it instead of getting 404.
function M.inbox_setup(run_id)
  store.ensure_hook(inbox_token(run_id), run_id, core.now())
end

--- ctx.agent(name) for a workflow body: a session handle. handle:send(message,
-- { outputSchema?, signal? }) returns a response; response:result() parks
-- until that message's turn ends and gives { data, message, status, error }.
function M.agent_handle(name, ctx)
  local handle = { name = name }
  local Response = {}
  Response.__index = Response
  function Response:result()
    if self.value == nil then
      local v = self.hook:await()
      if type(v) ~= "table" then v = { status = "failed", error = { code = "BadReply", message = "bad reply" } } end
      self.value = v
    end
    return self.value
  end
  function handle.send(self, message, opts)
    if type(message) ~= "string" or message == "" then error("send needs a message (a non-empty string)", 2) end
    opts = opts or {}
    if not self.sessionId then
      if not agent_named(name) then
        error(errors.new("UnknownAgent", ("unknown agent '%s'; ctx.agents lists the callable ones"):format(name)), 2)
      end
      local ok, started = engine.op("child", M.TOOL, { tool = M.TOOL, input = { agent = name },
        callId = ctx.callId, setup = M.inbox_setup })
      if not ok then error(started, 0) end
      if started.error then error(errors.new("AgentError", started.error.message), 2) end
      self.sessionId = started.runId
      -- On this run's stream and (mirrored) its session's, so a client can
      -- follow the child. (taskId comes with tasks.)
      local s = ctx.session or {}
      engine.publish("agent.started", { name = name, sessionId = started.runId, callId = ctx.callId,
        turnId = s.turnId, streamPath = "/v1/sessions/" .. started.runId .. "/stream" })
    end
    local reply = moor.createHook()
    local inbox = inbox_token(self.sessionId)
    deliver_step(inbox, { message = message, turnPolicy = "join", replyTo = reply.token,
      outputSchema = opts.outputSchema })
    local signal = opts.signal
    if signals.is(signal) then
      -- Aborting the signal cancels the turn the message started or joined;
      -- the response still resolves (as a cancelled turn: "waiting").
      local function cancel_turn()
        if engine.in_body() then deliver_step(inbox, { cancelTurn = true })
        else engine.deliver(inbox, { cancelTurn = true }) end
      end
      if signal.aborted then cancel_turn() else signal:addEventListener("abort", cancel_turn) end
    end
    return setmetatable({ hook = reply, sessionId = self.sessionId }, Response)
  end
  return handle
end

--- The tool that exposes a subagent to the root model (unless tool = false):
-- written on the public API in tools/subagent.lua; the loader binds it.

--- ctx.agents: the callable agents by name, hidden ones included:
-- { agent = { name, description, hidden }, researcher = {...}, ... }.
-- ctx.agents.agent (a copy of the root) always exists; its description is
-- "" when agent.lua has none.
function M.agents_snapshot()
  local out = {}
  if engine.agent then
    out.agent = { name = "agent", description = engine.agent.description or "", hidden = false }
  end
  for name, a in pairs(engine.agents or {}) do
    out[name] = { name = name, description = a.description or "", hidden = a.tool == false }
  end
  return out
end

---------------------------------------------------------------------------
-- the API's side

local send -- below

--- Start a session; with a first message when given. Returns the session id.
function M.create(message)
  local id, err, code = engine.call(M.TOOL, "{}", { setup = M.inbox_setup })
  if not id then return nil, err, code end
  if message ~= nil then
    local ok, serr = send(id, { message = message })
    if not ok then return nil, serr.message end
  end
  return id
end

-- Is run_id the session or one of the runs under it (its tool calls, their
-- subagents' sessions, ...)? Bounded walk up the parent chain.
local function in_session(session_id, run_id)
  for _ = 1, conf.SESSION_DEPTH do
    if run_id == session_id then return true end
    local row = store.run(run_id)
    run_id = row and row.parent_id
    if not run_id then return false end
  end
  return false
end

local function unknown_request(req_id)
  -- The same words as engine.answer's for an id that does not exist.
  return errors.fail("not_found", ("unknown input request '%s'; GET /v1/inputs lists pending ones"):format(req_id))
end

-- Pending questions of the session's tree, oldest first.
local function session_inputs(id)
  return store.pending_inputs_under(id) or {}
end

--- Send to a session: { message, turnPolicy? } or { inputResponses = {...} }.
-- Returns true or nil, err = { code, message }.
send = function(id, body)
  local run = engine.run_details(id)
  if not run or run.tool ~= M.TOOL then return errors.fail("not_found", ("unknown session '%s'"):format(id)) end
  if type(body) ~= "table" then return errors.fail("bad_request", "send a JSON object") end
  local has_msg, has_resp = body.message ~= nil, body.inputResponses ~= nil
  if has_msg == has_resp then
    return errors.fail("bad_request", "send exactly one of message or inputResponses")
  end
  if has_msg then
    if type(body.message) ~= "string" or body.message == "" then
      return errors.fail("bad_request", "message must be a non-empty string")
    end
    local policy = body.turnPolicy or "steer"
    if policy ~= "steer" and policy ~= "queue" then
      return errors.fail("bad_request", "turnPolicy must be \"steer\" or \"queue\"")
    end
    local kind, err = engine.deliver(inbox_token(id), { message = body.message, turnPolicy = policy })
    if not kind then return nil, err end
    return true
  end
  if type(body.inputResponses) ~= "table" or #body.inputResponses == 0 then
    return errors.fail("bad_request", "inputResponses must be a non-empty list of { requestId, optionId? , text? }")
  end
  for _, r in ipairs(body.inputResponses) do
    if type(r) ~= "table" or type(r.requestId) ~= "string" then
      return errors.fail("bad_request", "each input response needs a requestId")
    end
    -- A request of another session is unknown here (nothing about it is told).
    local owner = store.input(r.requestId)
    if not (owner and in_session(id, owner.run_id)) then return unknown_request(r.requestId) end
  end
  for _, r in ipairs(body.inputResponses) do
    local ok, err = engine.answer(r.requestId, { optionId = r.optionId, text = r.text,
      callId = r.callId, inputHash = r.inputHash })
    if not ok then return nil, err end
  end
  return true
end

--- A line a person typed at moor chat in this process (moor_session_line;
-- not reachable over HTTP): it answers the session's sole pending question
-- when it fits (an in-process person channel, so an approval is bound to the
-- request shown, as at a terminal prompt), else it is sent as a message.
-- Returns true or nil, err = { code, message }.
local function typed_line(id, line)
  local run = engine.run_details(id)
  if not run or run.tool ~= M.TOOL then return errors.fail("not_found", ("unknown session '%s'"):format(id)) end
  if type(line) ~= "string" or line == "" then return errors.fail("bad_request", "a line must be non-empty") end
  local pending = session_inputs(id)
  -- Refused (not an option, free text not allowed, already answered): then
  -- it is a message.
  if #pending == 1 and engine.answer_line(pending[1].request_id, line) then return true end
  return send(id, { message = line })
end

--- Send to a session: { message, turnPolicy? } or { inputResponses = {...} }.
-- Returns true or nil, status, code, message (as the HTTP API answers).
function M.send(id, body) return http_status.with_status(send(id, body)) end

--- A line a person typed at moor chat (above): true or nil, status, code, message.
function M.line(id, line) return http_status.with_status(typed_line(id, line)) end

--- A session's state and transcript, from its event log.
function M.details(id)
  local run = engine.run_details(id)
  if not run or run.tool ~= M.TOOL then return nil end
  local transcript = json.array {}
  local state = "idle"
  for _, ev in ipairs(engine.events(id)) do
    local k = ev.kind
    if k == "message.received" or k == "message.completed" then
      local p = json.decode(ev.payload)
      transcript[#transcript + 1] = { role = p.role, text = p.text, turnId = p.turnId }
    elseif k == "turn.started" then
      state = "running"
    elseif k == "turn.completed" or k == "turn.failed" then
      state = "idle"
    end
  end
  if run.status ~= "running" then state = run.status end
  return { id = id, state = state, status = run.status, transcript = transcript, started = run.started,
           updated = run.updated }
end

return M
