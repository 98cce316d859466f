--- The API's side of sessions, used by the HTTP router (http.lua) and the C
-- API (host.lua): create a session, send it a message or input responses,
-- take a line typed at moor chat, and read a session's state and transcript
-- from its event log. Errors are { code, message }; send and line add the
-- HTTP status from moor.http.status.
local engine = require "moor.engine"
local json = require "moor.json"
local errors = require "moor.errors"
local store = require "moor.store"
local conf = require "moor.conf"
local http_status = require "moor.http.status"
local agent = require "moor.authoring.agent"

local TOOL, inbox_token = agent.TOOL, agent.inbox_token

local M = {}

local send -- below

--- Start a session; with a first message (and who sends it) when given. Returns the session
-- id, or nil, message, code (engine.call's, or a refused message's).
function M.create(message, principal)
  -- Checked before the session exists: a refused first message starts none.
  if message ~= nil and (type(message) ~= "string" or message == "") then
    return nil, "message must be a non-empty string", "bad_request"
  end
  local id, err, code = engine.call(TOOL, "{}", { setup = agent.inbox_setup })
  if not id then return nil, err, code end
  if message ~= nil then
    local ok, serr = send(id, { message = message, principal = principal })
    if not ok then return nil, serr.message, serr.code end
  end
  return id
end

