--- The HTTP API (lua/moor/http.lua, README "HTTP API") as an OpenAPI 3.1
-- document, served at GET /v1/openapi.json so that clients can be generated
-- from it. tests/e2e/test_openapi.sh validates it with an OpenAPI validator
-- and checks every route in it answers as documented against a real
-- `moor dev`: a route, status or error code added to http.lua goes here too.
-- The error codes of each status come from lua/moor/http/status.lua's names.
local json = require "moor.json"

local M = {}

local array = json.array

local function ref(name) return { ["$ref"] = "#/components/schemas/" .. name } end

local STRING, INTEGER, BOOLEAN = { type = "string" }, { type = "integer" }, { type = "boolean" }
local TIME = { type = "string", format = "date-time" }
local ANY = {} -- any JSON value

local function object(props, required, extra)
  local o = { type = "object", properties = props, required = required and array(required) or nil }
  if extra ~= nil then o.additionalProperties = extra end
  return o
end

local function list(items) return { type = "array", items = items } end

local function json_content(schema) return { ["application/json"] = { schema = schema } } end

-- A JSON answer with schema.
local function ok(description, schema) return { description = description, content = json_content(schema) } end

-- An error answer whose code is one of codes.
local function err(description, codes)
  return ok(description, {
    allOf = array { ref("Error") },
    properties = { error = { type = "object", properties = { code = { enum = array(codes) } } } },
  })
end

