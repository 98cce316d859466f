--- moor.providers: model provider clients, pure Lua with the I/O injected.
--
--   local providers = require "moor.providers"
--   local p, err = providers.resolve("openai/gpt-5.5")     -- or "anthropic/claude-sonnet-5"
--   local answer, err = p:complete(req, io)
--
-- `req` is moor's normalized conversation ({ model?, system?, messages, tools?, outputSchema?,
-- maxTokens?, timeout? }); `io` = { fetch = function(httpreq) -> resp | nil, message, timedOut,
-- sleep = function(ms), log = function(msg)?, now = function() -> epoch seconds?,
-- delta = function(text)? (each text delta of a streamed reply, as it arrives),
-- reset = function(why)? (a retry after text streamed: that text is void) }. Both clients ask
-- for a streamed reply (httpreq.onData gets its pieces) and read a plain JSON one as well.
-- An answer is { message = { role = "assistant", content?, toolCalls? }, usage = { inputTokens,
-- outputTokens }, finishReason, model }; a failure is nil, { code, message, status?, retryable }.
--
-- This file also holds what the clients share: sending with retries and classifying failures
-- (M.send), error tables (M.fail), redaction, base64 and media-type helpers.
-- API keys live only in closures: never in a returned value, an error message or a log line.
local json = require "moor.json"
local duration = require "moor.duration"
local conf = require "moor.conf"
local sse = require "moor.providers.sse"

local M = {}

local DEFAULT_TIMEOUT = conf.MODEL_TIMEOUT
local MAX_RETRIES = conf.MODEL_RETRIES
local MAX_TIMEOUT_RETRIES = conf.MODEL_TIMEOUT_RETRIES
local BACKOFF_BASE = conf.MODEL_BACKOFF
local BACKOFF_CAP = conf.MODEL_BACKOFF_CAP
local MAX_RETRY_AFTER = conf.MODEL_MAX_RETRY_AFTER
local EXCERPT = conf.ERROR_EXCERPT

local KNOWN = {
  openai = "moor.providers.openai",
  anthropic = "moor.providers.anthropic",
}

local HINT = "use openai/<model> (any OpenAI-compatible server: OpenAI, llama.cpp, vLLM, Ollama)"
  .. " or anthropic/<model>"

local REASONS = {
  [400] = "Bad Request", [401] = "Unauthorized", [403] = "Forbidden", [404] = "Not Found",
  [408] = "Request Timeout", [409] = "Conflict", [413] = "Payload Too Large",
  [422] = "Unprocessable Entity", [429] = "Too Many Requests", [500] = "Internal Server Error",
  [502] = "Bad Gateway", [503] = "Service Unavailable", [504] = "Gateway Timeout",
  [529] = "Overloaded",
}

-- ------------------------------------------------------------------ errors and redaction

--- An error table: { code, message, status?, retryable } plus any extra fields.
function M.fail(code, message, fields)
  local e = { code = code, message = message, retryable = false }
  if fields then
    for k, v in pairs(fields) do e[k] = v end
  end
  return e
end

