--- The HTTP API of `moor dev` (served by host/http.c; see README "HTTP API").
-- handle(req) answers status, content_type, headers, body; or "stream" once
-- it has started a Server-Sent Events stream on req.conn.
local core = require "moor.core"
local engine = require "moor.engine"
local json = require "moor.json"

local M = {}

local config = { token = nil }
local streams = {}        -- conn -> { run = id, last = seq }
local nstreams = 0
-- open SSE streams per run, capped (429 beyond): a client cannot pin the host with streams
local MAX_STREAMS_PER_RUN = math.tointeger(tonumber(os.getenv("MOOR_MAX_STREAMS_PER_RUN") or "")) or 32
local run_streams = {}    -- run id -> open streams

local JSON = "application/json"
local TERMINAL = { ["run.completed"] = true, ["run.failed"] = true, ["run.cancelled"] = true }

function M.configure(c)
  config.url = c.url
  config.token = (c.token ~= nil and c.token ~= "") and c.token or nil
end

local function reply(status, value, headers)
  return status, JSON, headers, json.encode(value)
end

local function fail(status, code, message, headers)
  return reply(status, { error = { code = code, message = message } }, headers)
end

-- Compare without an early exit, so timing reveals nothing about the token.
local function same(a, b)
  if #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = diff | (a:byte(i) ~ b:byte(i)) end
  return diff == 0
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
-- until the run settles.
local function sse_line(run, seq, kind, name, payload, time, op)
  return ("id: %d\nevent: %s\ndata: {\"runId\":%s,\"seq\":%d,\"kind\":%s,\"name\":%s,\"op\":%s,\"time\":%d,"
    .. "\"payload\":%s}\n\n"):format(seq, kind, json.encode(run), seq, json.encode(kind),
    name and json.encode(name) or "null", op and tostring(op) or "null", time, payload)
end