-- Is run_id the session or one of the runs under it (its tool calls, their
-- subagents' sessions, ...)? Bounded walk up the parent chain.
local function in_session(session_id, run_id)
  for _ = 1, conf.SESSION_DEPTH do
    if run_id == session_id then return true end
    local row = store.run(run_id)
    run_id = row and row.parent_id
    if not run_id then return false end
  end
  return false
end

local function unknown_request(req_id)
  -- The same words as engine.answer's for an id that does not exist.
  return errors.fail("not_found", ("unknown input request '%s'; GET /v1/inputs lists pending ones"):format(req_id))
end

-- Pending questions of the session's tree, oldest first.
local function session_inputs(id)
  return store.pending_inputs_under(id) or {}
end

--- Send to a session: { message, turnPolicy? } or { inputResponses = {...} }.
-- Returns true or nil, err = { code, message }.
send = function(id, body)
  local run = engine.run_details(id)
  if not run or run.tool ~= TOOL then return errors.fail("not_found", ("unknown session '%s'"):format(id)) end
  if type(body) ~= "table" then return errors.fail("bad_request", "send a JSON object") end
  local has_msg, has_resp = body.message ~= nil, body.inputResponses ~= nil
  if has_msg == has_resp then
    return errors.fail("bad_request", "send exactly one of message or inputResponses")
  end
  if has_msg then
    if type(body.message) ~= "string" or body.message == "" then
      return errors.fail("bad_request", "message must be a non-empty string")
    end
    local policy = body.turnPolicy or "steer"
    if policy ~= "steer" and policy ~= "queue" then
      return errors.fail("bad_request", "turnPolicy must be \"steer\" or \"queue\"")
    end
    -- principal: who speaks (a user id your app vouches for): user-scoped
    -- connections resolve as whoever sent the message that started the turn.
    local principal = body.principal
    if principal ~= nil and (type(principal) ~= "string" or principal == "" or #principal > 128) then
      return errors.fail("bad_request", "principal must be a string of 1 to 128 characters")
    end
    local kind, err = engine.deliver(inbox_token(id), { message = body.message, turnPolicy = policy,
      principal = principal })
    if not kind then return nil, err end
    return true
  end
  if type(body.inputResponses) ~= "table" or #body.inputResponses == 0 then
    return errors.fail("bad_request", "inputResponses must be a non-empty list of { requestId, optionId? , text? }")
  end
  for _, r in ipairs(body.inputResponses) do
    if type(r) ~= "table" or type(r.requestId) ~= "string" then
      return errors.fail("bad_request", "each input response needs a requestId")
    end
    -- A request of another session is unknown here (nothing about it is told).
    local owner = store.input(r.requestId)
    if not (owner and in_session(id, owner.run_id)) then return unknown_request(r.requestId) end
  end
  for _, r in ipairs(body.inputResponses) do
    local ok, err = engine.answer(r.requestId, { optionId = r.optionId, text = r.text,
      callId = r.callId, inputHash = r.inputHash })
    if not ok then return nil, err end
  end
  return true
end

--- A line a person typed at moor chat in this process (moor_session_line;
-- not reachable over HTTP): it answers the session's sole pending question
-- when it fits (an in-process person channel, so an approval is bound to the
-- request shown, as at a terminal prompt), else it is sent as a message.
-- Returns true or nil, err = { code, message }.
local function typed_line(id, line)
  local run = engine.run_details(id)
  if not run or run.tool ~= TOOL then return errors.fail("not_found", ("unknown session '%s'"):format(id)) end
  if type(line) ~= "string" or line == "" then return errors.fail("bad_request", "a line must be non-empty") end
  local pending = session_inputs(id)
  -- Refused (not an option, free text not allowed, already answered): then
  -- it is a message.
  if #pending == 1 and engine.answer_line(pending[1].request_id, line) then return true end
  return send(id, { message = line })
end

--- Send to a session: { message, turnPolicy? } or { inputResponses = {...} }.
-- Returns true or nil, status, code, message (as the HTTP API answers).
function M.send(id, body) return http_status.with_status(send(id, body)) end

--- A line a person typed at moor chat (above): true or nil, status, code, message.
function M.line(id, line) return http_status.with_status(typed_line(id, line)) end

--- A session's state and transcript, from its event log.
function M.details(id)
  local run = engine.run_details(id)
  if not run or run.tool ~= TOOL then return nil end
  local transcript = json.array {}
  local state = "idle"
  for _, ev in ipairs(engine.events(id)) do
    local k = ev.kind
    if k == "message.received" or k == "message.completed" then
      local p = json.decode(ev.payload)
      transcript[#transcript + 1] = { role = p.role, text = p.text, turnId = p.turnId }
    elseif k == "turn.started" then
      state = "running"
    elseif k == "turn.completed" or k == "turn.failed" then
      state = "idle"
    end
  end
  if run.status ~= "running" then state = run.status end
  return { id = id, state = state, status = run.status, transcript = transcript, started = run.started,
           updated = run.updated }
end

--- A session's tasks, from its event log (task.started, task.settled) and
-- their runs: { tasks = [ { taskId, name, kind, runId, status, calls } ] },
-- oldest first; status working | idle | completed | failed | cancelled
-- (idle: a serve task with no call waiting), calls [ { callId, turnId,
-- status } ] (status working until the call settles). nil for no session.
function M.tasks(id)
  local run = engine.run_details(id)
  if not run or run.tool ~= TOOL then return nil end
  local list, by = json.array {}, {}
  for _, ev in ipairs(engine.events(id)) do
    if ev.kind == "task.started" or ev.kind == "task.settled" then
      local p = json.decode(ev.payload) or {}
      local t = by[p.taskId]
      if ev.kind == "task.started" and not t then
        t = { taskId = p.taskId, name = p.name, kind = p.kind, runId = p.runId, calls = json.array {} }
        by[p.taskId] = t
        list[#list + 1] = t
      end
      if t then
        if ev.kind == "task.started" then
          t.calls[#t.calls + 1] = { callId = p.callId, turnId = p.turnId, status = "working" }
        else
          for _, c in ipairs(t.calls) do
            if c.callId == p.callId then c.status = p.status end
          end
        end
      end
    end
  end
  for _, t in ipairs(list) do
    local r = t.runId and engine.run_details(t.runId)
    if r and r.status ~= "running" then
      t.status = r.status
    else
      -- (a task or background run with no call working was cancelled: it
      -- is unwinding within its grace, never idle)
      t.status = t.kind == "serve" and "idle" or "cancelled"
      for _, c in ipairs(t.calls) do if c.status == "working" then t.status = "working" end end
    end
  end
  return { sessionId = id, tasks = list }
end

return M
