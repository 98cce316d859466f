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
--
-- This file is the public face only: it assembles `moor` from its parts, one
-- job each, which depend one way (define -> ctx -> agent -> world -> flow ->
-- the engine), and adds the embedder's entry points (call, register, load,
-- resume, tick, run, status):
--   authoring/define.lua   defineTool, defineWorkflowTool, defineAgent, disableTool, _bind
--   authoring/ctx.lua      the ctx of a body (moor._ctx, moor._plain_ctx, ctx.ask)
--   authoring/agent.lua    ctx.agent and ctx.agents (sessions with other agents)
--   authoring/flow.lua     step, stepInfo, sleep, timer, async, all, race, await,
--                          version, sortedPairs, AbortController
--   authoring/world.lua    hooks, webhooks and moor.fetch
--   authoring/outputs.lua  approval, toolOutput, toolOutputPart
--   harness/init.lua       moor.harness: agents in their own harness (seed 001)
--   auth/                  defineConnection, connection; ctx.getToken/requireAuth in steps
-- The loader, moor.session and moor.testing require these parts, never this
-- face (no file under lua/ does: tests/e2e/test_layout.sh), so the face can
-- require the loader and moor.testing at the top without a cycle.
local core = require "moor.core"
local engine = require "moor.engine"
local errors = require "moor.errors"
local schema = require "moor.schema"
local json = require "moor.json"
local define = require "moor.authoring.define"
local ctx_builder = require "moor.authoring.ctx"
local flow = require "moor.authoring.flow"
local world = require "moor.authoring.world"
local outputs = require "moor.authoring.outputs"
local harness = require "moor.harness"
local auth = require "moor.auth"
local connection = require "moor.auth.connection"
local harness_host = require "moor.harness.host"
local loader = require "moor.loader"
local testing = require "moor.testing"

local M = {
  schema = schema,
  json = json,
  FatalError = errors.FatalError,
  RetryableError = errors.RetryableError,
  Cancelled = errors.Cancelled,
  Error = errors,
  NotSupported = errors.NotSupported,
  version_string = core.version,
  testing = testing,
  --- moor.sandbox{ memory, instructions, seconds, source, output, result,
  -- message, coroutines, seed }: a sandbox for a model-written Lua program
  -- (host/sandbox.c; tools/workflow.lua runs programs in one).
  sandbox = core.sandbox_new,
  --- moor.sha256(s): the hex SHA-256 of s.
  sha256 = core.sha256,
  --- moor.harness.open{...}, moor.harness.tool{...}: coding agents in their
  -- own harness calling the workflow's tools (lua/moor/harness/init.lua).
  harness = { open = harness.open, tool = harness.tool },
  --- moor.defineConnection{ description, authorizationUrl, tokenUrl, clientId,
  -- clientSecretEnv?, scopes?, userScoped? } (agent/connections/<name>.lua) and
  -- moor.connection(name), what ctx.getToken(provider) takes (lua/moor/auth/).
  defineConnection = connection.define,
  connection = connection.ref,
  _auth = auth,
}

-- definitions (defineTool, defineWorkflowTool, defineAgent, disableTool, ...)
for _, k in ipairs { "defineTool", "defineWorkflowTool", "isTool", "disableTool", "isDisabledTool", "workflow",
                     "defineDynamic", "defineAgent", "_bind" } do
  M[k] = define[k]
end
-- the ctx of a body
M._ctx, M._plain_ctx = ctx_builder._ctx, ctx_builder._plain_ctx
-- a body's flow
for _, k in ipairs { "_step_call", "step", "stepInfo", "sleep", "pause", "async", "timer", "all", "race", "await",
                     "version", "AbortController", "sortedPairs" } do
  M[k] = flow[k]
end
-- hooks, webhooks, fetch
M.createHook, M.createWebhook, M.resumeHook, M.fetch = world.createHook, world.createWebhook, world.resumeHook,
  world.fetch
-- what a tool gives
M.approval, M.toolOutput, M.toolOutputPart = outputs.approval, outputs.toolOutput, outputs.toolOutputPart

---------------------------------------------------------------------------
-- an embedder's entry points

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
  engine.register(name, M._bind(tool, name, core.hash(name)))
end

--- moor.load(dir): load an agent project (tools/, agent.lua, subagents/).
function M.load(dir)
  return loader.load(dir, engine)
end

--- moor.resume(): load every unfinished run from the database (harness
-- agents' turns a restart cut end as interrupted first).
function M.resume()
  local ok, err = harness_host.recover()
  if not ok then return nil, err end
  return engine.resume_all()
end

--- moor.tick([budget_ms]) -> ms until the next timer | nil: run what is
-- ready, for a host that owns its loop (a game's frame). With budget_ms
-- (> 0; fractions allowed) it returns once that much engine work is spent
-- (one step's work past it at most), with 0 when work was left for the
-- next call (moor_tick_budget in host/moor.h).
function M.tick(budget_ms)
  if budget_ms == nil or budget_ms == 0 then return engine.tick() end
  if math.type(budget_ms) == nil or budget_ms ~= budget_ms or budget_ms < 0 or budget_ms == math.huge then
    error("moor.tick: budget_ms must be a positive number of milliseconds (or nil), got " .. tostring(budget_ms), 2)
  end
  local us = math.floor(budget_ms * 1000)
  return engine.tick(us > 0 and us or 1)
end

--- moor.run(): drive every run until none is runnable or due (blocking).
function M.run()
  while true do
    local due = engine.tick()
    if not due then return end
    core.wait(due)
  end
end

--- moor.inputs() -> { { requestId, runId, request, created }, ... }: the
-- questions waiting for a person (request: what ctx.ask was given).
function M.inputs() return engine.inputs() end

--- moor.answer(requestId, { optionId = ... } | { text = ... }) -> true |
-- nil, message: answer a question, as an in-process person channel
-- (moor_answer). Not from inside moor.tick (a listener): after it returns.
function M.answer(id, answer)
  local ok, err = engine.answer(id, answer, true)
  if not ok then return nil, type(err) == "table" and err.message or tostring(err) end
  return true
end

--- moor.status(runId) -> status, result-or-error JSON text.
function M.status(id) return engine.run_info(id) end

return M