-- ?format=text: the same events as lines for a terminal (moor chat through a
-- running moor dev): `event: <kind>` and `data: <line>`, no JSON to parse.
local function text_line(run, seq, kind, payload)
  local line
  if kind == "input.requested" then
    local p = json.decode(payload) or {}
    local q = p.requestId and engine.format_input(p.requestId)
    line = q and ("? " .. q .. "\n  (type your answer)") or nil
  else
    line = engine.format_event(run, kind, payload)
  end
  local out = { ("id: %d\nevent: %s\n"):format(seq, kind) }
  for l in ((line or "") .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = "data: " .. l .. "\n" end
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
  if not run then return fail(404, "not_found", ("unknown run '%s'"):format(id)) end
  local after = tonumber(req.headers["last-event-id"] or (req.query and req.query:match("after=(%d+)")) or 0)
  if not after then return fail(400, "bad_request", "Last-Event-ID must be an event id (a number)") end
  if (run_streams[id] or 0) >= MAX_STREAMS_PER_RUN then
    return fail(429, "too_many_streams", ("run '%s' already has %d open event streams (MOOR_MAX_STREAMS_PER_RUN);"
      .. " close one and retry"):format(id, MAX_STREAMS_PER_RUN), "Retry-After: 1\r\n")
  end
  core.http_stream_start(req.conn, 200, "text/event-stream", "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n")
  local st = { run = id, last = after, text = req.query and req.query:find("format=text", 1, true) ~= nil }
  local settled = false
  for _, ev in ipairs(engine.events(id)) do
    if ev.seq > after then
      core.http_write(req.conn, event_text(st, id, ev.seq, ev.kind, ev.name, ev.payload, ev.time, ev.op))
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

engine.subscribe(function(run, seq, kind, name, payload, time)
  if nstreams == 0 then return end
  for conn, st in pairs(streams) do
    if st.run == run and seq > st.last then
      st.last = seq
      if not core.http_write(conn, event_text(st, run, seq, kind, name, payload, time, nil)) then
        end_stream(conn)
      elseif TERMINAL[kind] then
        end_stream(conn)
      end
    end
  end
end)

function M.closed(conn)
  forget_stream(conn)
end

local function session() return require "moor.session" end

local function api_fail(_, status, code, message)
  return fail(status, code, message)
end

local routes = {
  { "POST", "^/v1/tools/([^/]+)/calls$", function(req, name)
    local id, err, code = engine.call(unescape(name), req.body ~= "" and req.body or "{}")
    if id then return reply(201, { runId = id, callId = err }) end
    if code == "unknown" then return fail(404, "not_found", err) end
    if code == "json" then return fail(400, "bad_json", err) end
    if code == "input" then return fail(400, "invalid_input", err) end
    return fail(500, "internal", err)
  end },
  { "GET", "^/v1/runs$", function()
    local rows = json.decode(engine.list_runs(true))
    return reply(200, { runs = rows })
  end },
  { "GET", "^/v1/runs/([^/]+)$", function(_, id)
    local run = engine.run_details(id)
    if not run then return fail(404, "not_found", ("unknown run '%s'"):format(id)) end
    return reply(200, run)
  end },
  { "GET", "^/v1/runs/([^/]+)/events$", events_stream },
  { "POST", "^/v1/runs/([^/]+)/cancel$", function(_, id)
    local ok, status, code, message = engine.cancel(id)
    if not ok then return api_fail(ok, status, code, message) end
    return reply(202, { runId = id, status = "cancelling" })
  end },
  { "GET", "^/v1/inputs$", function()
    return reply(200, { inputs = engine.inputs() })
  end },
  { "POST", "^/v1/inputs/([^/]+)$", function(req, id)
    local answer, err = decode_body(req)
    if err then return fail(400, "bad_json", err) end
    local ok, status, code, message = engine.answer(unescape(id), answer)
    if not ok then return api_fail(ok, status, code, message) end
    return reply(200, { requestId = unescape(id), outcome = "answered" })
  end },
  { "POST", "^/v1/sessions$", function(req)
    local body = {}
    if req.body ~= "" then
      local err
      body, err = decode_body(req)
      if err then return fail(400, "bad_json", err) end
    end
    if type(body) ~= "table" or (body.message ~= nil and type(body.message) ~= "string") then
      return fail(400, "bad_request", "send {} or { message = \"...\" }")
    end
    if not engine.tools[session().TOOL] then
      return fail(404, "not_found", "this agent has no agent.lua, so it cannot hold sessions")
    end
    local id, err = session().create(body.message)
    if not id then return fail(500, "internal", err) end
    return reply(201, { sessionId = id })
  end },
  { "GET", "^/v1/sessions/([^/]+)$", function(_, id)
    local d = session().details(id)
    if not d then return fail(404, "not_found", ("unknown session '%s'"):format(id)) end
    return reply(200, d)
  end },
  { "POST", "^/v1/sessions/([^/]+)$", function(req, id)
    local body, err = decode_body(req)
    if err then return fail(400, "bad_json", err) end
    local ok, status, code, message = session().send(id, body)
    if not ok then return api_fail(ok, status, code, message) end
    return reply(202, { sessionId = id, accepted = true })
  end },
  { "GET", "^/v1/sessions/([^/]+)/stream$", function(req, id)
    if not session().details(id) then return fail(404, "not_found", ("unknown session '%s'"):format(id)) end
    return events_stream(req, id)
  end },
  { "POST", "^/v1/sessions/([^/]+)/cancel$", function(_, id)
    if not session().details(id) then return fail(404, "not_found", ("unknown session '%s'"):format(id)) end
    local ok, status, code, message = engine.cancel(id)
    if not ok then return api_fail(ok, status, code, message) end
    return reply(202, { sessionId = id, status = "cancelling" })
  end },
  { "POST", "^/v1/hooks/([^/]+)$", function(req, token)
    local payload, err = decode_body(req)
    if err then return fail(400, "bad_json", err) end
    local kind, status, code, message = engine.deliver(unescape(token), payload)
    if not kind then return api_fail(kind, status, code, message) end
    return reply(202, { ok = true })
  end },
}

local function webhook(req, token)
  local kind, respond_or_status, code, message = engine.deliver(token, {
    method = req.method, headers = req.headers, body = req.body, query = req.query, path = req.path,
  })
  if not kind then return fail(respond_or_status, code, message) end
  local rw = respond_or_status
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

function M.handle(req)
  local path = req.path
  local token = path:match("^/%.well%-known/workflow/v1/webhook/([^/]+)$")
  if token then return webhook(req, token) end
  if path:sub(1, 4) == "/v1/" and config.token then
    local auth = req.headers.authorization or ""
    if not same(auth, "Bearer " .. config.token) then
      return fail(401, "unauthorized", "this server needs 'Authorization: Bearer <MOOR_API_TOKEN>'",
        "WWW-Authenticate: Bearer\r\n")
    end
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
    return fail(405, "method_not_allowed", ("%s %s is not a route; use %s"):format(req.method, path, allowed),
      "Allow: " .. allowed .. "\r\n")
  end
  return fail(404, "not_found", ("no route for %s %s"):format(req.method, path))
end

return M
