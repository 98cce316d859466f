--- The authoring API's ways out to the world (part of `require "moor"`):
-- hooks and webhooks a workflow body waits on (createHook, createWebhook,
-- hook:await, resumeHook) and HTTP from steps (moor.fetch, on moor.fetch.core).
local engine = require "moor.engine"
local errors = require "moor.errors"
local json = require "moor.json"
local core = require "moor.core"
local fetch_core = require "moor.fetch.core" -- registered by moor.core (host/core.c)
local flow = require "moor.authoring.flow"

local need_wait = flow.need_wait

local M = {}

local Request = {}
Request.__index = Request
--- request:json(): the body decoded as JSON (raises a clear error when it is not).
function Request:json()
  local v, err = json.decode(self.body or "")
  if err then error(errors.new("InvalidJSON", "the webhook request body is not JSON: " .. err), 2) end
  return v
end
function Request:text() return self.body end

local Hook = {}
Hook.__index = Hook

--- hook:await(): park the run until the next delivery; returns its payload
-- (a hook) or a request { method, headers, body, query, :json() } (a webhook).
function Hook.await(self)
  need_wait("hook:await")
  local ok, v = engine.op("hook.await", "await", { token = self.token })
  if not ok then error(v, 0) end
  if self.kind == "webhook" then return setmetatable(v, Request) end
  return v
end

--- hook:poll(): the next delivery if one is already waiting, else nil; it
-- never parks the run (a durable op all the same: replay gives the same).
function Hook.poll(self)
  need_wait("hook:poll")
  local ok, v = engine.op("hook.poll", "poll", { token = self.token })
  if not ok then error(v, 0) end
  local d = v.delivery
  if d ~= nil and self.kind == "webhook" then return setmetatable(d, Request) end
  return d
end

--- for request in hook:requests() do ... end: every delivery, in order.
function Hook.requests(self)
  return function() return self:await() end
end

local TOKEN_RULE = "^[%w._:-]+$"

local function make_hook(kind, spec)
  local ok, v = engine.op("hook", kind, spec)
  if not ok then error(v, 0) end
  if v.error then error(errors.new("HookConflict", v.error), 3) end
  return setmetatable({ token = v.token, url = v.url, kind = kind }, Hook)
end

--- moor.createHook{ token? }: a hook resumed by moor.resumeHook(token, payload)
-- or POST /v1/hooks/{token}. Give a token for a deterministic one.
function M.createHook(opts)
  need_wait("moor.createHook")
  opts = opts or {}
  if opts.token ~= nil and (type(opts.token) ~= "string" or #opts.token > 200 or not opts.token:match(TOKEN_RULE)) then
    error("moor.createHook: token must be 1-200 letters, digits or . _ : -", 2)
  end
  return make_hook("hook", { kind = "hook", token = opts.token })
end

-- Headers that frame an HTTP answer: moor's, never a respondWith's.
local FRAMING = { ["content-length"] = true, ["transfer-encoding"] = true, connection = true }

--- moor.createWebhook{ respondWith? }: a URL under /.well-known/workflow/v1/webhook/
-- with a 32-byte random token. respondWith = { status, headers, body } answers
-- each delivery (default 202 {"ok":true}).
function M.createWebhook(opts)
  need_wait("moor.createWebhook")
  opts = opts or {}
  local rw = opts.respondWith
  if rw ~= nil then
    if type(rw) ~= "table" or (rw.status ~= nil and math.type(rw.status) ~= "integer") then
      error("moor.createWebhook: respondWith is { status = 200, headers = {...}, body = \"...\" }", 2)
    end
    if rw.status ~= nil and (rw.status < 200 or rw.status > 999) then -- what the HTTP writer sends
      error(("moor.createWebhook: respondWith.status %d is not a status moor answers with (200 to 999)")
        :format(rw.status), 2)
    end
    -- Checked here, not at each delivery (which is recorded before it is
    -- answered, so a sender that gets a 500 sends it again): names are
    -- tokens, values strings or numbers without CR, LF or another control
    -- byte, and none of the headers moor frames the answer with. (The HTTP
    -- writer refuses the same, with a 500.)
    if rw.headers ~= nil then
      if type(rw.headers) ~= "table" then
        error("moor.createWebhook: respondWith.headers is a table { [\"Name\"] = \"value\" }", 2)
      end
      for k, v in pairs(rw.headers) do
        local why
        if type(k) ~= "string" or not k:match("^[%w!#$%%&'*+%-.^_`|~]+$") then
          why = "the name is not a header name"
        elseif type(v) ~= "string" and type(v) ~= "number" then
          why = "the value is a " .. type(v) .. ", not a string or number"
        elseif tostring(v):find("[%z\1-\8\10-\31\127]") then
          why = "the value holds CR, LF or another control character"
        elseif FRAMING[k:lower()] then
          why = "moor writes that header itself"
        end
        if why then
          error(("moor.createWebhook: respondWith.headers[%q]: %s"):format(tostring(k), why), 2)
        end
      end
    end
  end
  return make_hook("webhook", { kind = "webhook", respondWith = rw })
end

--- moor.resumeHook(token, payload): deliver to a hook, from a step or plain code.
function M.resumeHook(token, payload)
  if engine.in_body() then
    error("moor.resumeHook belongs in a step: a workflow body is replayed, so the delivery would repeat", 2)
  end
  local kind, err = engine.deliver(token, payload == nil and json.null or payload)
  if not kind then error(errors.new(err.code == "not_found" and "HookNotFound" or "HookError", err.message), 2) end
  return true
end

--- moor.fetch(url [, opts]) or moor.fetch{ url, method, headers, body, timeout, onData? }
-- -> { status, headers, body } | nil, message, timedOut. Non-blocking on the
-- engine's loop: inside a step or a plain tool it parks only that step. Not
-- durable (a crash re-runs the step), so it belongs in a step; a workflow body
-- must not call it. onData(piece) gets a 2xx body as it streams (host/fetch_lua.c).
function M.fetch(url, opts)
  local req = {}
  if type(url) == "table" then
    for k, v in pairs(url) do req[k] = v end
  else
    req.url = url
    for k, v in pairs(opts or {}) do req[k] = v end
  end
  if engine.in_body() then
    error(errors.new("Fenced", "moor.fetch belongs in a step: a workflow body is replayed, so its I/O would repeat"), 2)
  end
  local f = fetch_core
  if engine.step_info() then
    return engine.io(function(resume) f.start(req, resume) end)
  end
  -- Plain code (a spec, a tool file's top level): wait on the loop.
  local done
  f.start(req, function(...) done = table.pack(...) end)
  while not done do core.wait(20) end
  return table.unpack(done, 1, done.n)
end

return M
