--- Helpers the specs share (not a spec: busted runs only *_spec.lua). A spec
-- loads it from its own folder:
--   local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local moor = require "moor"
local engine = require "moor.engine"
local session = require "moor.session"
local conf = require "moor.conf"
local connection = require "moor.auth.connection"
local tokens = require "moor.auth.tokens"
local t = moor.testing

local M = {}

--- Run fn with `root` as the agent and `subs` as its subagents, the session
-- tool registered; the previous agent comes back afterwards, even on error.
function M.with_agents(root, subs, fn)
  local saved_agent, saved_agents = engine.agent, engine.agents
  engine.agent, engine.agents = root, subs
  if not engine.tools[session.TOOL] then engine.register(session.TOOL, session.tool()) end
  local ok, err = pcall(fn)
  engine.agent, engine.agents = saved_agent, saved_agents
  if not ok then error(err, 0) end
end

--- An agent whose scripted model makes calls[n] on its n-th call (one tool
-- call each), then answers "done".
function M.calling(calls)
  return moor.defineAgent {
    instructions = "x",
    model = t.script(function(turn)
      local c = calls[turn.n]
      if c then return { toolCalls = { c } } end
      return "done"
    end),
  }
end

--- Bind tool under name and register it with the engine (a spec's own tools).
function M.register(name, tool)
  moor._bind(tool, name, "spec-" .. name)
  engine.register(name, tool)
  return tool
end

--- A workflow tool whose body is execute(input, ctx), registered under a
-- fresh name made from prefix; returns the name.
local nworkflows = 0
function M.workflow(prefix, execute)
  nworkflows = nworkflows + 1
  local name = prefix .. "_" .. nworkflows
  M.register(name, moor.defineWorkflowTool { description = "A spec's workflow.", inputSchema = moor.schema.object {},
    execute = execute })
  return name
end

--- Write text to path.
function M.write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

--- A fresh directory holding files = { ["relative/path"] = text }.
function M.project(files)
  local dir = os.tmpname()
  os.remove(dir)
  for name, text in pairs(files) do
    assert(os.execute("mkdir -p " .. (dir .. "/" .. name):match("^(.*)/[^/]*$")))
    M.write(dir .. "/" .. name, text)
  end
  return dir
end

--- Sign-in specs: connection `name` (a provider on 127.0.0.1:9, where
-- nothing listens; extra fields override), and { setup, teardown } for
-- before_each/after_each: a throwaway token file and a callback address.
function M.sign_in(name, extra)
  local dir = os.tmpname()
  local saved_url, saved_path
  local function define()
    local def = { description = "The fake provider", authorizationUrl = "http://127.0.0.1:9/authorize",
      tokenUrl = "http://127.0.0.1:9/token", clientId = "moor-test" }
    for k, v in pairs(extra or {}) do def[k] = v end
    connection.registry[name] = moor.defineConnection(def)
  end
  define() -- (so that moor.connection(name) works where the spec is written)
  return {
    setup = function()
      saved_url, saved_path = conf.callback_url, conf.tokens_path
      conf.callback_url = "http://127.0.0.1:7373/v1/auth/callback"
      conf.tokens_path = dir .. ".tokens.json"
      tokens.reset()
      os.remove(conf.tokens_path)
      define()
    end,
    teardown = function()
      conf.callback_url, conf.tokens_path = saved_url, saved_path
      os.remove(dir .. ".tokens.json")
      tokens.reset()
    end,
  }
end

--- The payloads of the events of one kind, in log order.
function M.kinds(events, kind)
  local out = {}
  for _, e in ipairs(events) do
    if e.kind == kind then out[#out + 1] = e.payload end
  end
  return out
end

return M
