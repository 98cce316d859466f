--- The authoring API's definitions (part of `require "moor"`): defineTool,
-- defineWorkflowTool, defineAgent and disableTool, validated where they are
-- written; a definition's shape (its lifetime and how it suspends) and entry
-- point; and _bind, which the loader calls to make a loaded definition
-- runnable under its name (the body the engine starts, the ctx it is given).
local errors = require "moor.errors"
local duration = require "moor.duration"
local schema = require "moor.schema"
local providers = require "moor.providers"
local flow = require "moor.authoring.flow"
local ctx_builder = require "moor.authoring.ctx"
local task_arg = require "moor.authoring.task"
local serve = require "moor.authoring.serve"

local M = {}

local definitions = setmetatable({}, { __mode = "k" }) -- tool table -> true

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
      and not info.source:find("/moor/[%w_]+%.lua$") and not info.source:find("/moor/authoring/[%w_]+%.lua$") then
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
  if #found == 0 then def_error(kind .. " needs exactly one entry point: execute, task or serve", 3) end
  if #found > 1 then
    def_error(kind .. " needs exactly one entry point, but defines " .. table.concat(found, " and "), 3)
  end
  local entry = found[1]
  if kind == "defineWorkflowTool" then
    if def.execution ~= nil then
      -- seed 000's words
      def_error('"execution" was replaced by task(). Define task(input, ctx) to run each call as a task.', 3)
    end
    local props = def.inputSchema.properties
    if entry == "serve" and type(props) == "table" and props.taskId ~= nil then
      def_error("a serve tool's inputSchema must not declare taskId: moor adds taskId to the model's input "
        .. "(it names the task a call is sent to); rename the field", 3)
    end
  else
    if entry ~= "execute" then
      def_error(("'%s' is an entry point of moor.defineWorkflowTool; a plain tool defines execute "
        .. "(with execution = \"background\" to run each call as a task)"):format(entry), 3)
    end
    if def.execution ~= nil and def.execution ~= "background" then
      def_error(("execution must be \"background\" (run each call as a task) or left out, not %q"):format(
        tostring(def.execution)), 3)
    end
  end
  if def.toModelOutput ~= nil and type(def.toModelOutput) ~= "function" then
    def_error("toModelOutput must be a function", 3)
  end
  -- MCP's tool annotations (tools/list shows them): hints for the client, not guarantees
  for _, h in ipairs { "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint" } do
    if def[h] ~= nil and type(def[h]) ~= "boolean" then def_error(h .. " must be true or false", 3) end
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
  -- The four cells are data (DESIGN.md, seed 003 §2, §5), written once
  -- here; every consumer switches on shape:
  --   defineTool{ execute }                          step / none
  --   defineTool{ execution = "background", execute } task / none
  --   defineWorkflowTool{ execute }                  step / workflow
  --   defineWorkflowTool{ task } or { serve }        task / workflow
  local task = entry ~= "execute" or def.execution == "background"
  tool.shape = { lifetime = task and "task" or "step", suspend = suspend }
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
M.workflow = ctx_builder.not_supported("moor.workflow (the runtime-generated workflow tool)")
M.defineDynamic = ctx_builder.not_supported("moor.defineDynamic (dynamic tools)")
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
    local ok, err = providers.resolve(def.model, function() return nil end)
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
  local execute = function(input, ctx, task) return locate(src, pcall(fn, input, ctx, task)) end
  tool.invoke = execute
  -- A task's body gets its task argument third (the engine calls tool.task
  -- with the run's task id); a step-lifetime body gets none (seed 003 §8).
  if tool.shape.lifetime == "task" then tool.task = task_arg.new end
  if tool.shape.suspend == "workflow" then
    -- The engine builds the body's ctx from its run's facts with tool.ctx
    -- (moor._ctx, the one place a ctx is made) and runs the body unwrapped
    -- (a wrapper's frames would stay on the stack of every parked run): it
    -- passes the task third and takes the run's error through tool.locate.
    -- A serve body is fed its calls by moor.authoring.serve.
    tool.body, tool.ctx = tool.entry == "serve" and serve.body(fn) or fn, ctx_builder._ctx
    tool.locate = function(e) return relocate(src, e) end
  else
    -- A plain tool runs as one step of its run: not replayed, not retried
    -- (eve does not retry authored tools), progress still published.
    local policy = { retries = 0, backoff = 0, factor = 1, maxBackoff = 0 }
    tool.body = function(input, ctx, task)
      return flow._step_call(name, execute, policy, input, ctx_builder._plain_ctx(ctx), task)
    end
  end
  return tool
end

return M
