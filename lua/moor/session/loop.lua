--- The turn loop of a session: one turn is model steps (each a step of the
-- session's run, recorded with its usage, so a restart never calls the model
-- again for a finished step) and the model's tool calls, run concurrently as
-- branches while the inbox is watched (a message can steer or answer), until
-- a final answer (checked against outputSchema when the message asked for
-- one) or maxSteps.
local engine = require "moor.engine"
local core = require "moor.core"
local json = require "moor.json"
local schema = require "moor.schema"
local errors = require "moor.errors"
local conf = require "moor.conf"
local providers = require "moor.providers"
local scripted = require "moor.providers.scripted"
local flow = require "moor.authoring.flow"
local world = require "moor.authoring.world"
local tool_calls = require "moor.session.calls"

-- Resolve the agent's model: "provider/model", or a scripted model from
-- moor.testing.script (a table marked kind = "scripted").
local function resolve(model)
  if type(model) == "table" and model.kind == "scripted" then
    return scripted.new(model.script)
  end
  return providers.resolve(model)
end

local function fetch(req) return world.fetch(req) end
local function sleep(ms) return engine.io(function(resume) core.after(ms, resume) end) end

-- I/O for a provider inside the model step: non-blocking fetch and sleep on
-- the engine's loop; the text deltas of a streamed reply go on the session's
-- stream as message.delta (live only: the step's result is what is recorded),
-- and when text already streamed is void (a retry, a restart: the model is
-- asked again) the log says so with message.restarted.
local function step_io(turn_id)
  local info = engine.step_info()
  local run_id = info and info.runId
  if run_id and info.rerun then
    engine.note_step(run_id, "message.restarted", "model", { turnId = turn_id, reason = "restart",
      message = "moor stopped while the model was answering; the model is asked again" })
  end
  return {
    fetch = fetch, sleep = sleep,
    delta = run_id and function(text)
      engine.stream(run_id, "message.delta", { turnId = turn_id, text = text })
    end,
    reset = run_id and function(why)
      engine.note_step(run_id, "message.restarted", "model", { turnId = turn_id, reason = "retry", message = why })
    end,
  }
end

local callModel = flow.step("model", function(model, req)
  local provider, err = resolve(model)
  if not provider then error(errors.new(err.code or "config", err.message)) end
  -- A scripted model numbers its calls per session: the session's own count
  -- (replayed state) tells it, so a restart does not renumber them.
  if provider.calls ~= nil and req.callNumber then provider.calls = req.callNumber - 1 end
  local res, perr = provider:complete(req, step_io(req.turnId))
  if not res then
    -- The provider already retried what can be retried; the step does not
    -- (retries = 0), and the turn fails with the provider's code.
    error(errors.new(perr.code or "model_error", perr.message, { status = perr.status }))
  end
  return res
end, { retries = 0 })

local function add_usage(total, u)
  if type(u) ~= "table" then return end
  total.inputTokens = total.inputTokens + (math.tointeger(u.inputTokens) or 0)
  total.outputTokens = total.outputTokens + (math.tointeger(u.outputTokens) or 0)
end

-- A turn the model would end while a task of it works (or its result waits):
-- it waits, as moor__task_wait does, for a result, a task's message or a new
-- message. Returns true when the model is to be called again.
local function hold(tasks, state, turn_id)
  local held = false
  for _ = 1, math.maxinteger do
    if state.cancel_turn then return false end
    if tasks:pending(turn_id) or #state.steers > 0 then
      state.drain() -- what else arrived with it comes in the same message
      return true
    end
    if not tasks:working_in(turn_id) then return false end
    if not held then
      held = true
      engine.publish("turn.held", { turnId = turn_id, taskIds = json.array(tasks:working_ids()) })
    end
    local d = flow.await(state.next_delivery())
    state.take_delivery()
    state.during_turn(d)
  end
end

-- The model's tool calls of one step, run concurrently as branches while the
-- inbox is watched (a message can steer or answer); their tool messages.
local function run_calls(calls, session_id, state, turn_id)
  local futures = {}
  for i, call in ipairs(calls) do futures[i] = flow.async(tool_calls.run_call, call, session_id, state, turn_id) end
  local all = flow.async(flow.all, futures)
  while true do
    local v, idx = flow.race { all, state.next_delivery() }
    if idx == 1 then return v end
    state.take_delivery()
    state.during_turn(v)
  end
end

-- The model's final answer ends the turn: { status, message | data } or a failure.
local function answer(output_schema, content)
  -- The seed's MessageResult: the session now waits for its next
  -- message; message, or data when the turn asked for outputSchema.
  if not output_schema then return { status = "waiting", message = content or "" } end
  -- Structured output: the final text must be JSON that fits the schema.
  local data, derr = json.decode(content or "")
  local vok, verr
  if derr == nil then vok, verr = schema.validate(output_schema, data, "output") end
  if derr or not vok then
    return { status = "failed", error = { code = "InvalidOutput",
      message = "the model's answer does not match outputSchema: " .. (derr or verr) } }
  end
  return { status = "waiting", data = data }
end

-- One turn: model steps and tool calls until a final answer or maxSteps.
local function run_turn(agent, transcript, turn_id, session_id, counter, state, output_schema)
  engine.publish("turn.started", { turnId = turn_id })
  local usage = { inputTokens = 0, outputTokens = 0 }
  local max_steps = agent.maxSteps or conf.MAX_STEPS
  local tools = tool_calls.model_tools(state.tools)
  local tasks = state.tasks
  local function cancelled(step)
    -- The sender's signal aborted: the turn ends here, reported as cancelled.
    state.cancel_turn = false
    engine.publish("turn.completed", { turnId = turn_id, steps = step, usage = usage, cancelled = true })
    return { status = "waiting", cancelled = true }
  end
  -- maxSteps bounds the model's steps in a row; a held turn that wakes for
  -- what its tasks or the person sent starts a new count (a 24 h task keeps
  -- its turn open while the conversation goes on). steps counts them all.
  local step, last = 0, max_steps
  while step < last do
    step = step + 1
    -- A step boundary: what tasks sent since the last one reaches the model.
    tasks:boundary(transcript, turn_id)
    counter.calls = counter.calls + 1
    local ok, res = pcall(callModel, agent.model, {
      system = agent.instructions, messages = json.array(transcript), tools = tools, callNumber = counter.calls,
      outputSchema = output_schema, timeout = agent.modelTimeout, turnId = turn_id,
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
    if type(calls) == "table" and #calls > 0 then
      transcript[#transcript + 1] = { role = "assistant", content = m.content, toolCalls = calls }
      for _, call in ipairs(calls) do
        engine.publish("action.started", { turnId = turn_id, callId = call.id, toolName = call.name,
          input = call.input })
      end
      for _, msg in ipairs(run_calls(calls, session_id, state, turn_id)) do transcript[#transcript + 1] = msg end
      if state.cancel_turn then return cancelled(step) end
    else
      transcript[#transcript + 1] = { role = "assistant", content = m.content }
      -- No turn ends while a task of it works: it waits, then the model
      -- reads the results (a steering message also calls it again).
      local held = tasks:working_in(turn_id) or tasks:pending(turn_id)
      if held and m.content ~= nil and m.content ~= "" then
        -- What the model says while a task works reaches the person now,
        -- not after the task (seed 000: the conversation continues).
        engine.publish("message.completed", { turnId = turn_id, role = "assistant", text = m.content,
          usage = res.usage })
      end
      local again = held and hold(tasks, state, turn_id)
      if again then last = step + max_steps end
      if state.cancel_turn then return cancelled(step) end
      if not again then
        if not (held and m.content ~= nil and m.content ~= "") then
          engine.publish("message.completed", { turnId = turn_id, role = "assistant", text = m.content or "",
            usage = res.usage })
        end
        engine.publish("turn.completed", { turnId = turn_id, steps = step, usage = usage })
        return answer(output_schema, m.content)
      end
    end
    -- Steering messages reach the model once the calls they stopped settle.
    for _, text in ipairs(state.steers) do
      transcript[#transcript + 1] = { role = "user", content = text }
    end
    state.steers = {}
  end
  local reason = ("stopped after maxSteps (%d) model steps"):format(max_steps)
  engine.publish("turn.completed", { turnId = turn_id, steps = step, usage = usage, reason = reason })
  return { status = "failed", error = { code = "MaxSteps", message = reason } }
end

return { run_turn = run_turn }