local function replace_plain(s, needle, with)
  local out, pos = {}, 1
  while true do
    local a, b = s:find(needle, pos, true)
    if not a then break end
    out[#out + 1] = s:sub(pos, a - 1)
    out[#out + 1] = with
    pos = b + 1
  end
  out[#out + 1] = s:sub(pos)
  return table.concat(out)
end

--- Remove a secret (and anything shaped like an API key) from a string.
function M.redact(s, secret)
  if type(s) ~= "string" then return s end
  if type(secret) == "string" and #secret >= 4 then
    s = replace_plain(s, secret, "[redacted]")
  end
  -- OpenAI-style keys (sk-..., sk-proj-..., sk-ant-...), masked or not, as servers echo them
  s = s:gsub("sk%-[%w%-_%*%.]+", "[redacted]")
  return s
end

--- A URL for messages: no userinfo, no query string.
function M.display_url(url)
  url = tostring(url or "")
  url = url:gsub("^(%a[%w+.-]*://)[^/@]*@", "%1")
  url = url:gsub("[?#].*$", "")
  return url
end

--- The first n bytes of s, cut at a UTF-8 boundary, invalid bytes shown as '?'.
function M.excerpt(s, n)
  s = tostring(s or "")
  n = n or EXCERPT
  local cut = s
  if #s > n then
    cut = s:sub(1, n)
    -- back off a partial multi-byte sequence at the end
    local i = #cut
    while i > 0 and i > #cut - 3 and cut:byte(i) >= 0x80 and cut:byte(i) < 0xC0 do i = i - 1 end
    if i > 0 and cut:byte(i) >= 0xC0 then cut = cut:sub(1, i - 1) end
  end
  if not utf8.len(cut) then cut = cut:gsub("[\128-\255]", "?") end
  if #s > #cut then cut = cut .. "..." end
  if cut == "" then cut = "(empty body)" end
  return cut
end

-- ------------------------------------------------------------------ small helpers

--- Whether a media type can be shown to a model as text.
function M.is_textual(media_type)
  media_type = tostring(media_type or ""):lower()
  return media_type:match("^text/") ~= nil
    or media_type:match("[/+]json$") ~= nil or media_type:match("[/+]xml$") ~= nil
    or media_type == "application/javascript" or media_type == "application/x-yaml"
    or media_type == "application/yaml" or media_type == "application/toml"
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_INDEX = {}
for i = 1, #B64 do B64_INDEX[B64:byte(i)] = i - 1 end
B64_INDEX[("-"):byte()] = 62   -- base64url too
B64_INDEX[("_"):byte()] = 63

--- Decode base64 (standard or url alphabet, padding optional). nil for bad input.
function M.base64_decode(s)
  if type(s) ~= "string" then return nil end
  s = s:gsub("%s", ""):gsub("=+$", "")
  local out, acc, bits = {}, 0, 0
  for i = 1, #s do
    local v = B64_INDEX[s:byte(i)]
    if not v then return nil end
    acc = (acc << 6) | v
    bits = bits + 6
    if bits >= 8 then
      bits = bits - 8
      out[#out + 1] = string.char((acc >> bits) & 0xFF)
    end
  end
  return table.concat(out)
end

--- A file part as text, for a model API that cannot take it as a file.
function M.file_as_text(part)
  local media_type = tostring(part.mediaType or "application/octet-stream")
  local name = part.filename and (" " .. tostring(part.filename)) or ""
  if M.is_textual(media_type) then
    local text = M.base64_decode(part.data)
    if text and utf8.len(text) then
      return ("[file%s (%s)]\n%s"):format(name, media_type, text)
    end
  end
  return ("[file%s (%s, %d bytes of base64) omitted: this model API does not take it]"):format(
    name, media_type, #tostring(part.data or ""))
end

--- Text of a content value: a string, or the text parts of a part list joined.
function M.content_text(content)
  if content == nil or content == M.null() then return nil end
  if type(content) == "string" then return content end
  if type(content) == "table" then
    local texts = {}
    for _, part in ipairs(content) do
      if type(part) == "table" and part.type == "text" and type(part.text) == "string" then
        texts[#texts + 1] = part.text
      end
    end
    return table.concat(texts)
  end
  return tostring(content)
end

--- The server's base URL and API key from the environment: env(base_var)
-- (default_base when unset or empty; trailing slashes dropped) and
-- env(key_var) (nil when unset or empty).
function M.endpoint(env, base_var, key_var, default_base)
  local base = env(base_var)
  if base == nil or base == "" then base = default_base end
  local key = env(key_var)
  if key == "" then key = nil end
  return base:gsub("/+$", ""), key
end

--- A 200 whose body is not the response expected: nil and a bad_response
-- error saying what was wrong (what), where (base) and what came (body).
function M.bad_response(provider, base, expected, what, body)
  return nil, M.fail("bad_response", ("%s: the server at %s answered 200 but %s (%s was expected): %s"):format(
    provider, M.display_url(base), what, expected, M.excerpt(body)), { status = 200 })
end

--- The answer both APIs' replies come to (see the file's head), from the
-- decoded reply v and the request r.
function M.answer(v, r, content, calls, input_tokens, output_tokens, finish)
  return {
    message = { role = "assistant", content = content, toolCalls = calls },
    usage = { inputTokens = input_tokens, outputTokens = output_tokens },
    finishReason = finish,
    model = type(v.model) == "string" and v.model or r.model,
  }
end

function M.json()
  return json
end

function M.null()
  return json.null
end

--- If a structured-output schema has no object root, wrap it as { value = schema } (both APIs
-- want an object). Returns schema, wrapped.
function M.object_schema(schema)
  if type(schema) == "table" and schema.type == "object" then return schema, false end
  return { type = "object", properties = { value = schema }, required = json.array { "value" },
    additionalProperties = false }, true
end

--- Milliseconds from a timeout value (number of ms or a duration string).
function M.timeout_ms(v)
  if v == nil then return DEFAULT_TIMEOUT end
  if type(v) == "number" and v > 0 then return math.floor(v) end
  if type(v) == "string" then
    local ms = duration.parse(v)
    if ms and ms > 0 then return ms end
  end
  return DEFAULT_TIMEOUT
end

-- ------------------------------------------------------------------ retry-after

local MONTHS = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6,
                 jul = 7, aug = 8, sep = 9, oct = 10, nov = 11, dec = 12 }

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * ((m + 9) % 12) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

--- Epoch seconds of an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), or nil.
function M.parse_http_date(s)
  if type(s) ~= "string" then return nil end
  local d, mon, y, hh, mm, ss =
    s:match("^%a+,%s*(%d%d?)[%s%-]+(%a%a%a)[%s%-]+(%d%d%d%d)%s+(%d%d):(%d%d):(%d%d)%s*GMT%s*$")
  if not d then return nil end
  local m = MONTHS[mon:lower()]
  if not m then return nil end
  return days_from_civil(tonumber(y), m, tonumber(d)) * 86400
    + tonumber(hh) * 3600 + tonumber(mm) * 60 + tonumber(ss)
end

-- x ms as an integer: a value too large for one is clamped, never a float
-- (the caller formats it with %d and hands it on as a step's retryAfter).
local function whole_ms(x)
  return math.tointeger(math.floor(x)) or math.maxinteger
end

--- The delay (ms) a response asks for: retry-after-ms, or retry-after in seconds or as an HTTP
-- date. nil when absent or unparseable.
function M.retry_after_ms(headers, now)
  if type(headers) ~= "table" then return nil end
  local ms = tonumber(headers["retry-after-ms"])
  if ms and ms >= 0 then return whole_ms(ms) end
  local v = headers["retry-after"]
  if type(v) ~= "string" and type(v) ~= "number" then return nil end
  v = tostring(v):match("^%s*(.-)%s*$")
  local secs = tonumber(v)
  if secs then
    if secs < 0 or secs ~= secs then return nil end
    return whole_ms(secs * 1000)
  end
  local at = M.parse_http_date(v)
  if not at then return nil end
  local delta = at - (now or os.time())
  return math.max(0, whole_ms(delta * 1000))
end

--- Backoff before retry number n (1-based): 1 s, 2 s, 4 s, ... capped at 30 s.
function M.backoff_ms(n)
  return math.min(BACKOFF_CAP, BACKOFF_BASE * (1 << (n - 1)))
end

-- ------------------------------------------------------------------ streaming

local Decoder = {}
Decoder.__index = Decoder

--- A streamed reply's reader, for M.send's spec.stream. on_event(d, event, data) reads one
-- server-sent event and returns nil, or what is wrong with it (the first such stops the
-- reading); it calls d:text(t) for each text delta. result(d) builds the reply as the
-- API's unstreamed JSON would have it (so the provider's parse reads both), or nil, what.
function M.stream_decoder(on_text, on_event, result)
  local d = setmetatable({ texted = false, parts = {}, on_text = on_text, result = result }, Decoder)
  d.reader = sse.new(function(event, data)
    if d.err then return end
    local ok, what = pcall(on_event, d, event, data)
    if not ok then what = "could not be read: " .. tostring(what) end
    if what then d.err = what end
  end)
  return d
end

function Decoder:text(t)
  self.texted = true
  self.on_text(t)
end

function Decoder:feed(piece)
  self.parts[#self.parts + 1] = piece
  self.reader:feed(piece)
end

--- The body ended (body: what came whole, "" when it streamed). Whether it was an event
-- stream at all (a server that ignores stream = true answers plain JSON).
function Decoder:streamed(body)
  if type(body) == "string" and body ~= "" then self:feed(body) end
  self.reader:close()
  if self.reader.events > 0 then return true end
  local head = self.reader.raw:match("^%s*(%a+):")
  return head == "data" or head == "event"
end

function Decoder:finish()
  if self.err then return nil, self.err end
  return self.result(self)
end

function Decoder:raw()
  if #self.parts > 1 then self.parts = { table.concat(self.parts) } end
  return self.parts[1] or ""
end

-- ------------------------------------------------------------------ sending

--- The server's own error message from an error body, redacted and shortened.
local function server_message(body, secret)

  local v = type(body) == "string" and json.decode(body)
  local msg
  if type(v) == "table" then
    local e = v.error
    if type(e) == "table" and type(e.message) == "string" then msg = e.message
    elseif type(e) == "string" then msg = e
    elseif type(v.message) == "string" then msg = v.message
    elseif type(v.detail) == "string" then msg = v.detail
    end
  end
  if not msg or msg == "" then msg = M.excerpt(body) end
  return M.excerpt(M.redact(msg, secret), 500)
end

local function status_text(status)
  local reason = REASONS[status]
  return reason and (status .. " " .. reason) or tostring(status)
end

--- The round trip both clients share: encode the body, send it with retries,
-- parse the reply with parse(v, raw_body), and keep the key out of errors.
-- spec is send's spec plus body (a table), parse and name.
function M.exchange(io, spec)
  local text, eerr = M.json().encode(spec.body)
  if not text then
    return nil, M.fail("bad_request", spec.provider .. ": the request is not JSON: " .. tostring(eerr))
  end
  spec.body = text
  local v, resp_or_err = M.send(io, spec)
  if not v then return nil, resp_or_err end
  local answer, perr = spec.parse(v, resp_or_err.body)
  if not answer then
    perr.message = M.redact(perr.message, spec.secret)
    return nil, perr
  end
  return answer
end

--- POST a JSON body with retries; return the decoded JSON reply of a 2xx, or nil, err.
-- spec = { provider, url, base_url, headers, body, timeout (ms), secret (for redaction only),
--          key_env, base_env, key_set, expected (what a good reply holds, for messages) }
function M.send(io, spec)

  local secret = spec.secret
  local where = M.display_url(spec.url)
  local base = M.display_url(spec.base_url)
  local function log(msg)
    if type(io.log) == "function" then io.log(M.redact(msg, secret)) end
  end
  local function failure(code, message, fields)
    return nil, M.fail(code, M.redact(spec.provider .. ": " .. message, secret), fields)
  end
  local now = type(io.now) == "function" and io.now or os.time

  local retries, timeout_retries = 0, 0
  while true do
    -- redirects = 0: never follow one (a 307 would resend the key and the conversation elsewhere)
    -- A streamed reply is read as it comes: its text deltas go to io.delta (when given).
    local dec = spec.stream and spec.stream(function(text)
      if type(io.delta) == "function" then io.delta(text) end
    end)
    local resp, terr, timed_out = io.fetch {
      method = "POST", url = spec.url, headers = spec.headers, body = spec.body, timeout = spec.timeout,
      redirects = 0, onData = dec and function(piece) dec:feed(piece) end or nil,
    }
    local attempts = retries + 1
    local kind, status, delay_hint, last
    if resp == nil then
      if timed_out then
        kind = "timeout"
        last = ("no answer from %s within %d ms"):format(where, spec.timeout)
      else
        kind = "transport"
        last = ("could not reach %s: %s"):format(where, tostring(terr or "transport error"))
      end
    else
      status = tonumber(resp.status) or 0
      if status >= 200 and status < 300 then
        if dec and dec:streamed(resp.body) then
          local v, what = dec:finish(resp.body)
          if not v then
            return failure("bad_response", ("the server at %s answered %d with an event stream that %s"
              .. " (%s was expected): %s"):format(base, status, what, spec.expected, M.excerpt(dec:raw())),
              { status = status })
          end
          return v, { status = status, headers = resp.headers, body = dec:raw() }
        end
        local v, derr = json.decode(dec and dec:raw() or resp.body or "")
        if type(v) ~= "table" then
          return failure("bad_response", ("the server at %s answered %d with a body that is not a JSON object"
            .. " (%s; %s was expected): %s"):format(base, status, derr or "not an object", spec.expected,
            M.excerpt(dec and dec:raw() or resp.body)), { status = status })
        end
        return v, resp
      elseif status == 401 or status == 403 then
        local hint
        if spec.key_set then
          hint = ("the key in %s was refused: check %s (and %s)"):format(spec.key_env, spec.key_env, spec.base_env)
        else
          hint = ("%s is not set: set it to an API key for this server, or point %s at a server that"
            .. " needs none"):format(spec.key_env, spec.base_env)
        end
        return failure("auth", ("the server at %s answered %s: %s. Server said: %s"):format(
          base, status_text(status), hint, server_message(resp.body, secret)), { status = status })
      elseif status == 429 then
        kind = "rate_limited"
      elseif status == 408 then
        kind = "timeout"
      elseif status == 409 or status >= 500 then
        kind = "server_error"
      elseif status >= 300 and status < 400 then
        return failure("bad_response", ("the server at %s answered %s, a redirect, which providers do not"
          .. " follow (the key and the conversation stay with %s): set %s to the server's final address"):format(
          base, status_text(status), base, spec.base_env), { status = status })
      elseif status >= 400 then
        return failure("bad_request", ("the server at %s answered %s: %s"):format(
          base, status_text(status), server_message(resp.body, secret)), { status = status })
      else
        return failure("bad_response", ("the server at %s answered with status %d (expected 200): %s"):format(
          base, status, M.excerpt(resp.body)), { status = status })
      end
      last = ("the server at %s answered %s: %s"):format(base, status_text(status),
        server_message(resp.body, secret))
      delay_hint = M.retry_after_ms(resp.headers, now())
    end

    -- a retryable failure: retry, or give up
    local can_retry = retries < MAX_RETRIES
      and (kind ~= "timeout" or timeout_retries < MAX_TIMEOUT_RETRIES)
    if can_retry and delay_hint and delay_hint > MAX_RETRY_AFTER then
      return failure(kind, ("%s (retry-after %d ms is longer than moor waits in place; retry later)"):format(
        last, delay_hint), { status = status, retryable = true, retryAfter = delay_hint })
    end
    if not can_retry then
      return failure(kind, ("%s (after %d attempt%s)"):format(last, attempts, attempts == 1 and "" or "s"),
        { status = status, retryable = true, retryAfter = delay_hint })
    end
    retries = retries + 1
    if kind == "timeout" then timeout_retries = timeout_retries + 1 end
    -- text already streamed from this attempt is void: the next one streams anew
    if dec and dec.texted and type(io.reset) == "function" then io.reset(last) end
    local delay = delay_hint or M.backoff_ms(retries)
    log(("%s: %s; retrying in %d ms (retry %d of %d)"):format(spec.provider, last, delay, retries, MAX_RETRIES))
    if delay > 0 then io.sleep(delay) end
  end
end

-- ------------------------------------------------------------------ resolve

local function env_reader(env)
  if env == nil then return os.getenv end
  if type(env) == "table" then return function(name) return env[name] end end
  return env
end

--- Resolve "provider/model" to a provider object with :complete(req, io), .name and .model.
-- env (function(name) -> string|nil, or a table; default os.getenv) supplies the base URLs
-- and keys, read now.
function M.resolve(model_id, env)
  if type(model_id) ~= "string" or model_id == "" then
    return nil, M.fail("unknown_provider", ("a model id is a string \"provider/model\" (%s), not %s"):format(
      HINT, model_id == "" and '""' or type(model_id)))
  end
  local prefix, model = model_id:match("^([^/]*)/(.*)$")
  if not prefix then
    return nil, M.fail("unknown_provider", ("model id '%s' names no provider: write it as provider/model;"
      .. " %s, as openai/%s"):format(model_id, HINT, model_id))
  end
  if prefix == "" or model == "" then
    return nil, M.fail("unknown_provider", ("model id '%s' needs both parts of provider/model: %s"):format(
      model_id, HINT))
  end
  local module = KNOWN[prefix:lower()]
  if not module then
    return nil, M.fail("unknown_provider", ("unknown model provider '%s' in '%s': %s"):format(
      prefix, model_id, HINT))
  end
  -- required here: the provider is named at run time, and each provider module
  -- requires this one (a real cycle)
  return require(module).new(model, env_reader(env))
end

--- The provider names resolve knows.
function M.names()
  local names = {}
  for name in pairs(KNOWN) do names[#names + 1] = name end
  table.sort(names)
  return names
end

return M
