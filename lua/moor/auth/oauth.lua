--- OAuth 2.0, the first kind of connection (issue 12): the authorization
-- code grant with PKCE (S256) and refresh tokens (RFC 6749, RFC 7636). Its
-- requests run inside a step (moor.fetch), so they park only that step.
-- What a provider answers is read for its tokens; an error quotes only the
-- provider's `error` and `error_description`, never a body that may hold one.
local core = require "moor.core"
local json = require "moor.json"
local base64url = require "moor.base64url"
local world = require "moor.authoring.world"

local M = {}

local fmt, concat = string.format, table.concat

local function pct(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return fmt("%%%02X", c:byte()) end))
end

local function form(fields)
  local keys, out = {}, {}
  for k in pairs(fields) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = pct(k) .. "=" .. pct(fields[k]) end
  return concat(out, "&")
end

local function hex_bytes(hex) return (hex:gsub("..", function(h) return string.char(tonumber(h, 16)) end)) end

--- A fresh PKCE verifier (32 random bytes) and its S256 challenge.
function M.pkce()
  local verifier = base64url.encode(core.random_bytes(32))
  return verifier, base64url.encode(hex_bytes(core.sha256(verifier)))
end

--- The URL a person opens to sign in.
function M.authorize_url(def, state, challenge, redirect_uri)
  local q = { response_type = "code", client_id = def.clientId, redirect_uri = redirect_uri, state = state,
    code_challenge = challenge, code_challenge_method = "S256" }
  if #def.scopes > 0 then q.scope = concat(def.scopes, " ") end
  local sep = def.authorizationUrl:find("?", 1, true) and "&" or "?"
  return def.authorizationUrl .. sep .. form(q)
end

local function token_request(def, fields)
  local secret = def.clientSecretEnv and os.getenv(def.clientSecretEnv)
  if def.clientSecretEnv and (not secret or secret == "") then
    return nil, ("the connection's client secret is not set: export %s"):format(def.clientSecretEnv)
  end
  if secret then fields.client_secret = secret end
  fields.client_id = def.clientId
  local res, err = world.fetch { url = def.tokenUrl, method = "POST", timeout = 30000, body = form(fields),
    headers = { ["content-type"] = "application/x-www-form-urlencoded", accept = "application/json" } }
  if not res then
    return nil, ("the provider's token endpoint did not answer: %s"):format(tostring(err)), "unreachable"
  end
  local v = json.decode(res.body or "")
  if res.status ~= 200 or type(v) ~= "table" or type(v.access_token) ~= "string" then
    local why = type(v) == "table" and type(v.error) == "string" and v.error or ("HTTP " .. tostring(res.status))
    local desc = type(v) == "table" and type(v.error_description) == "string" and (": " .. v.error_description) or ""
    -- (a 5xx or 429 is the provider's trouble, not a refusal of this grant)
    local kind = (res.status >= 500 or res.status == 429) and "unreachable" or "refused"
    return nil, ("the provider refused the token request (%s%s)"):format(why, desc:sub(1, 200)), kind
  end
  local now = core.now()
  return { access_token = v.access_token,
    refresh_token = type(v.refresh_token) == "string" and v.refresh_token or fields.refresh_token,
    expires_at = math.type(v.expires_in) == "integer" and now + v.expires_in * 1000 or nil, obtained_at = now }
end

--- Exchange a callback's one-time code: a token record, or nil and a message.
function M.exchange(def, pending, code)
  return token_request(def, { grant_type = "authorization_code", code = code,
    redirect_uri = pending.redirect_uri, code_verifier = pending.verifier })
end

--- Refresh: a new token record, or nil, a message and "refused" (the grant
-- is no good) or "unreachable" (no answer, or the provider's own error).
function M.refresh(def, refresh_token)
  return token_request(def, { grant_type = "refresh_token", refresh_token = refresh_token })
end

return M