-- What every /v1 route may answer before it is reached (README "A hostile web
-- page next door", MOOR_API_TOKEN); POSTs also 415 and, for writes, 503.
local function guarded(responses, post)
  responses["401"] = responses["401"] or err("MOOR_API_TOKEN is set and the request lacks it", { "unauthorized" })
  responses["403"] = responses["403"] or err("a foreign Origin", { "forbidden_origin" })
  responses["421"] = responses["421"] or err("a Host that is not this server", { "misdirected_request" })
  if post then
    responses["415"] = err("the body is not declared application/json", { "unsupported_media_type" })
    responses["503"] = responses["503"] or err("the database cannot be written; nothing was recorded",
      { "storage_unavailable" })
  end
  return responses
end

local function param(name, description)
  return { name = name, ["in"] = "path", required = true, description = description, schema = STRING }
end

local function op(summary, id, params, responses, body, post)
  return {
    summary = summary, operationId = id, parameters = params and array(params) or nil,
    requestBody = body, responses = guarded(responses, post),
  }
end

local function body(schema, required)
  return { required = required or false, content = json_content(schema) }
end

local SSE = {
  description = "Server-Sent Events: each event of the log as `id: <seq>`, `event: <kind>` and `data: "
    .. "<StreamEvent as JSON>`, a blank line after each (the same bytes live and replayed); resumes after "
    .. "Last-Event-ID or ?after=N; the stream ends when the run settles. With ?format=text (sessions), each "
    .. "event that has text is sent as `event: <kind>` and a `data: <line>` per line, and turn.started / "
    .. "turn.completed with no data.",
  content = { ["text/event-stream"] = { schema = { type = "string", description = "SSE frames; each data "
    .. "line is a StreamEvent (components.schemas.StreamEvent) unless format=text" } } },
}

local function stream_params(id_name)
  return {
    param(id_name, "the run or session id"),
    { name = "Last-Event-ID", ["in"] = "header", required = false, description = "resume after this seq",
      schema = { type = "string", pattern = "^[0-9]+$" } },
    { name = "after", ["in"] = "query", required = false, description = "resume after this seq", schema = INTEGER },
  }
end

local RUN_ID, SESSION_ID = param("id", "a run id (run_...)"), param("id", "a session id")

local function build()
  local not_found = function(what) return err("unknown " .. what, { "not_found" }) end
  local paths = {
    ["/v1/openapi.json"] = { get = op("This document", "getOpenApi", nil, {
      ["200"] = ok("the OpenAPI 3.1 document of this API", { type = "object" }),
    }) },
    ["/v1/tools/{name}/calls"] = { post = op("Start a run of a tool", "callTool", { param("name", "the tool") }, {
      ["201"] = ok("the run started", ref("CallCreated")),
      ["400"] = err("the body is not JSON, or not the tool's input (the message names the field)",
        { "bad_json", "invalid_input" }),
      ["404"] = not_found("tool (or a built-in moor__ tool)"),
    }, body(ANY), true) },
    ["/v1/runs"] = { get = op("List the runs", "listRuns", nil, {
      ["200"] = ok("every run, oldest first", object({ runs = list(ref("RunRow")) }, { "runs" })),
    }) },
    ["/v1/runs/{id}"] = { get = op("A run", "getRun", { RUN_ID }, {
      ["200"] = ok("the run", ref("Run")),
      ["404"] = not_found("run"),
    }) },
    ["/v1/runs/{id}/events"] = { get = op("A run's events (SSE)", "streamRunEvents", stream_params("id"), {
      ["200"] = SSE,
      ["400"] = err("Last-Event-ID is not a number", { "bad_request" }),
      ["404"] = not_found("run"),
      ["429"] = err("the run has MOOR_MAX_STREAMS_PER_RUN streams open", { "too_many_streams" }),
    }) },
    ["/v1/runs/{id}/cancel"] = { post = op("Cancel a run", "cancelRun", { RUN_ID }, {
      ["202"] = ok("the cancel is recorded", object({ runId = STRING, status = { const = "cancelling" } },
        { "runId", "status" })),
      ["404"] = not_found("run"),
      ["409"] = err("the run has already settled", { "already_settled" }),
    }, body(ANY), true) },
    ["/v1/inputs"] = { get = op("Pending questions and sign-ins", "listInputs", nil, {
      ["200"] = ok("oldest first", object({ inputs = list(ref("Input")) }, { "inputs" })),
    }) },
    ["/v1/inputs/{requestId}"] = { post = op("Answer a pending question", "answerInput",
      { param("requestId", "the request id (req_...)") }, {
        ["200"] = ok("answered", object({ requestId = STRING, outcome = { const = "answered" } },
          { "requestId", "outcome" })),
        ["400"] = err("not an answer this question takes (a sign-in is answered by signing in)",
          { "bad_json", "bad_request", "invalid_option", "freeform_not_allowed", "approval_unbound" }),
        ["404"] = not_found("request"),
        ["409"] = err("already answered or withdrawn, or an approval of another call",
          { "already_resolved", "approval_mismatch" }),
      }, body(ref("Answer"), true), true) },
    ["/v1/auth/callback"] = { get = {
      summary = "Where a provider sends the person back after a sign-in", operationId = "authCallback",
      description = "No API token and any Host, like a webhook: the 32-byte state is the secret.",
      parameters = array {
        { name = "state", ["in"] = "query", required = false, schema = STRING },
        { name = "code", ["in"] = "query", required = false, schema = STRING },
        { name = "error", ["in"] = "query", required = false, schema = STRING },
      },
      responses = {
        ["200"] = { description = "a page: signed in, or declined", content = { ["text/html"] = { schema = STRING } } },
        ["404"] = { description = "a page: the state waits for nothing (used, withdrawn, expired)",
          content = { ["text/html"] = { schema = STRING } } },
        ["503"] = { description = "a page: the sign-in could not be recorded",
          content = { ["text/html"] = { schema = STRING } } },
      },
    } },
    ["/v1/sessions"] = { post = op("Start a session with the agent", "createSession", nil, {
      ["201"] = ok("the session", object({ sessionId = STRING }, { "sessionId" })),
      ["400"] = err("a body that is not {} or {message}", { "bad_json", "bad_request" }),
      ["404"] = err("the agent has no agent.lua", { "not_found" }),
    }, body(object({ message = { type = "string", minLength = 1 }, principal = STRING })), true) },
    ["/v1/sessions/{id}"] = {
      get = op("A session", "getSession", { SESSION_ID }, {
        ["200"] = ok("the session and its transcript", ref("Session")),
        ["404"] = not_found("session"),
      }),
      post = op("Send a session a message, or answer its questions", "sendSession", { SESSION_ID }, {
        ["202"] = ok("accepted", object({ sessionId = STRING, accepted = { const = true } },
          { "sessionId", "accepted" })),
        ["400"] = err("not exactly one of message and inputResponses, or an answer the question does not take",
          { "bad_json", "bad_request", "invalid_option", "freeform_not_allowed", "approval_unbound" }),
        ["404"] = not_found("session, or a request of another session"),
        ["409"] = err("already answered or withdrawn, an approval of another call, or a settled session",
          { "already_resolved", "approval_mismatch", "already_settled" }),
      }, body(ref("SessionSend"), true), true),
    },
    ["/v1/sessions/{id}/tasks"] = { get = op("A session's tasks", "listSessionTasks", { SESSION_ID }, {
      ["200"] = ok("oldest first", ref("Tasks")),
      ["404"] = not_found("session"),
    }) },
    ["/v1/sessions/{id}/stream"] = { get = op("A session's events (SSE)", "streamSession", (function()
      local p = stream_params("id")
      p[#p + 1] = { name = "format", ["in"] = "query", required = false, schema = { enum = array { "text" } } }
      return p
    end)(), {
      ["200"] = SSE,
      ["400"] = err("Last-Event-ID is not a number", { "bad_request" }),
      ["404"] = not_found("session"),
      ["429"] = err("the session has MOOR_MAX_STREAMS_PER_RUN streams open", { "too_many_streams" }),
    }) },
    ["/v1/sessions/{id}/cancel"] = { post = op("Cancel a session", "cancelSession", { SESSION_ID }, {
      ["202"] = ok("its turn, tool runs and tasks are cancelled",
        object({ sessionId = STRING, status = { const = "cancelling" } }, { "sessionId", "status" })),
      ["404"] = not_found("session"),
      ["409"] = err("the session has already settled", { "already_settled" }),
    }, body(ANY), true) },
    ["/v1/hooks/{token}"] = { post = op("Deliver a JSON payload to a hook", "deliverHook",
      { param("token", "the hook's token (moor.createHook)") }, {
        ["202"] = ok("recorded", object({ ok = { const = true } }, { "ok" })),
        ["400"] = err("the body is not JSON", { "bad_json" }),
        ["404"] = err("no open hook has this token (one answer for every other case)", { "not_found" }),
        ["429"] = err("the token's queue is full", { "too_many_deliveries" }),
      }, body(ANY), true) },
  }
  -- A webhook takes any method, Host, Origin and content type.
  local webhook = {}
  for _, m in ipairs { "get", "post", "put", "patch", "delete" } do
    webhook[m] = {
      summary = "A webhook delivery (moor.createWebhook)", operationId = m .. "Webhook",
      description = "Method, headers, body and query are recorded (credential headers as \"[redacted]\").",
      parameters = array { param("token", "the webhook's token, from webhook.url") },
      requestBody = m ~= "get" and m ~= "delete" and { required = false, content = { ["*/*"] = { schema = ANY } } }
        or nil,
      responses = {
        ["202"] = ok("recorded", object({ ok = { const = true } }, { "ok" })),
        ["default"] = { description = "the webhook's respondWith (status 200-999, its headers and body)" },
        ["404"] = err("no open webhook has this token", { "not_found" }),
        ["429"] = err("the token's queue is full", { "too_many_deliveries" }),
      },
    }
  end
  paths["/.well-known/workflow/v1/webhook/{token}"] = webhook

  local schemas = {
    Error = object({ error = object({ code = STRING, message = STRING }, { "code", "message" }) }, { "error" }),
    CallCreated = object({ runId = STRING, callId = STRING }, { "runId", "callId" }),
    RunRow = object({ id = STRING, tool = STRING, status = ref("RunStatus"), started = TIME, updated = TIME },
      { "id", "tool", "status", "started", "updated" }),
    RunStatus = { enum = array { "running", "completed", "failed", "cancelled" } },
    Run = object({
      id = STRING, tool = STRING, status = ref("RunStatus"), callId = STRING, result = ANY, error = ANY,
      started = TIME, updated = TIME, cancelRequested = BOOLEAN,
    }, { "id", "tool", "status", "callId", "started", "updated", "cancelRequested" }),
    StreamEvent = object({
      runId = STRING, seq = INTEGER, kind = { type = "string", description = "run.started, step.result, "
        .. "input.requested, hook.created, turn.started, message.completed, run.completed, ..." },
      name = { type = { "string", "null" } }, op = { type = { "integer", "null" } },
      time = { type = "integer", description = "ms since the epoch" }, payload = ANY,
    }, { "runId", "seq", "kind", "name", "op", "time", "payload" }),
    Input = object({
      requestId = STRING, runId = STRING, sessionId = STRING, created = INTEGER,
      request = object({
        kind = { type = "string", description = "absent for a question; \"authorization\" for a sign-in" },
        prompt = STRING, options = list(object({ id = STRING, label = STRING, description = STRING },
          { "id", "label" })),
        allowFreeform = BOOLEAN, display = STRING,
        approval = object({ callId = STRING, inputHash = STRING, toolName = STRING }),
        name = STRING, description = STRING,
        authorization = object({ url = STRING, expiresAt = ANY, instructions = ANY }),
      }),
    }, { "requestId", "runId", "request", "created" }),
    Answer = object({ optionId = STRING, text = STRING, callId = STRING, inputHash = STRING }),
    SessionSend = object({
      message = STRING, turnPolicy = { enum = array { "steer", "queue" } },
      principal = { type = "string", minLength = 1, maxLength = 128 },
      inputResponses = list(object({ requestId = STRING, optionId = STRING, text = STRING, callId = STRING,
        inputHash = STRING }, { "requestId" })),
    }),
    Session = object({
      id = STRING, state = STRING, status = ref("RunStatus"),
      transcript = list(object({ role = STRING, text = STRING, turnId = STRING }, { "role" })),
    }, { "id", "state", "status", "transcript" }),
    Tasks = object({
      sessionId = STRING,
      tasks = list(object({
        taskId = STRING, name = STRING, kind = STRING, runId = STRING,
        status = { enum = array { "working", "idle", "completed", "failed", "cancelled" } },
        calls = list(object({ callId = STRING, turnId = STRING, status = STRING })),
      }, { "taskId", "name", "status" })),
    }, { "sessionId", "tasks" }),
  }

  return {
    openapi = "3.1.0",
    info = {
      title = "moor HTTP API", version = "1",
      description = "Served by `moor dev`. JSON in and out; errors are {\"error\": {\"code\", \"message\"}}. "
        .. "Every /v1 route refuses a foreign Host (421) or Origin (403), a POST not declared JSON (415), "
        .. "and, with MOOR_API_TOKEN set, a request without `Authorization: Bearer` (401). Any route may also "
        .. "answer 405 method_not_allowed (a wrong method, with Allow), 400 for malformed HTTP, 413 for a body "
        .. "over the limit, 408 for a request too slow, 431 for headers over 64 KiB, 505 for an HTTP version "
        .. "other than 1.0 and 1.1, and 503 too_many_connections at the connection caps.",
    },
    security = array { {}, { bearer = array {} } },
    servers = array { { url = "http://127.0.0.1:7373", description = "moor dev's default address" } },
    components = {
      schemas = schemas,
      securitySchemes = { bearer = { type = "http", scheme = "bearer",
        description = "$MOOR_API_TOKEN, when set" } },
    },
    paths = paths,
  }
end

local text

--- The document as JSON text (built once).
function M.json()
  if not text then text = json.encode(build()) end
  return text
end

return M
