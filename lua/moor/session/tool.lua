--- The built-in session tool (moor__session): a conversation with the agent
-- as a durable run. Its body waits for messages on its inbox (a hook), runs a
-- turn (loop.lua) for each, answers the sole pending question with a message
-- that fits, lets a message steer, queue or join the running turn, and
-- answers ctx.agent senders when their turn ends.
local engine = require "moor.engine"
local core = require "moor.core"
local json = require "moor.json"
local schema = require "moor.schema"
local errors = require "moor.errors"
local store = require "moor.store"
local conf = require "moor.conf"
local define = require "moor.authoring.define"
local flow = require "moor.authoring.flow"
local world = require "moor.authoring.world"
local agent_api = require "moor.authoring.agent"
local calls = require "moor.session.calls"
local loop = require "moor.session.loop"
local tasks = require "moor.session.tasks"

local TOOL, inbox_token, deliver_step, agent_named = agent_api.TOOL, agent_api.inbox_token,
  agent_api.deliver_step, agent_api.agent_named
local toolset, run_turn = calls.toolset, loop.run_turn

local M = {}


-- Does a message answer the sole pending question of this session (or of a
-- tool run it waits on)? A step, so the decision is recorded for replay.
-- Never an approval or a question marked requiresPerson (those take the
-- input channels), and never a message a workflow relayed (ctx.agent).
local answer_step = flow.step("session.answer", function(run_ids, text, relayed)
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

-- (cancel: the turn was cancelled, which also withdraws the run's sign-ins)
local steer_step = flow.step("session.steer", function(run_id, cancel)
  engine.steer(run_id)
  if cancel then engine.auth_withdraw(run_id, "the turn was cancelled") end
  return true
end, { retries = 0 })

local function session_body(input, ctx)
  local agent = agent_named(input.agent)
  if not agent then
    error(errors.FatalError(input.agent and ("unknown agent '%s'"):format(input.agent)
      or "this agent has no agent.lua, so it cannot hold sessions"))
  end
  local inbox = world.createHook { token = inbox_token(ctx.runId) }
  local transcript = {}
  local turns = 0
  local counter = { calls = 0 }
  local queued = {}
  local tools = toolset(agent)
  if input.agent == "agent" and tools.agent then
    -- A delegated root copy does not offer the root-copy target again.
    local copy = {}
    for k, v in pairs(tools) do if k ~= "agent" then copy[k] = v end end
    tools = copy
  end
  local state = {
    approved = {},        -- once() approvals live per session
    tools = tools,
    tasks = tasks.new(ctx.runId, inbox_token(ctx.runId), calls.model_content),
    inline = {},          -- signals of the task tools running in this run (a steer aborts them)
    running = {},         -- child run id -> call id, for the calls the turn waits on
    steered = {},         -- child runs a steering message aborted
    steers = {},          -- steering messages for the model, once the calls settle
    joined = {},          -- reply hooks of messages that joined the running turn
    signal = ctx.abortSignal, -- the session's: plain tool calls' signals follow it
  }
  -- One waiter on the inbox at a time, shared by the idle loop and the turns.
  local pending_delivery
  function state.next_delivery()
    pending_delivery = pending_delivery or flow.async(inbox.await, inbox)
    return pending_delivery
  end
  function state.take_delivery() pending_delivery = nil end
  -- Take what the inbox already holds, without waiting (results of tasks
  -- that ended together reach the model as one message).
  function state.drain()
    for _ = 1, conf.MAX_QUEUED do
      local d
      local f = pending_delivery
      if f then
        if not f.done then return end -- a waiter is parked: deliveries go to it
        d = flow.await(f)
        pending_delivery = nil
      else
        d = inbox:poll()
        if d == nil then return end
      end
      state.during_turn(d)
    end
  end

  -- The runs whose sole pending question a message may answer: the
  -- session, the calls its turn waits on, and its working tasks.
  local function pending_runs()
    local ids = { ctx.runId }
    for id in flow.sortedPairs(state.running) do ids[#ids + 1] = id end
    for _, id in ipairs(state.tasks:working_runs()) do ids[#ids + 1] = id end
    return ids
  end

  -- Steering aborts the signals of the calls the turn waits on (never a task's).
  local function steer_calls(cancel)
    for id in flow.sortedPairs(state.running) do
      state.steered[id] = true
      steer_step(id, cancel)
    end
    for _, sig in ipairs(state.inline) do engine.abort(sig, "steered") end
  end

  -- A message that arrives while a turn waits on tool calls: it answers the
  -- sole pending question if it fits (answers never steer), waits for the
  -- turn (queue), or aborts the calls' signals and reaches the model when
  -- they settle (steer, the default).
  function state.during_turn(d)
    if type(d) == "table" and type(d.task) == "table" then
      state.tasks:on_event(d.task)
      return
    end
    if type(d) == "table" and d.cancelTurn then
      -- A ctx.agent sender's signal aborted: stop the calls, end the turn.
      state.cancel_turn = true
      steer_calls(true)
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
      -- A moor__task_wait ends for it too (a new message arrived).
      for _, sig in ipairs(state.inline) do engine.abort(sig, "message") end
      return
    end
    steer_calls()
    state.steers[#state.steers + 1] = d.message
  end

  -- One turn, for message d or (d nil) for what a task sent; its outcome
  -- answers d's sender and the messages that joined the turn, and a failed
  -- (or cancelled) turn stops the tasks working for it.
  local function take_turn(d)
    turns = turns + 1
    local turn_id = ("turn_%d"):format(turns)
    if d then
      transcript[#transcript + 1] = { role = "user", content = d.message }
      state.principal = d.principal -- (who started the turn: its calls' user-scoped tokens are theirs)
    end
    local ok, outcome = pcall(run_turn, agent, transcript, turn_id, ctx.runId, counter, state, d and d.outputSchema)
    local replies = state.joined
    state.joined = {}
    if d and d.replyTo then table.insert(replies, 1, d.replyTo) end
    if not ok then
      -- A cancelled turn answers its senders "waiting" (neither message nor
      -- error), then the cancel goes on.
      for _, to in ipairs(replies) do pcall(deliver_step, to, { status = "waiting" }) end
      error(outcome, 0)
    end
    if outcome.status == "failed" or outcome.cancelled then
      state.tasks:cancel_turn(turn_id)
      outcome.cancelled = nil
    end
    for _, to in ipairs(replies) do deliver_step(to, outcome) end
  end

  while true do
    local d = table.remove(queued, 1)
    local published = d ~= nil
    if not d then
      d = flow.await(state.next_delivery())
      state.take_delivery()
    end
    if type(d) == "table" and type(d.task) == "table" then
      -- A task's result waits for the next turn; its message starts one.
      if state.tasks:on_event(d.task) then take_turn(nil) end
    elseif type(d) == "table" and type(d.message) == "string" then
      if not published then
        engine.publish("message.received", { role = "user", text = d.message })
      end
      if published or not answer_step(pending_runs(), d.message, d.turnPolicy == "join") then take_turn(d) end
    end
  end
end

--- The built-in session tool (registered by the loader when agent.lua exists).
function M.tool()
  local tool = define.defineWorkflowTool {
    description = "A conversation with the agent (moor's built-in session).",
    inputSchema = schema.object { agent = schema.optional(schema.string()) },
    execute = session_body,
  }
  return define._bind(tool, TOOL, core.hash("moor.session/1"))
end

return M
