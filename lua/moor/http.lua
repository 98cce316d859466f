--- The HTTP API of `moor dev` (served by host/http.c; see README "HTTP API").
-- handle(req) answers status, content_type, headers, body; or "stream" once
-- it has started a Server-Sent Events stream on req.conn.
local core = require "moor.core"
local engine = require "moor.engine"
local session = require "moor.session"
local json = require "moor.json"
local errors = require "moor.errors"
local conf = require "moor.conf"
local terminal = require "moor.terminal"
local http_status = require "moor.http.status"
local openapi = require "moor.http.openapi"
local mcp_http = require "moor.mcp.http"

local M = {}

local config = { token = nil, hosts = {}, any_host = false }
local streams = {}        -- conn -> { run = id, last = seq }
local nstreams = 0
local run_streams = {}    -- run id -> open streams

local JSON = "application/json"
local TERMINAL = { ["run.completed"] = true, ["run.failed"] = true, ["run.cancelled"] = true }
local DEFAULT_PORT = { http = "80", https = "443" }

-- scheme, host (lower case, IPv6 in brackets), port (a string or nil) of an
-- absolute URL with nothing after its authority but "/"; nil when it is not one.
local function split_origin(url)
  local scheme, host, port = url:lower():match("^(https?)://(%[[%x:.]+%]):?(%d*)/?$")
  if not scheme then scheme, host, port = url:lower():match("^(https?)://([%w.-]+):?(%d*)/?$") end
  if not scheme then return nil end
  return scheme, host, port ~= "" and port or nil
end
M.split_origin = split_origin

local function allow_host(scheme, host, port)
  port = port or DEFAULT_PORT[scheme]
  config.hosts[host .. ":" .. port] = true
  if port == DEFAULT_PORT[scheme] then config.hosts[host] = true end -- browsers leave a default port out
end

-- The Host values this server answers to (DNS rebinding: a page whose own
-- name resolves to 127.0.0.1 is same-origin to the browser, but its requests
-- carry Host: <its name>): the served address, its other loopback names, and
-- the public URL's host (with a token). A wildcard listen (0.0.0.0, ::) has no one address,
-- so any Host is taken there; it needs MOOR_API_TOKEN, which a page lacks.
function M.configure(c)
  config.url = c.url
  config.token = (c.token ~= nil and c.token ~= "") and c.token or nil
  config.hosts, config.any_host = {}, false
  local scheme, host, port = split_origin(c.url or "")
  if scheme then
    allow_host(scheme, host, port)
    if host == "0.0.0.0" or host == "[::]" then config.any_host = true end
    if host:match("^127%.") or host == "[::1]" then
      for _, h in ipairs { "127.0.0.1", "localhost", "[::1]" } do allow_host(scheme, h, port) end
    end
  end
  -- The public URL is a tunnel's or a proxy's: what comes through it comes
  -- from anywhere, though it reaches us from loopback. Its Host is the API's
  -- only with MOOR_API_TOKEN set (webhooks need neither).
  config.public_host = nil
  if c.public_url then
    local pscheme, phost, pport = split_origin(c.public_url)
    if pscheme and config.token then allow_host(pscheme, phost, pport)
    elseif pscheme then
      config.public_host = { [phost] = true, [phost .. ":" .. (pport or DEFAULT_PORT[pscheme])] = true }
    end
  end
end

local function reply(status, value, headers)
  return status, JSON, headers, json.encode(value)
end

--- An engine answer as the HTTP API gives it (lua/moor/http/status.lua), for host.lua.
M.with_status = http_status.with_status

local function fail(code, message, headers)
  return reply(http_status.of(code), { error = { code = code, message = message } }, headers)
end

-- An engine err = { code, message } as the answer.
local function api_fail(err)
  return fail(err.code, err.message)
end

-- engine.call's codes, as the API names them.
local CALL_CODES = { unknown = "not_found", json = "bad_json", input = "invalid_input" }
local function call_fail(err, code)
  if code == "store" then return api_fail(select(2, errors.store_unavailable(err))) end
  return fail(CALL_CODES[code] or "internal", err)
