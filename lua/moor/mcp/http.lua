--- MCP's streamable HTTP transport at /mcp in `moor dev` (lua/moor/http.lua
-- routes here after its browser guard: a foreign Origin or Host is refused
-- with 403/421 before this; host/http.c checks MOOR_API_TOKEN on /mcp as on
-- /v1). A session per client, named by Mcp-Session-Id from initialize on:
--   POST a request       answered on a Server-Sent Events stream of its own:
--                        its progress, its elicitations, then its response
--   POST a notification  202 (notifications/cancelled cancels the run)
--   POST a response      202 (an elicitation's answer)
--   GET                  405: this server sends nothing outside a request's stream
--   DELETE               ends the session
local core = require "moor.core"
local json = require "moor.json"
local conf = require "moor.conf"
local server = require "moor.mcp.server"

local M = {}

local sessions, nsessions = {}, 0 -- Mcp-Session-Id -> { server, streams = { encoded request id -> conn }, used }
local uses = 0 -- (a counter: which session was used last)
local conns = {}                  -- conn -> { session, key }

local function jsonrpc_error(status, code, message, headers)
  return status, "application/json", headers,
    json.encode({ jsonrpc = "2.0", id = json.null, error = { code = code, message = message } })
end

local function session_id()
  return (core.random_bytes(16):gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function end_stream(conn)
  local c = conns[conn]
  if not c then return end
  conns[conn] = nil
  if c.session.streams[c.key] == conn then c.session.streams[c.key] = nil end
  core.http_end(conn)
end

local function new_session()
  local sid = session_id()
  local s = { id = sid, streams = {}, used = uses }
  s.server = server.new(function(msg, rel)
    local key = rel ~= nil and json.encode(rel) or nil
    local conn = key and s.streams[key]
    if not conn then return end -- (its stream is gone: the run goes on; its result is in moor runs)
    local text = json.encode(msg)
    if not core.http_write(conn, ("event: message\ndata: %s\n\n"):format(text)) then return end_stream(conn) end
    if msg.method == nil and msg.id ~= nil and json.encode(msg.id) == key then end_stream(conn) end
  end)
  sessions[sid] = s
  nsessions = nsessions + 1
  return s
end

local function drop_session(s)
  if not sessions[s.id] then return end
  sessions[s.id] = nil
  nsessions = nsessions - 1
  s.server.close()
  for _, conn in pairs(s.streams) do end_stream(conn) end
end

local function post(req)
  local ctype = (req.headers["content-type"] or ""):match("^%s*([^;%s]+)")
  if not ctype or ctype:lower() ~= "application/json" then
    return jsonrpc_error(415, -32600, "POST /mcp needs 'Content-Type: application/json'")
  end
  local accept = (req.headers.accept or ""):lower()
  if not (accept:find("application/json", 1, true) and accept:find("text/event-stream", 1, true)) then
    return jsonrpc_error(406, -32600, "POST /mcp needs 'Accept: application/json, text/event-stream'")
  end
  local msg, err = json.decode(req.body)
  if err then return jsonrpc_error(400, -32700, "Parse error: " .. tostring(err)) end
  if type(msg) ~= "table" or msg[1] ~= nil or msg.jsonrpc ~= "2.0" then
    return jsonrpc_error(400, -32600, "Invalid Request: POST one JSON-RPC 2.0 object (batches are not part of MCP)")
  end
  local sid = req.headers["mcp-session-id"]
  local s
  if msg.method == "initialize" then
    if nsessions >= conf.MCP_MAX_SESSIONS then
      -- Clients seldom end their sessions (DELETE): the least recently used idle one makes room.
      local oldest
      for _, o in pairs(sessions) do
        if next(o.streams) == nil and (not oldest or o.used < oldest.used) then oldest = o end
      end
      if not oldest then
        return jsonrpc_error(503, -32603, ("moor dev holds %d MCP sessions, each with a request open "
          .. "($MOOR_MCP_MAX_SESSIONS): retry when one is answered"):format(conf.MCP_MAX_SESSIONS),
          "Retry-After: 1\r\n")
      end
      drop_session(oldest)
    end
    s = new_session()
  else
    if not sid then
      return jsonrpc_error(400, -32600, "Bad Request: no Mcp-Session-Id header (initialize first; send the id it gave)")
    end
    s = sessions[sid]
    if not s then return jsonrpc_error(404, -32001, "Session not found: initialize a new one") end
    uses = uses + 1
    s.used = uses
    local v = req.headers["mcp-protocol-version"]
    if v and not server.SUPPORTED[v] then
      return jsonrpc_error(400, -32600, ("Bad Request: unsupported MCP-Protocol-Version '%s' (this server speaks %s)")
        :format(v, table.concat(server.VERSIONS, ", ")))
    end
  end
  if msg.method == nil or msg.id == nil then
    s.server.receive(msg)
    return 202, nil, nil, ""
  end
  -- A request: its answer, and what belongs to it, on a stream of its own.
  local key = json.encode(msg.id)
  if s.streams[key] then return jsonrpc_error(400, -32600, "Invalid Request: that request id is still open") end
  core.http_stream_start(req.conn, 200, "text/event-stream",
    "Cache-Control: no-cache\r\nMcp-Session-Id: " .. s.id .. "\r\n")
  s.streams[key] = req.conn
  conns[req.conn] = { session = s, key = key }
  s.server.receive(msg)
  if msg.method == "initialize" and not s.server.initialized() then drop_session(s) end
  return "stream"
end

--- /mcp: answers status, content type, headers, body, or "stream".
function M.handle(req)
  if req.method == "POST" then return post(req) end
  if req.method == "DELETE" then
    local s = sessions[req.headers["mcp-session-id"] or ""]
    if not s then return jsonrpc_error(404, -32001, "Session not found") end
    drop_session(s)
    return 200, nil, nil, ""
  end
  return jsonrpc_error(405, -32000, ("%s /mcp: this server answers on each request's stream; use POST (or DELETE "
    .. "to end a session)"):format(req.method), "Allow: POST, DELETE\r\n")
end

--- A connection closed: a stream it held is gone (the run goes on).
function M.closed(conn)
  local c = conns[conn]
  if not c then return end
  conns[conn] = nil
  if c.session.streams[c.key] == conn then c.session.streams[c.key] = nil end
end

return M
