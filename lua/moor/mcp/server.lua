--- The Model Context Protocol server, whatever carries it (stdio.lua, one
-- per transport): JSON-RPC 2.0 messages in, messages out through the send
-- function the transport gives. It maps MCP onto the engine:
--   tools/list              the agent's tools (not moor__* internals)
--   tools/call              a durable run (engine.call); its result, or its error as isError
--   notifications/progress  each progress snapshot of the run (with a progressToken)
--   notifications/cancelled engine.cancel: the run's cleanup runs as for any cancel
--   elicitation/create      a ctx.ask (or an approval) of the run, when the client can elicit
--   tasks (the 2025-11-25 extension) for task tools (task entry points, background tools, the workflow
--   tool): a task-augmented tools/call answers with the task at once (its id is the run's id);
--   tasks/get, tasks/result, tasks/list, tasks/cancel read and drive the run; statuses map
--   running -> working (input_required while a question is pending), completed, failed, cancelled.
local core = require "moor.core"
local json = require "moor.json"
local engine = require "moor.engine"
local store = require "moor.store"

local M = {}

local encode, decode = json.encode, json.decode

-- The protocol versions served, newest first (the official TypeScript SDK's).
M.VERSIONS = { "2025-11-25", "2025-06-18" }
local SUPPORTED = {}
for _, v in ipairs(M.VERSIONS) do SUPPORTED[v] = true end
M.SUPPORTED = SUPPORTED

-- JSON-RPC error codes
local PARSE, INVALID_REQUEST, NO_METHOD, INVALID_PARAMS = -32700, -32600, -32601, -32602
M.PARSE_ERROR, M.INVALID_REQUEST, M.METHOD_NOT_FOUND, M.INVALID_PARAMS = PARSE, INVALID_REQUEST, NO_METHOD,
  INVALID_PARAMS

local RELATED = "io.modelcontextprotocol/related-task"
local POLL_MS = 500 -- (the poll interval a task suggests)
local HINTS = { "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint" }
local TERMINAL = { ["run.completed"] = "completed", ["run.failed"] = "failed", ["run.cancelled"] = "cancelled" }

-- The agent's tools as MCP lists them, by name.
local function listed(name, tool)
  if name:sub(1, 6) == "moor__" or name:find(".", 1, true) then return nil end
  -- (a serve tool is offered with its own inputSchema: a call over MCP starts a task of its own, whose
  -- first reply is the result, as under moor call; the session's taskId field is not part of it)
  local t = { name = name, description = tool.description, inputSchema = tool.inputSchema or { type = "object" } }
  if type(tool.outputSchema) == "table" and tool.outputSchema.type == "object" then
    t.outputSchema = tool.outputSchema
  end
  local ann
  for _, h in ipairs(HINTS) do
    if tool[h] ~= nil then
      ann = ann or {}
      ann[h] = tool[h]
    end
  end
  t.annotations = ann
  -- a task tool may run as an MCP task (or to completion as an ordinary call)
  if tool.shape and tool.shape.lifetime == "task" then t.execution = { taskSupport = "optional" } end
  return t
end

local function is_task_tool(tool) return tool.shape and tool.shape.lifetime == "task" end

--- A run as an MCP task (its id is the run's), or nil when there is no such run.
function M.task_of(run_id)
  local run = type(run_id) == "string" and engine.run_details(run_id)
  if not run then return nil end
  local status, message = run.status, nil
  if status == "running" then
    if run.cancelRequested then
      status, message = "cancelled", "cancel requested; its cleanup runs"
    elseif #(store.pending_inputs_under(run_id) or {}) > 0 then
      status, message = "input_required", "a question waits for an answer"
    else
      status = "working"
    end
  elseif status == "failed" and type(run.error) == "table" then
    message = tostring(run.error.message)
  end
  return { taskId = run.id, status = status, statusMessage = message, ttl = json.null, createdAt = run.started,
    lastUpdatedAt = run.updated, pollInterval = POLL_MS }
end

function M.list_tools()
  local names = {}
  for name, tool in pairs(engine.tools) do
    if listed(name, tool) then names[#names + 1] = name end
  end
  table.sort(names)
  local out = {}
  for i, name in ipairs(names) do out[i] = listed(name, engine.tools[name]) end
  return json.array(out)
end

-- A toModelOutput part as MCP content.
local function part(p)
  if type(p) ~= "table" then return { type = "text", text = tostring(p) } end
  if p.type == "text" then return { type = "text", text = tostring(p.text) } end
  if p.type == "file" and type(p.mediaType) == "string" and p.mediaType:match("^image/") then
    return { type = "image", data = p.data, mimeType = p.mediaType }
  end
  if p.type == "file" and type(p.mediaType) == "string" and p.mediaType:match("^audio/") then
    return { type = "audio", data = p.data, mimeType = p.mediaType }
  end
  if p.type == "file" then
    return { type = "resource", resource = { uri = "moor:file", mimeType = p.mediaType, blob = p.data } }
  end
  return { type = "text", text = encode(p) }
end

local function text_result(text, is_error)
  return { content = json.array { { type = "text", text = text } }, isError = is_error or nil }
end

--- A settled run as a tools/call result: status, the payload of its last event.
function M.call_result(tool, status, payload)
  local v = decode(payload)
  if status == "completed" then
    local res
    if tool and tool.toModelOutput then
      local ok, o = pcall(tool.toModelOutput, v)
      if not ok or type(o) ~= "table" then
        return text_result("toModelOutput failed: " .. tostring(ok and "it must return moor.toolOutput.*" or o), true)
      end
      if o.type == "text" then res = text_result(tostring(o.value))
      elseif o.type == "json" then res = text_result(encode(o.value))
      elseif o.type == "content" then
        local parts = {}
        for i, p in ipairs(o.value) do parts[i] = part(p) end
        res = { content = json.array(parts) }
      else
        return text_result("toModelOutput returned an unknown type: " .. tostring(o.type), true)
      end
    else
      res = text_result(type(v) == "string" and v or payload)
    end
    if tool and tool.outputSchema and type(v) == "table" then res.structuredContent = v end
    return res
  end
  local e = type(v) == "table" and v or {}
  if status == "cancelled" then return text_result(e.message or "the run was cancelled", true) end
  return text_result(("%s: %s"):format(tostring(e.code or "Error"), tostring(e.message or payload)), true)
end

-- A question as an elicitation form: options as an enum, free text as a string.
function M.elicit_params(request)
  local props, required = {}, {}
  local opts = request.options or {}
  local free = #opts == 0 or request.allowFreeform or request.display == "text"
  if #opts > 0 then
    local ids, names = {}, {}
    for i, o in ipairs(opts) do ids[i], names[i] = o.id, o.label or o.id end
    props.choice = { type = "string", title = "Choose", enum = json.array(ids), enumNames = json.array(names) }
    if not free then required[#required + 1] = "choice" end
  end
  if free then
    props.text = { type = "string", title = #opts > 0 and "Or answer in your own words" or "Your answer" }
    if #opts == 0 then required[#required + 1] = "text" end
  end
  return { mode = "form", message = tostring(request.prompt or "moor asks"),
    requestedSchema = { type = "object", properties = props, required = json.array(required) } }
end

-- An accepted form's content as a moor answer.
local function form_answer(content)
  content = type(content) == "table" and content or {}
  if type(content.text) == "string" and content.text ~= "" then return { text = content.text } end
  if type(content.choice) == "string" then return { optionId = content.choice } end
  return nil
end

--- A server for one client: send(message_table, rel) writes a message (rel:
-- the id of the client's request it belongs to, if any: a streamable HTTP
-- transport sends it on that request's stream). Returns
-- { receive = fn(text), close = fn() }.
function M.new(send)
  local self = {}
  local calls = {}     -- run id -> { id, token, progress, tool }
  local by_request = {} -- encoded request id -> run id
  local elicits = {}   -- our request id -> { requestId, request }
  local asked = {}     -- question request id -> true (sent once)
  local client_caps = {}
  local initialized = false
  local tasks = {}     -- run ids of the tasks this client created, in order
  local results = {}   -- run id -> request ids of the tasks/result calls waiting on it
  local next_id = 0

  local function reply(id, result) send({ jsonrpc = "2.0", id = id, result = result }, id) end
  local function fail(id, code, message, data)
    send({ jsonrpc = "2.0", id = id == nil and json.null or id,
      error = { code = code, message = message, data = data } }, id)
  end
  local function notify(method, params, rel) send({ jsonrpc = "2.0", method = method, params = params }, rel) end

  local function task_result(run_id, tool, status, payload)
    local res = M.call_result(tool, status, payload)
    res._meta = { [RELATED] = { taskId = run_id } }
    return res
  end

  local function finish(run_id, status, payload)
    local c = calls[run_id]
    if not c then return end
    calls[run_id] = nil
    local waiting = results[run_id]
    results[run_id] = nil
    for _, rid in ipairs(waiting or {}) do reply(rid, task_result(run_id, c.tool, status, payload)) end
    if c.task then return end
    by_request[encode(c.id)] = nil
    if c.cancelled then return end -- (the client cancelled it: no answer, as the specification says)
    reply(c.id, M.call_result(c.tool, status, payload))
  end

  local function elicit(c, payload)
    local p = decode(payload)
    if type(p) ~= "table" or type(p.request) ~= "table" or asked[p.requestId] then return end
    if p.request.kind == "authorization" then return end -- (a sign-in is a browser's: the other channels)
    asked[p.requestId] = true
    next_id = next_id + 1
    local id = "moor-elicit-" .. next_id
    elicits[id] = { requestId = p.requestId, request = p.request }
    local params = M.elicit_params(p.request)
    if c.task then
      -- A task's questions go out on a tasks/result call's stream; until one comes, they wait.
      params._meta = { [RELATED] = { taskId = c.run } }
      local rel = results[c.run] and results[c.run][1]
      local msg = { jsonrpc = "2.0", id = id, method = "elicitation/create", params = params }
      if rel == nil then
        c.queued = c.queued or {}
        c.queued[#c.queued + 1] = msg
        return
      end
      return send(msg, rel)
    end
    send({ jsonrpc = "2.0", id = id, method = "elicitation/create", params = params }, c.id)
  end

  local unsubscribe = engine.subscribe(function(run_id, _, kind, _, payload)
    local c = calls[run_id]
    if not c then return end
    if TERMINAL[kind] then return finish(run_id, TERMINAL[kind], payload) end
    if (kind == "progress" or kind == "action.partial") and c.token ~= nil and not c.task then
      c.progress = c.progress + 1
      local v = decode(payload)
      if kind == "action.partial" and type(v) == "table" then v = v.output end
      notify("notifications/progress", { progressToken = c.token, progress = c.progress,
        message = type(v) == "string" and v or encode(v) }, c.id)
    elseif kind == "input.requested" and client_caps.elicitation then
      elicit(c, payload)
    end
  end)

  local start_call -- (below)
  local approvals = {}    -- our request id -> the tools/call waiting on its person's approval
  local approved_once = {} -- tool name -> true: an approval.once() given in this MCP session

  -- A client's answer to one of our requests (an elicitation).
  local function on_response(msg)
    local gate = approvals[msg.id]
    if gate then
      approvals[msg.id] = nil
      local res = msg.result
      local content = type(res) == "table" and res.action == "accept" and type(res.content) == "table" and res.content
      if content and content.choice == "approve" then
        local a = gate.tool.approval
        if type(a) == "table" and a.mode == "once" then approved_once[gate.name] = true end
        return start_call(gate.id, gate.params, gate.tool, gate.name, gate.args)
      end
      return reply(gate.id, text_result(("%s was not approved: the person declined it, so it did not run"):format(
        gate.name), true))
    end
    local e = elicits[msg.id]
    if not e then return end
    elicits[msg.id] = nil
    local res = msg.result
    if type(res) == "table" and res.action == "accept" then
      local answer = form_answer(res.content)
      local ok, err
      if answer then ok, err = engine.answer(e.requestId, answer, true) end
      if not ok then
        io.stderr:write(("moor mcp: the elicitation's answer to %s was refused (%s); the question stays open\n")
          :format(e.requestId, err and err.message or "no choice or text"))
      end
      return
    end
    -- decline, cancel, or an error: the question is withdrawn (cancelled)
    local ok, err = engine.withdraw_input(e.requestId)
    if not ok then io.stderr:write(("moor mcp: %s\n"):format(err.message)) end
  end

  local methods = {}

  function methods.initialize(id, params)
    local v = params.protocolVersion
    if not SUPPORTED[v] then
      return fail(id, INVALID_PARAMS, "Unsupported protocol version",
        { supported = json.array(M.VERSIONS), requested = v == nil and json.null or v })
    end
    client_caps = type(params.capabilities) == "table" and params.capabilities or {}
    initialized = true
    reply(id, { protocolVersion = v, capabilities = { tools = { listChanged = false },
      tasks = { list = {}, cancel = {}, requests = { tools = { call = {} } } } },
      serverInfo = { name = "moor", version = tostring(core.version or "0") },
      instructions = engine.agent and engine.agent.description or nil })
  end

  function methods.ping(id) reply(id, {}) end

  methods["tools/list"] = function(id) reply(id, { tools = M.list_tools() }) end

  methods["tools/call"] = function(id, params)
    local name = params.name
    if type(name) ~= "string" then return fail(id, INVALID_PARAMS, "tools/call needs params.name, a tool's name") end
    local tool = engine.tools[name]
    if not tool or not listed(name, tool) then
      return fail(id, INVALID_PARAMS, ("Unknown tool: %s (tools/list lists this agent's tools)"):format(name))
    end
    local args = params.arguments
    if args == nil then args = {} end
    -- An approval gate (approval = moor.approval.always/once or a policy):
    -- a person approves through the client's elicitation before the run
    -- starts; a client that cannot ask cannot run the tool.
    local a = tool.approval
    local gated = a ~= nil and (type(a) == "function" and (function()
      local ok, v = pcall(a, { toolName = name, toolInput = args })
      return not ok or v == true
    end)() or (type(a) == "table" and a.mode ~= "never" and not (a.mode == "once" and approved_once[name])))
    if gated then
      if not (client_caps.elicitation) then
        return reply(id, text_result(("%s needs a person's approval before it runs, and this client declared no "
          .. "elicitation to ask one: call it from a client that can, or through a session"):format(name), true))
      end
      next_id = next_id + 1
      local eid = "moor-approve-" .. next_id
      approvals[eid] = { id = id, params = params, tool = tool, name = name, args = args }
      return send({ jsonrpc = "2.0", id = eid, method = "elicitation/create", params = {
        message = ("Allow %s?\n\n%s"):format(name, encode(args)),
        requestedSchema = { type = "object", required = json.array { "choice" }, properties = {
          choice = { type = "string", title = "Allow it?", enum = json.array { "approve", "deny" } } } } } }, id)
    end
    return start_call(id, params, tool, name, args)
  end

  start_call = function(id, params, tool, name, args)
    local run_id, err, code = engine.call(name, args, {})
    if not run_id then
      if code == "input" or code == "json" then return reply(id, text_result(err, true)) end
      return fail(id, -32603, err)
    end
    local meta = type(params._meta) == "table" and params._meta or {}
    if type(params.task) == "table" and is_task_tool(tool) then
      calls[run_id] = { run = run_id, task = true, progress = 0, tool = tool }
      tasks[#tasks + 1] = run_id
      return reply(id, { task = M.task_of(run_id) })
    end
    calls[run_id] = { id = id, token = meta.progressToken, progress = 0, tool = tool }
    by_request[encode(id)] = run_id
  end

  local function task_param(id, params)
    local t = type(params.taskId) == "string" and M.task_of(params.taskId)
    if not t then fail(id, INVALID_PARAMS, ("Failed to retrieve task: Task not found (%s)"):format(
      tostring(params.taskId))) end
    return t
  end

  methods["tasks/get"] = function(id, params)
    local t = task_param(id, params)
    if t then reply(id, t) end
  end

  methods["tasks/list"] = function(id)
    local out = {}
    for _, run_id in ipairs(tasks) do out[#out + 1] = M.task_of(run_id) end
    reply(id, { tasks = json.array(out) })
  end

  methods["tasks/result"] = function(id, params)
    local t = task_param(id, params)
    if not t then return end
    local run_id = t.taskId
    local status, payload = engine.run_info(run_id)
    local tool = engine.tools[(engine.run_details(run_id) or {}).tool]
    if status ~= "running" then return reply(id, task_result(run_id, tool, status, payload)) end
    -- Not settled: answered when it is; its questions go out meanwhile.
    local c = calls[run_id]
    if not c then -- (a task of another process, resumed here: followed from now on)
      c = { run = run_id, task = true, progress = 0, tool = tool }
      calls[run_id] = c
    end
    results[run_id] = results[run_id] or {}
    table.insert(results[run_id], id)
    for _, msg in ipairs(c.queued or {}) do send(msg, id) end
    c.queued = nil
  end

  methods["tasks/cancel"] = function(id, params)
    local t = task_param(id, params)
    if not t then return end
    if t.status == "completed" or t.status == "failed" or t.status == "cancelled" then
      return fail(id, INVALID_PARAMS, ("Cannot cancel task: it is already %s"):format(t.status))
    end
    local ok, err = engine.cancel(t.taskId)
    if not ok then return fail(id, -32603, err.message) end
    reply(id, M.task_of(t.taskId))
  end

  local notifications = {}
  notifications["notifications/cancelled"] = function(params)
    local run_id = params.requestId ~= nil and by_request[encode(params.requestId)]
    if not run_id then return end
    calls[run_id].cancelled = true
    local ok, err = engine.cancel(run_id)
    if not ok then io.stderr:write(("moor mcp: cancel %s: %s\n"):format(run_id, err.message)) end
  end

  --- One message from the client: its JSON text (or, decoded, a table).
  function self.receive(text, overlong)
    if overlong then return fail(nil, PARSE, "Parse error: the message is longer than moor mcp reads (64 MiB)") end
    local msg, err = text, nil
    if type(text) == "string" then msg, err = decode(text) end
    if err then return fail(nil, PARSE, "Parse error: " .. tostring(err)) end
    if type(msg) ~= "table" or msg[1] ~= nil or msg.jsonrpc ~= "2.0" then
      return fail(nil, INVALID_REQUEST, "Invalid Request: send one JSON-RPC 2.0 object a line "
        .. "(with \"jsonrpc\": \"2.0\"; batches are not part of MCP)")
    end
    local id = msg.id
    if id ~= nil and type(id) ~= "string" and math.type(id) ~= "integer" then
      return fail(nil, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    end
    if msg.method == nil then
      if id ~= nil and (msg.result ~= nil or msg.error ~= nil) then return on_response(msg) end
      return fail(id, INVALID_REQUEST, "Invalid Request: no method")
    end
    if type(msg.method) ~= "string" then
      return fail(id, INVALID_REQUEST, "Invalid Request: method must be a string")
    end
    local params = msg.params
    if params == nil then params = {} end
    if type(params) ~= "table" then return fail(id, INVALID_PARAMS, "params must be an object") end
    if id == nil then
      local n = notifications[msg.method]
      if n then n(params) end
      return
    end
    local h = methods[msg.method]
    if not h then return fail(id, NO_METHOD, ("Method not found: %s"):format(msg.method)) end
    h(id, params)
  end

  --- Whether an initialize was answered.
  function self.initialized() return initialized end

  function self.close()
    unsubscribe()
  end

  return self
end

return M