end

-- The browser guard for every route but webhooks (README "HTTP API"): a Host
-- that is not this server (421), a foreign Origin (403), an API POST whose
-- body is not declared JSON (415: HTML forms and fetch's "simple requests"
-- can only send text/plain, form types or none). No CORS is ever granted.
-- A request with no Host at all (HTTP/1.0 tools) is not a browser's: let through.
local function guard(req)
  local h = req.headers
  local host = h.host and h.host:lower()
  if host and config.public_host and config.public_host[host] and not config.hosts[host] then
    return fail("misdirected_request", ("Host '%s' is MOOR_PUBLIC_URL's (a tunnel or proxy, reachable from "
      .. "anywhere): the API answers there only when MOOR_API_TOKEN is set; webhooks work without it"):format(h.host))
  end
  if host and not config.any_host and not config.hosts[host] then
    return fail("misdirected_request", ("Host '%s' is not this server: connect to %s "
      .. "(or set MOOR_PUBLIC_URL to the address clients use); requests for other names are refused "
      .. "so that a web page cannot reach this API through DNS rebinding"):format(h.host, config.url))
  end
  local origin = h.origin
  if origin then
    local scheme, ohost, oport = split_origin(origin)
    local authority = scheme and ohost .. ":" .. (oport or DEFAULT_PORT[scheme])
    local ok = authority and (config.hosts[authority] or (config.any_host and host
      and (host == authority or host == ohost and not oport)))
    if not ok then
      return fail("forbidden_origin", ("Origin '%s' is not this server: moor's API is not for other web "
        .. "pages (no CORS is granted); call it from a program, or from a page this server serves"):format(origin))
    end
  end
end

local function json_body(req)
  local ctype = (req.headers["content-type"] or ""):match("^%s*([^;%s]+)")
  if not ctype or ctype:lower() ~= JSON then
    return fail("unsupported_media_type", ("%s %s needs 'Content-Type: application/json'%s")
      :format(req.method, req.path, ctype and (", not '" .. ctype .. "'") or " (even with an empty body)"))
  end
end

local function decode_body(req)
  if req.body == "" then return nil, "the request body is empty: send a JSON object" end
  local v, err = json.decode(req.body)
  if err then return nil, "the request body is not valid JSON: " .. err end
  return v
end

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- Server-Sent Events: every event of the run after `after`, then live ones
-- until the run settles. A field ends at CR, LF or CRLF (an EventSource
-- splits on each), so nothing moor frames may hold a raw one: the payload is
-- JSON, whose strings escape them; any CR/LF outside its strings is
-- whitespace, sent as a space.
local function sse_line(run, seq, kind, name, payload, time, op)
  if payload:find("[\r\n]") then payload = payload:gsub("[\r\n]", " ") end
  if not seq then
    -- live-only (message.delta): no id line (the client's Last-Event-ID stays the last logged event's)
    return ("event: %s\ndata: {\"runId\":%s,\"seq\":null,\"kind\":%s,\"name\":null,\"op\":null,\"time\":%d,"
      .. "\"payload\":%s}\n\n"):format(kind, json.encode(run), json.encode(kind), time, payload)
  end
  return ("id: %d\nevent: %s\ndata: {\"runId\":%s,\"seq\":%d,\"kind\":%s,\"name\":%s,\"op\":%s,\"time\":%d,"
    .. "\"payload\":%s}\n\n"):format(seq, kind, json.encode(run), seq, json.encode(kind),
    name and json.encode(name) or "null", op and tostring(op) or "null", time, payload)
end

-- ?format=text: the same events as lines for a terminal (moor chat through a
-- running moor dev): `event: <kind>` and `data: <line>`, no JSON to parse.
-- Text is split into data lines at CR, LF and CRLF alike. Events with no
-- text are skipped, but for the turn boundaries a client follows to know
-- whether a turn runs (sent as id and event lines, no data).
local BOUNDARY = { ["turn.started"] = true, ["turn.completed"] = true }

