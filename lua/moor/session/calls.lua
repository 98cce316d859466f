--- One tool call of the model, run by the tool's shape (a plain tool in a
-- step; a workflow tool as a child run the turn parks on), after a person's
-- approval when the tool asks for one; and what the model reads of its output
-- (toModelOutput). Also the agent's toolset as the model sees it. Used by the
-- turn loop (loop.lua) and the session tool (tool.lua).
local engine = require "moor.engine"
local core = require "moor.core"
local json = require "moor.json"
local schema = require "moor.schema"
local errors = require "moor.errors"
local signals = require "moor.signal"
local conf = require "moor.conf"
local ctx_builder = require "moor.authoring.ctx"
local flow = require "moor.authoring.flow"
local tasktext = require "moor.session.tasktext"

local M = {}

-- The agent's tools: model-facing name -> registered name. An agent loaded
-- from agent/ has a toolset; one defined in a spec sees every plain name.
-- The built-in task tools (tools/moor__task_*.lua): offered to the model
-- only when the agent has a task-lifetime tool, and run in the session's own
-- run (they read its task table as ctx.session.tasks).
local TASK_TOOLS = { moor__task_wait = true, moor__task_cancel = true }
M.TASK_TOOLS = TASK_TOOLS

local function toolset(agent)
  if agent.toolset then return agent.toolset end
  local set = {}
  for name in pairs(engine.tools) do
    if (name:sub(1, 6) ~= "moor__" or TASK_TOOLS[name]) and not name:find(".", 1, true) then set[name] = name end
  end
  return set
end

-- What the model sees of a tool: a serve tool's input takes a taskId, and
-- its description says so (cached on the tool: the same every turn).
local function model_facing(name, t)
  if t.entry ~= "serve" then return { name = name, description = t.description, inputSchema = t.inputSchema } end
  if not t.model_schema then
    t.model_schema = tasktext.serve_input_schema(t.inputSchema)
    t.model_description = tasktext.serve_description(t.description)
  end
  return { name = name, description = t.model_description, inputSchema = t.model_schema }
end

local function model_tools(set)
  local out = json.array {}
  local names, has_tasks = {}, false
  for name, reg in pairs(set) do
    names[#names + 1] = name
    local t = engine.tools[reg]
    if t and t.shape.lifetime == "task" then has_tasks = true end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local t = engine.tools[set[name]]
    if t and (has_tasks or not TASK_TOOLS[name]) then out[#out + 1] = model_facing(name, t) end
  end
  return out
end

local function error_text(e)
  if type(e) == "table" and e.message then return tostring(e.message) end
  return tostring(e)
end

conf.CONTENT_WARN_BYTES = conf.CONTENT_WARN_BYTES

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
      if size > conf.CONTENT_WARN_BYTES then
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

-- What a call's pcall gave: its output, or (a Cancelled goes on) its error
-- as the model's tool error in msg.
local function taken(msg, ok, v)
  if ok then return v end
  if errors.is(v, "Cancelled") then error(v, 0) end
  msg.content, msg.isError = error_text(v), true
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
  -- A serve tool's taskId is moor's, not the tool's: the rest is its input
  -- ("taskId": null, as strict JSON modes send for an absent field, is none).
  local input, task_id = call.input, nil
  if tool.entry == "serve" and type(input) == "table" and input.taskId ~= nil then
    task_id = input.taskId
    if task_id == json.null then task_id = nil end
    if task_id ~= nil and type(task_id) ~= "string" then
      msg.content, msg.isError = "input refused: taskId must be a string (a task id from a receipt)", true
      return msg
    end
    input = {}
    for k, v in pairs(call.input) do if k ~= "taskId" then input[k] = v end end
  end
  local ok, verr = schema.validate(tool.inputSchema, input, "input")
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
  if tool.shape.lifetime == "task" then
    -- The other column: a task. Its tool result is the receipt, at once;
    -- its result comes later, at a step boundary (session/tasks.lua).
    local receipt, code, emsg = state.tasks:call(call, tool, registered, turn_id, input, task_id, state.principal)
    if receipt then
      msg.content = receipt
      engine.publish("action.result", { callId = call.id, toolName = call.name, output = { status = "working",
        taskId = code }, isError = false })
    else
      msg.content, msg.isError = ("%s: %s"):format(code, emsg), true
      engine.publish("action.result", { callId = call.id, toolName = call.name, output = json.null, isError = true,
        error = msg.content, code = code })
    end
    return msg
  elseif TASK_TOOLS[registered] then
    -- In the session's own run; a steering message aborts its signal.
    local signal = signals.new()
    state.inline[#state.inline + 1] = signal
    local ctx = ctx_builder._ctx { callId = call.id, toolName = call.name, runId = session_id, abortSignal = signal,
      session = { id = session_id, turnId = turn_id, principal = state.principal,
        tasks = state.tasks:handle(signal) } }
    local sok, v = pcall(tool.body, input, ctx)
    for i = #state.inline, 1, -1 do if state.inline[i] == signal then table.remove(state.inline, i) end end
    output = taken(msg, sok, v)
  elseif tool.shape.suspend == "none" then
    local execute = tool.invoke or tool[tool.entry]
    -- The plain tool's ctx, as under moor call; its signal aborts with the
    -- session's (a cancel).
    local signal = signals.new()
    local outer = state.signal
    local function follow() engine.abort(signal, outer.reason) end
    if outer.aborted then follow() else outer:addEventListener("abort", follow) end
    local ctx = ctx_builder._plain_ctx { callId = call.id, toolName = call.name, abortSignal = signal,
      session = { id = session_id, turnId = turn_id, principal = state.principal } }
    local step = flow.step("tool:" .. call.name, function(inp) return execute(inp, ctx) end, { retries = 0 })
    local sok, v = pcall(step, input)
    outer:removeEventListener("abort", follow)
    output = taken(msg, sok, v)
  else
    local sok, started = engine.op("child", registered, { tool = registered, input = call.input, callId = call.id,
      session = { id = session_id, turnId = turn_id, principal = state.principal } })
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

M.toolset, M.model_tools, M.run_call, M.model_content = toolset, model_tools, run_call, model_content

return M
