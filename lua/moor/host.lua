--- The face host/moor.c calls (`require "moor.host"`): every engine entry
-- point, plus what only the embedder needs: loading an agent, the HTTP API's
-- requests, sessions from the C API, terminal lines for moor chat, and
-- running specs. It sits on top of everything (http, session, loader), so
-- the engine below it never requires them.
--
-- answer, answer_line, cancel, session_send and session_line answer as the
-- HTTP API does, (nil, http_status, code, message); host/error.c reads only
-- the code (its LUA_CODES table gives the MOOR_E* code) and the message,
-- never the status.
local conf = require "moor.conf"
local engine = require "moor.engine"
local http = require "moor.http"
local session = require "moor.session"
local loader = require "moor.loader"
local testrunner = require "moor.testrunner"
local terminal = require "moor.terminal"
local harness_host = require "moor.harness.host"
local cli = require "moor.cli"
local mcp_stdio = require "moor.mcp.stdio"
require "moor.auth" -- (ctx.getToken and ctx.requireAuth, for every tool's ctx)

local M = setmetatable({}, { __index = engine })

-- (true) or (nil, status, code, message), read by host/moor.c's api_call.
local api = http.with_status

function M.answer(req_id, answer, bound) return api(engine.answer(req_id, answer, bound)) end
function M.answer_line(req_id, line) return api(engine.answer_line(req_id, line)) end
function M.cancel(run_id) return api(engine.cancel(run_id)) end

--- Load every unfinished run (moor_resume_all): harness agents' turns a
-- restart cut end as interrupted first, so their runs replay into that.
function M.resume_all()
  local ok, err = harness_host.recover()
  if not ok then return nil, err end
  return engine.resume_all()
end

--- Load the agent project in dir (tools/, agent.lua, subagents/).
function M.load_agent(dir) return loader.load(dir, engine) end

--- HTTP (host/serve.c calls these while moor_listen'd; lua/moor/http.lua routes).
M.http_request, M.http_closed = http.handle, http.closed

--- `moor mcp` (host/mcp_stdio.c): the server starts with the function that
-- writes a line to the real stdout, then gets each line read from stdin.
M.mcp_start, M.mcp_line, M.mcp_closed = mcp_stdio.start, mcp_stdio.line, mcp_stdio.closed

--- moor dev serves at url. $MOOR_PUBLIC_URL (scheme://host[:port], e.g. a
-- tunnel's or proxy's address) is the base of webhook URLs and a Host the
-- API answers to. Returns nil, or a message when it is malformed.
function M.serving(url)
  local public = os.getenv("MOOR_PUBLIC_URL")
  if public == "" then public = nil end
  if public and not http.split_origin(public) then
    return ("MOOR_PUBLIC_URL must be http(s)://host[:port] with no path, not '%s'"):format(public)
  end
  conf.public_url = public and public:gsub("/$", "") or url
  -- (providers return here after a sign-in; a wildcard listen address is no
  -- address a browser can be sent back to: none without MOOR_PUBLIC_URL)
  local _, lhost = http.split_origin(url or "")
  local wildcard = not public and (lhost == "0.0.0.0" or lhost == "[::]")
  conf.callback_url = not wildcard and (conf.public_url .. "/v1/auth/callback")
  conf.evict_rounds = true -- (a serving host's loop turns when the next parked run is to be evicted)
  http.configure { url = url, token = os.getenv("MOOR_API_TOKEN"), public_url = public }
end

--- Sessions from the C API (moor_session_start / moor_session_send / moor_session_line).
function M.session_start(message)
  if not engine.tools[session.TOOL] then return nil, "this agent has no agent.lua, so it cannot hold sessions" end
  return session.create(message)
end

-- (session.send and session.line answer with statuses already.)
M.session_send, M.session_line = session.send, session.line

--- One readable line for a terminal channel (moor chat), or nil.
M.format_event = terminal.format_event

--- The CLI's views (host/waiting.c): moor inputs, moor runs with filters,
-- what one run waits on.
M.cli_inputs, M.cli_runs, M.cli_waiting = cli.list_inputs, cli.list_runs, cli.run_waiting

--- `moor test`: busted inside the host.
function M.run_tests(args) return testrunner.run(args) end

return M
