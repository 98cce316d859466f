--- ctx.agent and ctx.agents for a workflow body (the authoring API's side of
-- sessions): a handle that starts or reuses a session with another agent and
-- sends it messages, and the list of callable agents. It also holds how a
-- session run is addressed (its tool name and its inbox hook), the contract
-- between this handle and the turn loop (moor.session), so that the loop
-- depends on the authoring API and never the reverse.
local engine = require "moor.engine"
local store = require "moor.store"
local core = require "moor.core"
local errors = require "moor.errors"
local json = require "moor.json"
local signals = require "moor.signal"
local flow = require "moor.authoring.flow"
local world = require "moor.authoring.world"

local M = {}

--- The registered name of the built-in session tool (moor.session.tool()).
M.TOOL = "moor__session"

local function inbox_token(run_id) return "session-" .. run_id end
M.inbox_token = inbox_token

-- The inbox exists before the session's body first runs, so messages sent
-- right away wait for it instead of getting 404.
function M.inbox_setup(run_id)
  store.ensure_hook(inbox_token(run_id), run_id, core.now())
end

-- Deliveries to another run, as steps: recorded, so a replay does not send
-- again (a crash between the delivery and the step's commit can: steps are
-- at-least-once).
-- (withdraw: a cancelTurn's session, whose own sign-ins, its plain tools',
-- the cancel withdraws too)
local deliver_step = flow.step("agent.deliver", function(token, payload, withdraw)
  local kind, err = engine.deliver(token, payload)
  if not kind then error(errors.FatalError(err.message)) end
  if withdraw then engine.auth_withdraw(withdraw, "the turn was cancelled") end
  return true
end, { retries = 0 })
M.deliver_step = deliver_step

-- The root agent (name nil or "agent") or a declared subagent, as loaded.
local function agent_named(name)
  if name == nil or name == "agent" then return engine.agent end
  return engine.agents and engine.agents[name]
end
M.agent_named = agent_named

-- The root-copy target `agent` is offered only to a top-level root context
-- (seed 000): not to a run of a session held by a copy of the root or by a
-- declared subagent, whose session input names its agent (the root's names
-- none). session: a run's ctx.session ({ id?, turnId? }) or nil.
local function without_root_copy(session)
  local id = type(session) == "table" and session.id
  if not id then return false end
  local row = store.run(id)
  local input = row and row.tool == M.TOOL and json.decode(row.input or "")
  return type(input) == "table" and input.agent ~= nil
end
M.without_root_copy = without_root_copy

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
      if name == "agent" and agent_named(name) and without_root_copy(ctx.session) then
        error(errors.new("UnknownAgent", "'agent' (a copy of the root agent) is offered only to the root agent's "
          .. "own session, not to a copy or a subagent; ctx.agents lists the callable ones"), 2)
      end
      if not agent_named(name) then
        error(errors.new("UnknownAgent", ("unknown agent '%s'; ctx.agents lists the callable ones"):format(name)), 2)
      end
      local ok, started = engine.op("child", M.TOOL, { tool = M.TOOL, input = { agent = name },
        callId = ctx.callId, setup = M.inbox_setup })
      if not ok then error(started, 0) end
      if started.error then error(errors.new("AgentError", started.error.message), 2) end
      self.sessionId = started.runId
      -- On this run's stream and (mirrored) its session's, so a client can
      -- follow the child: the call being served (a serve task's latest) and,
      -- when the run is a task, its id.
      local s = ctx.session or {}
      local run = engine.current()
      local task = run and run.session
      engine.publish("agent.started", { name = name, sessionId = started.runId, callId = ctx.callId,
        turnId = s.turnId, taskId = task and task.taskId,
        streamPath = "/v1/sessions/" .. started.runId .. "/stream" })
    end
    local reply = world.createHook()
    local inbox = inbox_token(self.sessionId)
    -- (a local child runs as the caller's principal: its user-scoped sign-ins are theirs)
    deliver_step(inbox, { message = message, turnPolicy = "join", replyTo = reply.token,
      outputSchema = opts.outputSchema, principal = (ctx.session or {}).principal })
    local signal = opts.signal
    if signals.is(signal) then
      -- Aborting the signal cancels the turn the message started or joined;
      -- the response still resolves (as a cancelled turn: "waiting").
      local function cancel_turn()
        if engine.in_body() then deliver_step(inbox, { cancelTurn = true }, self.sessionId)
        elseif engine.deliver(inbox, { cancelTurn = true }) then
          engine.auth_withdraw(self.sessionId, "the turn was cancelled")
        end
      end
      if signal.aborted then cancel_turn() else signal:addEventListener("abort", cancel_turn) end
    end
    return setmetatable({ hook = reply, sessionId = self.sessionId }, Response)
  end
  return handle
end

--- ctx.agents: the callable agents by name, hidden ones included:
-- { agent = { name, description, hidden }, researcher = {...}, ... }.
-- ctx.agents.agent (a copy of the root) exists in a top-level root context
-- (session: the run's ctx.session); its description is "" when agent.lua
-- has none.
function M.agents_snapshot(session)
  local out = {}
  if engine.agent and not without_root_copy(session) then
    out.agent = { name = "agent", description = engine.agent.description or "", hidden = false }
  end
  for name, a in pairs(engine.agents or {}) do
    out[name] = { name = name, description = a.description or "", hidden = a.tool == false }
  end
  return out
end

return M