local function text_line(run, seq, kind, payload)
  local line
  if not seq then
    -- message.delta: its text as data lines (a client joins them with LF), no id
    local p = json.decode(payload) or {}
    if type(p.text) ~= "string" or p.text == "" then return nil end
    local out = { ("event: %s\n"):format(kind) }
    for l in (p.text:gsub("\r\n?", "\n") .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = "data: " .. l .. "\n" end
    out[#out + 1] = "\n"
    return table.concat(out)
  end
  if kind == "input.requested" then
    local p = json.decode(payload) or {}
    local q = p.requestId and engine.format_input(p.requestId)
    line = q and ("? " .. q .. "\n  (type your answer)") or nil
  else
    line = terminal.format_event(run, kind, payload)
  end
  if not line and not BOUNDARY[kind] then return nil end
  local out = { ("id: %d\nevent: %s\n"):format(seq, kind) }
  if line then
    for l in (line:gsub("\r\n?", "\n") .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = "data: " .. l .. "\n" end
  end
  out[#out + 1] = "\n"
  return table.concat(out)
end

local function event_text(st, run, seq, kind, name, payload, time, op)
  if st.text then return text_line(run, seq, kind, payload) end
  return sse_line(run, seq, kind, name, payload, time, op)
end

local function forget_stream(conn)
  local st = streams[conn]
  if st then
    streams[conn] = nil
    nstreams = nstreams - 1
    local n = (run_streams[st.run] or 1) - 1
    run_streams[st.run] = n > 0 and n or nil
  end
end

local function end_stream(conn)
  forget_stream(conn)
  core.http_end(conn)
end

local function events_stream(req, id)
  local run = engine.run_details(id)
  if not run then return fail("not_found", ("unknown run '%s'"):format(id)) end
  local after = tonumber(req.headers["last-event-id"] or (req.query and req.query:match("after=(%d+)")) or 0)
  if not after then return fail("bad_request", "Last-Event-ID must be an event id (a number)") end
  if (run_streams[id] or 0) >= conf.MAX_STREAMS_PER_RUN then
    return fail("too_many_streams", ("run '%s' already has %d open event streams (MOOR_MAX_STREAMS_PER_RUN);"
      .. " close one and retry"):format(id, conf.MAX_STREAMS_PER_RUN), "Retry-After: 1\r\n")
  end
  core.http_stream_start(req.conn, 200, "text/event-stream", "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n")
  local st = { run = id, last = after, text = req.query and req.query:find("format=text", 1, true) ~= nil }
  local settled = false
  for _, ev in ipairs(engine.events(id)) do
    if ev.seq > after then
      local text = event_text(st, id, ev.seq, ev.kind, ev.name, ev.payload, ev.time, ev.op)
      if text then core.http_write(req.conn, text) end
      st.last = ev.seq
      if TERMINAL[ev.kind] then settled = true end
    end
  end
  if settled or run.status ~= "running" then
    core.http_end(req.conn)
  else
    streams[req.conn] = st
    nstreams = nstreams + 1
    run_streams[id] = (run_streams[id] or 0) + 1
  end
  return "stream"
end

engine.subscribe(function(run, seq, kind, name, payload, time, op)
  if nstreams == 0 then return end
  for conn, st in pairs(streams) do
    if st.run == run and (not seq or seq > st.last) then
      st.last = seq or st.last
      local text = event_text(st, run, seq, kind, name, payload, time, op)
      if text and not core.http_write(conn, text) then
        end_stream(conn)
      elseif TERMINAL[kind] then
        end_stream(conn)
      end
    end
  end
end)

function M.closed(conn)
  forget_stream(conn)
  mcp_http.closed(conn)
end


local function unknown(what, id)
  return fail("not_found", ("unknown %s '%s'"):format(what, id))
end

-- 200 with v, or 404 for the unknown `what` id.
local function show(v, what, id)
  if not v then return unknown(what, id) end
  return reply(200, v)
end

-- Cancel run id (a run, or a session: key names it in the answer).
local function cancel(id, key)
  local ok, err = engine.cancel(id)
  if not ok then return api_fail(err) end
  return reply(202, { [key] = id, status = "cancelling" })
end

local routes = {
  { "POST", "^/v1/tools/([^/]+)/calls$", function(req, name)
    name = unescape(name)
    if name:sub(1, 6) == "moor__" then -- built-in tools (a session's loop) are not callable from outside
      return fail("not_found", ("unknown tool '%s': names starting with moor__ are built in"):format(name))
    end
    local id, err, code = engine.call(name, req.body ~= "" and req.body or "{}")
    if id then return reply(201, { runId = id, callId = err }) end
    return call_fail(err, code)
  end },
  { "GET", "^/v1/openapi%.json$", function() return 200, JSON, nil, openapi.json() end },
  { "GET", "^/v1/runs$", function()
    local rows = json.decode(engine.list_runs(true))
    return reply(200, { runs = rows })
  end },
  { "GET", "^/v1/runs/([^/]+)$", function(_, id) return show(engine.run_details(id), "run", id) end },
  { "GET", "^/v1/runs/([^/]+)/events$", events_stream },
  { "POST", "^/v1/runs/([^/]+)/cancel$", function(_, id) return cancel(id, "runId") end },
  { "GET", "^/v1/inputs$", function()
    return reply(200, { inputs = engine.inputs() })
  end },
  { "POST", "^/v1/inputs/([^/]+)$", function(req, id)
    local answer, err = decode_body(req)
    if err then return fail("bad_json", err) end
    local ok, aerr = engine.answer(unescape(id), answer)
    if not ok then return api_fail(aerr) end
    return reply(200, { requestId = unescape(id), outcome = "answered" })
  end },
  { "POST", "^/v1/sessions$", function(req)
    local body = {}
    if req.body ~= "" then
      local err
      body, err = decode_body(req)
      if err then return fail("bad_json", err) end
    end
    if type(body) ~= "table" or (body.message ~= nil and type(body.message) ~= "string") then
      return fail("bad_request", "send {} or { message = \"...\" }")
    end
    if not engine.tools[session.TOOL] then
      return fail("not_found", "this agent has no agent.lua, so it cannot hold sessions")
    end
    local id, err, code = session.create(body.message, body.principal)
    if not id then
      if code == "bad_request" or code == "storage_unavailable" then return fail(code, err) end
      return call_fail(err, code)
    end
    return reply(201, { sessionId = id })
  end },
  { "GET", "^/v1/sessions/([^/]+)$", function(_, id) return show(session.details(id), "session", id) end },
  { "POST", "^/v1/sessions/([^/]+)$", function(req, id)
    local body, err = decode_body(req)
    if err then return fail("bad_json", err) end
    local ok, _, code, message = session.send(id, body)
    if not ok then return fail(code, message) end
    return reply(202, { sessionId = id, accepted = true })
  end },
  { "GET", "^/v1/sessions/([^/]+)/tasks$", function(_, id) return show(session.tasks(id), "session", id) end },
  { "GET", "^/v1/sessions/([^/]+)/stream$", function(req, id)
    if not session.details(id) then return unknown("session", id) end
    return events_stream(req, id)
  end },
  { "POST", "^/v1/sessions/([^/]+)/cancel$", function(_, id)
    if not session.details(id) then return unknown("session", id) end
    return cancel(id, "sessionId")
  end },
  { "POST", "^/v1/hooks/([^/]+)$", function(req, token)
    local payload, err = decode_body(req)
    if err then return fail("bad_json", err) end
    local kind, derr = engine.deliver(unescape(token), payload, "hook")
    if not kind then return api_fail(derr) end
    return reply(202, { ok = true })
  end },
}

-- Request headers that carry credentials: a webhook delivery records them
-- as "[redacted]", so neither the database nor the event stream holds them.
local SECRET_HEADERS = {
  authorization = true, ["proxy-authorization"] = true, cookie = true, ["set-cookie"] = true,
  ["x-api-key"] = true,
}
local REDACTED = "[redacted]"

local function webhook(req, token)
  local recorded = {}
  for k, v in pairs(req.headers) do recorded[k] = SECRET_HEADERS[k] and REDACTED or v end
  local kind, rw = engine.deliver(unescape(token), {
    method = req.method, headers = recorded, body = req.body, query = req.query, path = req.path,
  }, "webhook")
  if not kind then return api_fail(rw) end
  if rw then
    local headers = {}
    local ctype = "text/plain"
    for k, v in pairs(rw.headers or {}) do
      if k:lower() == "content-type" then ctype = v else headers[#headers + 1] = k .. ": " .. v end
    end
    local body = rw.body
    if type(body) == "table" then
      body = json.encode(body)
      if not (rw.headers and (rw.headers["content-type"] or rw.headers["Content-Type"])) then ctype = JSON end
    end
    -- a list of lines: the C writer checks each one (a CR/LF inside a value is refused, 500)
    return rw.status or 200, ctype, headers, body or ""
  end
  return reply(202, { ok = true })
end

-- name=value pairs of a query string, percent-decoded (the last of a name wins).
local function query_args(q)
  local out = {}
  for pair in (q or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    k, v = unescape((k:gsub("+", " "))), unescape((v:gsub("+", " ")))
    if k ~= "" and #k <= 64 and #v <= 4096 then out[k] = v end
  end
  return out
end

local function page(status, title, text)
  return status, "text/html; charset=utf-8", nil, ("<!doctype html><meta charset=utf-8><title>%s</title><p>%s</p>\n")
    :format(title, text)
end

-- GET /v1/auth/callback?state&code (or &error): a provider sends the person
-- back after a sign-in (engine/auth.lua). Like a webhook it takes any Host and
-- no API token: its 32-byte state is the secret. Answered with a page.
local function auth_callback(req)
  if req.method ~= "GET" then return fail("method_not_allowed", "the sign-in callback is a GET", "Allow: GET\r\n") end
  local q = query_args(req.query)
  local args = { code = q.code, error = q.error, error_description = q.error_description }
  local ok, err = engine.auth_callback(q.state, args)
  if not ok then
    if err and err.code == "not_found" then
      return page(404, "Sign-in link expired", "This sign-in is no longer waiting (it was used, withdrawn or "
        .. "has expired). Nothing was changed.")
    end
    return page(503, "Try again", "The sign-in could not be recorded just now; open the link again.")
  end
  if args.error then return page(200, "Sign-in declined", "The sign-in was declined; the tool was told so.") end
  return page(200, "Signed in", "You are signed in; the tool goes on by itself. You can close this window.")
end

function M.handle(req)
  local path = req.path
  if path == "/v1/auth/callback" then return auth_callback(req) end
  -- Webhooks take any Host, Origin and content type: remote services call
  -- them through a public URL (a proxy or a tunnel may name any host), and
  -- the unguessable token is what grants access.
  local token = path:match("^/%.well%-known/workflow/v1/webhook/([^/]+)$")
  if token then return webhook(req, token) end
  local st, ct, hd, bd = guard(req)
  if st then return st, ct, hd, bd end
  if path == "/mcp" then return mcp_http.handle(req) end -- (MCP's streamable HTTP: lua/moor/mcp/http.lua)
  -- (MOOR_API_TOKEN on /v1 routes is checked by host/http.c when the headers
  -- are complete, before any body is read: a request without it never gets here.)
  if req.method == "POST" and path:sub(1, 4) == "/v1/" then
    st, ct, hd, bd = json_body(req)
    if st then return st, ct, hd, bd end
  end
  local allowed
  for _, r in ipairs(routes) do
    local caps = { path:match(r[2]) }
    if caps[1] then
      if r[1] == req.method then return r[3](req, table.unpack(caps)) end
      allowed = r[1]
    end
  end
  if allowed then
    return fail("method_not_allowed", ("%s %s is not a route; use %s"):format(req.method, path, allowed),
      "Allow: " .. allowed .. "\r\n")
  end
  return fail("not_found", ("no route for %s %s"):format(req.method, path))
end

return M
