---@meta moor
-- luacheck: no unused, no max line length (definitions only: parameters name what a call takes)
-- LuaLS annotations for moor's authoring API (`require "moor"`): completion
-- and type hints in an agent's tool files. Definitions only: this file is
-- never run (the code is lua/moor/init.lua and lua/moor/authoring/). A
-- project's .luarc.json lists this directory in "workspace.library" (`moor
-- init` writes one); tests/lua/annotations_spec.lua checks that every public
-- name of the real modules is annotated here.

---@alias moor.Duration string|integer a duration: "4h", "20m", "30s", "250ms", "1h30m", or milliseconds

---@alias moor.JSON nil|boolean|number|string|table a value that encodes as JSON

---@class moor.Schema: table a JSON Schema table (moor.schema's builders make them; plain tables work too)
---@field type? string
---@field description? string
---@field properties? table<string, moor.Schema>
---@field required? string[]
---@field additionalProperties? boolean|moor.Schema
---@field items? moor.Schema
---@field enum? any[]

---@class moor.ToolDefinition
---@field description string written for the model
---@field inputSchema moor.Schema an object schema (moor.schema.object{} for no input)
---@field outputSchema? moor.Schema the result is checked against it
---@field toModelOutput? fun(output: any): moor.ToolOutput what the model reads of the result
---@field approval? moor.Approval|fun(call: moor.ApprovalCall): boolean ask a person before a session's model runs it
---@field readOnlyHint? boolean MCP annotation (tools/list): the tool changes nothing
---@field destructiveHint? boolean MCP annotation: the tool may destroy or overwrite
---@field idempotentHint? boolean MCP annotation: calling it again with the same input does nothing more
---@field openWorldHint? boolean MCP annotation: the tool reaches the world outside (the web, other services)

---@class moor.PlainToolDefinition: moor.ToolDefinition
---@field execute fun(input: table, ctx: moor.PlainCtx, task?: moor.Task): any runs once per call, as one step
---@field execution? "background" run each call as a task (execute gets its task third)

---@class moor.WorkflowToolDefinition: moor.ToolDefinition
---@field execute? fun(input: table, ctx: moor.WorkflowCtx): any a durable body, replayed after a restart
---@field task? fun(input: table, ctx: moor.WorkflowCtx, task: moor.Task): any each call runs as a task
---@field serve? fun(receive: fun(): moor.ServedCall, ctx: moor.ServeCtx): any one task serves many calls

---@class moor.Tool: table a loaded tool definition (what agent/tools/<name>.lua returns)
---@field description string
---@field inputSchema moor.Schema
---@field name? string its name, once loaded
---@field shape { lifetime: "step"|"task", suspend: "none"|"workflow" }

---@class moor.AgentDefinition
---@field model string|table|function "provider/model" ("openai/gpt-5.5", "anthropic/claude-sonnet-5") or moor.testing.script(...)
---@field instructions string the system prompt
---@field description? string what the agent is for (what a parent's model reads)
---@field maxSteps? integer model steps per turn (default 20)
---@field modelTimeout? moor.Duration per model request (default 120 s)
---@field tool? boolean a subagent: false keeps it from the root model's tools

---@class moor.Agent: moor.AgentDefinition
---@field kind "agent"

---@class moor.Session
---@field id? string the session whose model made the call
---@field turnId? string

---@class moor.AbortSignal
---@field aborted boolean
---@field reason any why it aborted ("cancelled", "steered", or an AbortController's reason)
local AbortSignal = {}
--- In a workflow body: park until the signal aborts (at once if it has); returns its reason.
---@return any reason
function AbortSignal:wait() end
--- Raise `Aborted` when the signal has aborted.
function AbortSignal:throwIfAborted() end
--- Run fn once when the signal aborts (outside the body's coroutine: it cannot wait).
---@param kind "abort"
---@param fn fun(event: { type: "abort", target: moor.AbortSignal })
---@param opts? { once?: boolean }
function AbortSignal:addEventListener(kind, fn, opts) end
---@param kind "abort"
---@param fn function
function AbortSignal:removeEventListener(kind, fn) end

---@class moor.AbortController
---@field signal moor.AbortSignal
---@field abort fun(reason?: any) abort the signal (ac.abort(r) and ac:abort(r) both work)

---@class moor.AskOption
---@field id string
---@field label string
---@field description? string
---@field style? "primary"|"danger"|"default"

---@class moor.AskRequest
---@field prompt string
---@field display? "confirmation"|"select"|"text"
---@field options? moor.AskOption[]
---@field allowFreeform? boolean
---@field requiresPerson? boolean answered only through the input channels, never by a message's text

---@class moor.AskResult
---@field status "answered"|"cancelled"|"unavailable"
---@field optionId? string
---@field text? string

---@class moor.AgentReply
---@field status "waiting"|"failed"
---@field message? string the agent's answer
---@field data? any the answer as the outputSchema asked
---@field error? { code: string, message: string }

---@class moor.AgentResponse
local AgentResponse = {}
--- Wait for the turn the message started or joined; its outcome.
---@return moor.AgentReply
function AgentResponse:result() end

---@class moor.AgentHandle a session with another agent (ctx.agent(name))
local AgentHandle = {}
--- Send a message; r:result() waits for the turn's outcome.
---@param message string
---@param opts? { outputSchema?: moor.Schema, signal?: moor.AbortSignal }
---@return moor.AgentResponse
function AgentHandle:send(message, opts) end

---@class moor.AgentInfo
---@field name string
---@field description? string
---@field hidden boolean

---@class moor.Token
---@field token string the access token (never return it from a step: results are recorded)

---@class moor.PlainCtx the ctx of a plain tool (moor.defineTool), and of a step
---@field callId string
---@field toolName string
---@field session moor.Session `{}` outside a session
---@field abortSignal moor.AbortSignal aborts with the session's cancel
local PlainCtx = {}
--- The person's token for a connection (inside a step or a plain tool); parks for a sign-in when there is none.
---@param connection moor.ConnectionRef|string
---@return moor.Token
function PlainCtx.getToken(connection) end
--- The provider refused the token (a 401): ask the person to sign in again.
---@param connection moor.ConnectionRef|string
function PlainCtx.requireAuth(connection) end
--- Not supported yet (raises NotSupported).
function PlainCtx.getSandbox() end
--- Not supported yet (raises NotSupported).
function PlainCtx.getSkill() end

---@class moor.WorkflowCtx: moor.PlainCtx the ctx of a workflow body (moor.defineWorkflowTool)
---@field runId string
---@field agents table<string, moor.AgentInfo> the agents ctx.agent can open, hidden ones included
local WorkflowCtx = {}
--- Ask a person; parks the run durably until answered or withdrawn.
---@param request moor.AskRequest
---@param opts? { signal?: moor.AbortSignal } aborting the signal withdraws the question
---@return moor.AskResult
function WorkflowCtx.ask(request, opts) end
--- A session with another agent (a subagent, or "agent", a copy of the root).
---@param name string
---@return moor.AgentHandle
function WorkflowCtx.agent(name) end

---@class moor.ServeCtx: moor.WorkflowCtx a serve body's ctx
---@field task moor.Task
local ServeCtx = {}
--- Settle every call received so far with output.
---@param output any
function ServeCtx.reply(output) end

---@class moor.ServedCall
---@field input table
---@field callId string
---@field abortSignal moor.AbortSignal

---@class moor.TaskMessage

---@class moor.Task a task body's task argument
---@field taskId string
local Task = {}
--- `coroutine.yield(task.postMessage(text))` wakes the session with text, attributed to the task.
---@param text string
---@return moor.TaskMessage
function Task.postMessage(text) end

---@class moor.StepPolicy
---@field retries? integer attempts after the first (default 3)
---@field backoff? moor.Duration the first wait (default "1s")
---@field factor? number each wait multiplies by (default 2)
---@field maxBackoff? moor.Duration the longest wait (default "1m")

---@class moor.StepInfo
---@field runId string
---@field seq integer
---@field attempt integer
---@field name string
---@field idempotencyKey string run id + op seq, stable across retries and restarts

---@class moor.Future a branch, a timer or a signal, for moor.all/race/await

---@class moor.Request a delivery to a webhook
---@field method string
---@field headers table<string, string> (authorization, cookie, ... read "[redacted]")
---@field body string
---@field query table<string, string>
local Request = {}
--- The body decoded as JSON (raises a clear error when it is not JSON).
---@return any
function Request:json() end

---@class moor.Hook
---@field token string
local Hook = {}
--- Park the run until the next delivery; returns its payload (a webhook's: a moor.Request).
---@return any
function Hook:await() end
--- The next delivery already waiting, or nil, without parking (recorded).
---@return any|nil
function Hook:poll() end
--- Every delivery for the run's lifetime, in order: `for request in hook:requests() do ... end`.
---@return fun(): any
function Hook:requests() end

---@class moor.Webhook: moor.Hook
---@field url string BASE/.well-known/workflow/v1/webhook/TOKEN

---@class moor.FetchOptions
---@field url? string
---@field method? string
---@field headers? table<string, string>
---@field body? string
---@field timeout? integer milliseconds
---@field redirects? integer redirects followed (default 5; 0: none)

---@class moor.FetchResponse
---@field status integer
---@field headers table<string, string>
---@field body string

---@class moor.Approval
---@field kind "approval"
---@field mode "always"|"once"|"never"

---@class moor.ApprovalCall
---@field toolName string
---@field toolInput table
---@field callId string
---@field sessionId string

---@class moor.ToolOutput
---@field type "text"|"json"|"content"
---@field value any

---@class moor.ToolOutputPart
---@field type "text"|"file"

---@class moor.ErrorValue: table an error that reaches authors
---@field code string "FatalError", "NonDeterminism", "Fenced", "Cancelled", ...
---@field message string

---@class moor.ErrorClass
---@overload fun(message: string|table): moor.ErrorValue

---@class moor.ConnectionDefinition
---@field description string
---@field authorizationUrl string
---@field tokenUrl string
---@field clientId string
---@field clientSecretEnv? string the environment variable holding the client secret
---@field scopes? string[]
---@field userScoped? boolean

---@class moor.ConnectionRef

---@class moor.HarnessTool

---@class moor.HarnessToolSpec
---@field description string
---@field input? moor.Schema an object schema; without it the handler gets {}
---@field handler fun(input: table, call: { id: string, agent: string, signal: moor.AbortSignal }): any
---@field timeout? moor.Duration|false a handler's budget (30 s unless set; false: the turn's deadline)

---@class moor.HarnessSpec
---@field key string 1-64 of letters, digits . _ -
---@field runtime "claude"|"codex"|{ command: string[] }
---@field tools? table<string, moor.HarnessTool>
---@field instructions? string
---@field cwd? string

---@class moor.HarnessOutcome
---@field answered boolean
---@field value? any
---@field reason? "unanswered"|"timed-out"|"failed"|"cancelled"|"interrupted"

---@class moor.HarnessAgent
local HarnessAgent = {}
---@param turn { prompt: string, schema?: moor.Schema, timeout?: moor.Duration }
---@return { outcome: moor.HarnessOutcome }
function HarnessAgent:run(turn) end
---@param spec { key: string, tools?: table<string, moor.HarnessTool> }
---@return moor.HarnessAgent
function HarnessAgent:fork(spec) end
function HarnessAgent:close() end

---@class moor.Sandbox a sandbox for a model-written Lua program (host/sandbox.c)

---@class moor.json
---@field null lightuserdata JSON null (the same value as cjson.null)
local json = {}
--- Lossless JSON text of v (sorted keys). maxbytes bounds the text.
---@param v any
---@param maxbytes? integer
---@param root? string the name of v in error messages
---@return string|nil text
---@return string? message
function json.encode(v, maxbytes, root) end
--- The value of JSON text (integers stay integers; arrays are marked).
---@param text string
---@return any value
---@return string? message
function json.decode(text) end
--- Mark t as a JSON array (so `{}` encodes as `[]`).
---@generic T: table
---@param t T
---@return T
function json.array(t) end
---@param t any
---@return boolean
function json.isarray(t) end

---@class moor
---@field schema moor.schema JSON Schema builders
---@field json moor.json lossless JSON
---@field testing moor.testing drive tools from specs (`moor test`)
---@field FatalError moor.ErrorClass `error(moor.FatalError("no such order"))`: fails a step without retry
---@field RetryableError moor.ErrorClass `error(moor.RetryableError{ message = "busy", retryAfter = "30s" })`
---@field Cancelled moor.ErrorClass raised at the op a cancelled run was parked on
---@field NotSupported moor.ErrorClass what moor does not have yet (never retried)
---@field Error table the error constructors and helpers
---@field version_string string moor's version
---@field approval { always: fun(): moor.Approval, once: fun(): moor.Approval, never: fun(): moor.Approval }
---@field toolOutput { text: fun(v: any): moor.ToolOutput, json: fun(v: any): moor.ToolOutput, content: fun(parts: moor.ToolOutputPart[]): moor.ToolOutput }
---@field toolOutputPart { text: fun(text: string): moor.ToolOutputPart, file: fun(base64: string, opts: { mediaType: string }): moor.ToolOutputPart }
---@field harness { open: fun(spec: moor.HarnessSpec): moor.HarnessAgent, tool: fun(spec: moor.HarnessToolSpec): moor.HarnessTool }
local moor = {}

--- A plain tool: execute(input, ctx) runs once per call, as one step of its run
--- (not retried); `coroutine.yield(v)` inside it publishes a progress snapshot.
---@param def moor.PlainToolDefinition
---@return moor.Tool
function moor.defineTool(def) end

--- A workflow tool: a durable body, replayed after a restart, so its side
--- effects go in moor.step functions. Exactly one of execute, task, serve.
---@param def moor.WorkflowToolDefinition
---@return moor.Tool
function moor.defineWorkflowTool(def) end

--- The agent of agent/agent.lua (or a subagent's): what moor chat and POST /v1/sessions talk to.
---@param def moor.AgentDefinition
---@return moor.Agent
function moor.defineAgent(def) end

--- `return moor.disableTool()` as agent/tools/<name>.lua hides the built-in tool or subagent of that name.
---@return table
function moor.disableTool() end

---@param v any
---@return boolean
function moor.isTool(v) end

---@param v any
---@return boolean
function moor.isDisabledTool(v) end

--- Not supported yet (raises NotSupported).
function moor.workflow() end

--- Not supported yet (raises NotSupported).
function moor.defineDynamic() end

--- A durable step: called in a workflow body, recorded once and replayed;
--- called anywhere else, a plain call. Retried 3 times with backoff by default.
---@generic F: function
---@param name string
---@param fn F
---@param policy? moor.StepPolicy
---@return F
function moor.step(name, fn, policy) end

--- Inside a running step: its run, op number, attempt and idempotency key.
---@return moor.StepInfo|nil
function moor.stepInfo() end

--- A durable sleep: parks the run, holding no compute; survives restarts.
---@param d moor.Duration
function moor.sleep(d) end

--- In a body: let the host's loop turn once (not recorded).
function moor.pause() end

--- Run fn as a branch of the run.
---@param fn function
---@param ... any
---@return moor.Future
function moor.async(fn, ...) end

--- A future that settles with nil after d (for moor.race).
---@param d moor.Duration
---@return moor.Future
function moor.timer(d) end

--- Wait for every future: their values, as an array (the first error raises).
---@param futures (moor.Future|moor.AbortSignal)[]
---@return any[]
function moor.all(futures) end

--- Wait for the first future to settle: its value and its index.
---@param futures (moor.Future|moor.AbortSignal)[]
---@return any value
---@return integer index
function moor.race(futures) end

--- Wait for one future.
---@param f moor.Future|moor.AbortSignal
---@return any
function moor.await(f) end

--- Change a live workflow deliberately: new runs record max; runs that
--- reached this point before the marker existed get min.
---@param id string
---@param min integer
---@param max integer
---@return integer
function moor.version(id, min, max) end

---@return moor.AbortController
function moor.AbortController() end

--- pairs in key order (a body that makes ops while iterating must use it).
---@generic K, V
---@param t table<K, V>
---@return fun(): K, V
function moor.sortedPairs(t) end

--- A hook: `hook:await()` parks until `moor.resumeHook(token, payload)` or POST /v1/hooks/{token}.
---@param opts? { token?: string }
---@return moor.Hook
function moor.createHook(opts) end

--- A webhook: a URL the world can POST to; `webhook:await()` returns the request.
---@param opts? { respondWith?: { status?: integer, headers?: table<string, string|number>, body?: string } }
---@return moor.Webhook
function moor.createWebhook(opts) end

--- Deliver to a hook, from a step or plain code.
---@param token string
---@param payload any
function moor.resumeHook(token, payload) end

--- HTTP through the engine's client (non-blocking; in a step or a plain tool, never a body).
---@param url string|moor.FetchOptions
---@param opts? moor.FetchOptions
---@return moor.FetchResponse|nil response
---@return string? message
---@return boolean? timedOut
function moor.fetch(url, opts) end

--- A sandbox for a model-written Lua program.
---@param opts? { memory?: integer, instructions?: integer, seconds?: number, source?: integer, output?: integer, result?: integer, message?: integer, coroutines?: integer, seed?: integer }
---@return moor.Sandbox
function moor.sandbox(opts) end

--- The hex SHA-256 of s.
---@param s string
---@return string
function moor.sha256(s) end

--- agent/connections/<name>.lua: an OAuth connection ctx.getToken signs in to.
---@param def moor.ConnectionDefinition
---@return table
function moor.defineConnection(def) end

--- The connection of that name (agent/connections/<name>.lua), for ctx.getToken.
---@param name string
---@return moor.ConnectionRef
function moor.connection(name) end

--- An embedder (moor as a Lua module): start a run of a registered tool.
---@param name string
---@param input? table
---@param opts? table
---@return string|nil runId
---@return string? message
function moor.call(name, input, opts) end

--- An embedder: make a tool callable by name.
---@param name string
---@param tool moor.Tool
function moor.register(name, tool) end

--- An embedder: load an agent project (tools/, agent.lua, subagents/).
---@param dir string
function moor.load(dir) end

--- An embedder: load every unfinished run from the database.
function moor.resume() end

--- An embedder: run what is ready; ms until the next timer, or nil when nothing waits.
--- With budgetMs, return once about that much engine work is spent (0: work was left).
---@param budgetMs? number
---@return integer|nil
function moor.tick(budgetMs) end

--- An embedder: the questions waiting for a person.
---@return { requestId: string, runId: string, request: table, created: integer }[]
function moor.inputs() end

--- An embedder: answer a question (after moor.tick returns).
---@param requestId string
---@param answer { optionId?: string, text?: string }
---@return true|nil ok
---@return string? reason
function moor.answer(requestId, answer) end

--- An embedder: drive every run until none is runnable or due (blocking).
function moor.run() end

--- An embedder: a run's status and its result or error as JSON text.
---@param runId string
---@return string status
---@return string json
function moor.status(runId) end

return moor
