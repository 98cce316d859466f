-- Connections as the loader reads them (issue 12 item 1): agent/connections/
-- <name>.lua returns moor.defineConnection{...}; load errors come with their
-- file and line, all at once; a static moor.connection(name) of an unknown
-- name is a load error at its line.
local engine = require "moor.engine"
local loader = require "moor.loader"
local connection = require "moor.auth.connection"
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local function load(files)
  local saved_tools, saved_reg, saved_loaded, saved_path = {}, connection.registry, connection.loaded, package.path
  local saved_agent, saved_agents = engine.agent, engine.agents
  for k, v in pairs(engine.tools) do saved_tools[k] = v end
  local dir = support.project(files)
  local ok, err = loader.load(dir, engine)
  local reg = connection.registry
  for k in pairs(engine.tools) do engine.tools[k] = nil end
  for k, v in pairs(saved_tools) do engine.tools[k] = v end
  connection.registry, connection.loaded, package.path = saved_reg, saved_loaded, saved_path
  engine.agent, engine.agents = saved_agent, saved_agents
  os.execute("rm -rf " .. dir)
  return ok, err, reg, dir
end

local CONN = 'local moor = require "moor"\nreturn moor.defineConnection { description = "Hub",\n'
  .. '  authorizationUrl = "https://hub.example/authorize", tokenUrl = "https://hub.example/token", clientId = "c" }\n'
local TOOL = 'local moor = require "moor"\nlocal hub = moor.connection("%s")\nreturn moor.defineTool {\n'
  .. '  description = "x", inputSchema = moor.schema.object {},\n'
  .. '  execute = function(_, ctx) return ctx.getToken(hub) end }\n'

describe("connections at load", function()
  it("are read before the tools that name them", function()
    local ok, err, reg = load { ["connections/hub.lua"] = CONN, ["tools/read.lua"] = TOOL:format("hub") }
    assert.is_truthy(ok, err)
    assert.is_table(reg.hub)
    assert.are.equal("Hub", reg.hub.description)
    assert.is_true(reg.hub.userScoped)
  end)

  it("a static reference to an unknown connection is a load error at its line", function()
    local ok, err = load { ["connections/hub.lua"] = CONN, ["tools/read.lua"] = TOOL:format("nope") }
    assert.is_nil(ok)
    assert.is_truthy(err:find("tools/read.lua:2: moor.connection('nope'): there is no agent/connections/nope.lua",
      1, true), err)
  end)

  it("every broken connection file is reported with its file and line, at once", function()
    local ok, err = load {
      ["connections/a.lua"] = 'local moor = require "moor"\nreturn moor.defineConnection { description = "A" }\n',
      ["connections/b.lua"] = 'local moor = require "moor"\nreturn moor.defineConnection { description = "B",\n'
        .. '  authorizationUrl = "ftp://x", tokenUrl = "https://x/t", clientId = "c", colour = 1 }\n',
      ["connections/c.lua"] = 'return 42\n',
    }
    assert.is_nil(ok)
    assert.is_truthy(err:find("connections/a.lua:2:", 1, true), err)
    assert.is_truthy(err:find("missing authorizationUrl", 1, true), err)
    assert.is_truthy(err:find("connections/b.lua:", 1, true), err)
    assert.is_truthy(err:find("unknown field 'colour'", 1, true), err)
    assert.is_truthy(err:find("connections/c.lua:1: the file must return a connection", 1, true), err)
  end)
end)
