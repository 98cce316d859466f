--- The token store (issue 12): access and refresh tokens, and the PKCE
-- verifiers of sign-ins under way, in their own file, never in the database,
-- an event, a step's input or result, a stream or a message. The file is
-- JSON, mode 0600, written whole to a temporary file (a fresh random name,
-- made 0600 before any secret is written) and renamed over the old one. Its path: $MOOR_TOKENS,
-- else tokens.json beside the database. Keys: connection and principal.
local core = require "moor.core"
local json = require "moor.json"
local conf = require "moor.conf"

local M = {}

-- What was read last (the file is read again for every look-up and change:
-- another moor may share it, and a write must keep what that one wrote).
local cache = nil

function M.path()
  if conf.tokens_path then return conf.tokens_path end
  local env = os.getenv("MOOR_TOKENS")
  if env and env ~= "" then return env end
  local db = core.db_path and core.db_path() or ".moor/moor.db"
  return (db:match("^(.*)/[^/]*$") or ".") .. "/tokens.json"
end

local function load()
  local path = M.path()
  local data = { version = 1, tokens = {}, pending = {} }
  local f = io.open(path, "rb")
  if f then
    local text = f:read("a")
    f:close()
    local v = json.decode(text)
    if type(v) == "table" and type(v.tokens) == "table" then
      data.tokens = v.tokens
      data.pending = type(v.pending) == "table" and v.pending or {}
    elseif text ~= "" then
      -- (not written over: the tokens in it would be lost)
      data.bad = ("the token file %s is not moor's JSON: fix it, or remove it to sign in again"):format(path)
    end
  end
  cache = data
  return data
end

-- The temporary file has a name nobody can guess: the token file sits beside
-- the database, and --db may put that in a directory others can write, where
-- a link planted at a fixed name (tokens.json.tmp) would be opened, truncated
-- and written through.
local function save()
  local path = M.path()
  if cache.bad then return nil, cache.bad end
  local tmp = ("%s.%s.tmp"):format(path, (core.random_bytes(12):gsub(".", function(c)
    return ("%02x"):format(c:byte()) end)))
  local f, err = io.open(tmp, "wb")
  if not f then return nil, "cannot write the token file: " .. tostring(err) end
  local ok, cerr = core.chmod(tmp, tonumber("600", 8))
  if not ok then f:close(); os.remove(tmp); return nil, cerr end
  local text = json.encode({ version = 1, tokens = cache.tokens, pending = cache.pending })
  local wok, werr = f:write(text)
  local cok, cerr2 = f:close()
  if not (wok and cok) then
    os.remove(tmp)
    return nil, "cannot write the token file: " .. tostring(werr or cerr2)
  end
  local rok, rerr = os.rename(tmp, path)
  if not rok then os.remove(tmp); return nil, rerr end
  return true
end

local function key(connection, principal) return connection .. "\0" .. principal end

--- { access_token, refresh_token?, expires_at? (ms), obtained_at } or nil.
function M.get(connection, principal) return load().tokens[key(connection, principal)] end

function M.put(connection, principal, rec)
  load().tokens[key(connection, principal)] = rec
  return save()
end

function M.drop(connection, principal)
  local d = load()
  if d.tokens[key(connection, principal)] == nil then return true end
  d.tokens[key(connection, principal)] = nil
  return save()
end

--- A sign-in under way, by its callback's state: { verifier, connection,
-- principal, redirect_uri, created }.
function M.put_pending(state, rec)
  local d = load()
  local now = core.now()
  for s, p in pairs(d.pending) do -- (sign-ins long abandoned go)
    if type(p) ~= "table" or (p.created or 0) < now - 7 * 86400000 then d.pending[s] = nil end
  end
  d.pending[state] = rec
  return save()
end

function M.pending(state) return load().pending[state] end

function M.drop_pending(state)
  local d = load()
  if d.pending[state] == nil then return true end
  d.pending[state] = nil
  return save()
end

--- Forget what was read (a spec that changes the path).
function M.reset() cache = nil end

return M
