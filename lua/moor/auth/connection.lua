--- Connections (issue 12): `agent/connections/<name>.lua` returns
-- moor.defineConnection{ description, authorizationUrl, tokenUrl, clientId,
-- clientSecretEnv?, scopes?, userScoped = true }: an OAuth 2.0 provider
-- (authorization code with PKCE; refresh tokens used when present). A tool
-- names one with moor.connection("github"), checked at load time when the
-- loader knows the agent's connections (a static reference to an unknown
-- name is a load error at its file and line), and when used otherwise.
local errors = require "moor.errors"

local type, pairs, tostring, setmetatable, getmetatable = type, pairs, tostring, setmetatable, getmetatable

local M = {}

local DEF = { __name = "moor.connection.definition" }
local REF = { __name = "moor.connection" }

M.registry = {}       -- name -> definition, once the loader has loaded agent/connections/
M.loaded = false      -- has the loader read the agent's connections?

local FIELDS = { description = "string", authorizationUrl = "string", tokenUrl = "string", clientId = "string",
  clientSecretEnv = "string", scopes = "table", userScoped = "boolean" }
local REQUIRED = { "description", "authorizationUrl", "tokenUrl", "clientId" }

local function def_error(msg, level)
  error(errors.new("DefinitionError", "moor.defineConnection: " .. msg), level + 1)
end

--- moor.defineConnection{...}: checked where it is written.
function M.define(def)
  if type(def) ~= "table" then def_error("takes a table { description, authorizationUrl, tokenUrl, clientId }", 2) end
  for k, v in pairs(def) do
    local want = FIELDS[k]
    if not want then
      def_error(("unknown field '%s' (description, authorizationUrl, tokenUrl, clientId, clientSecretEnv, "
        .. "scopes, userScoped)"):format(tostring(k)), 2)
    end
    if type(v) ~= want then def_error(("%s must be a %s"):format(k, want), 2) end
  end
  for _, k in ipairs(REQUIRED) do
    if def[k] == nil or def[k] == "" then def_error(("missing %s"):format(k), 2) end
  end
  for _, k in ipairs { "authorizationUrl", "tokenUrl" } do
    if not def[k]:match("^https?://[^/%s]+") then def_error(k .. " must be an http(s) URL", 2) end
  end
  for i, s in ipairs(def.scopes or {}) do
    if type(s) ~= "string" or s == "" or s:find("%s") then def_error(("scopes[%d] must be a word"):format(i), 2) end
  end
  local d = { description = def.description, authorizationUrl = def.authorizationUrl, tokenUrl = def.tokenUrl,
    clientId = def.clientId, clientSecretEnv = def.clientSecretEnv, scopes = def.scopes or {},
    userScoped = def.userScoped ~= false }
  return setmetatable(d, DEF)
end

function M.is_definition(v) return getmetatable(v) == DEF end

--- moor.connection(name) -> a reference for ctx.getToken / ctx.requireAuth.
function M.ref(name)
  if type(name) ~= "string" or name == "" then error("moor.connection needs a connection's name", 2) end
  if M.loaded and not M.registry[name] then
    local info = debug.getinfo(2, "Sl")
    local where = info and info.currentline and info.currentline > 0 and (info.short_src .. ":" .. info.currentline)
    error(errors.new("DefinitionError", ("moor.connection('%s'): there is no agent/connections/%s.lua"):format(
      name, name), { where = where }), 2)
  end
  return setmetatable({ name = name }, REF)
end

--- The definition a reference (or a name) names, or nil and a message.
function M.resolve(c)
  local name = getmetatable(c) == REF and c.name or (type(c) == "string" and c or nil)
  if not name then return nil, "pass a connection: moor.connection(\"name\")" end
  local d = M.registry[name]
  if not d then return nil, ("there is no connection named '%s' (agent/connections/%s.lua)"):format(name, name) end
  return d, name
end

return M
