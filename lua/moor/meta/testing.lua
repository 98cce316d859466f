---@meta moor.testing
-- luacheck: no unused, no max line length (definitions only: parameters name what a call takes)
-- LuaLS annotations for moor.testing (lua/moor/testing.lua): drive tools
-- from busted specs inside the host (`moor test`). Definitions only, never run.

---@class moor.TestError
---@field code? string
---@field message string

---@class moor.TestEvent
---@field seq integer
---@field op? integer
---@field kind string "run.started", "step.result", "timer.scheduled", ...
---@field name? string
---@field payload any decoded

---@class moor.PendingInput
---@field requestId string
---@field runId string
---@field request moor.AskRequest

---@class moor.ScriptTurn what a scripted model sees on each call
---@field n integer the model calls so far, from 1
---@field messages { role: "user"|"assistant"|"tool", content?: string, toolCalls?: { id: string, name: string, input: table }[], toolCallId?: string, name?: string }[]
---@field tools table[] the tool definitions the model sees
---@field system string
---@field outputSchema? moor.Schema
---@field model string

---@alias moor.ScriptReply string|{ text?: string, toolCalls?: { name: string, input?: table, id?: string }[], usage?: table }|{ data: any }|{ error: { code: string, message: string, retryable?: boolean } }

---@class moor.ScriptedModel

---@class moor.Conversation
---@field sessionId string
---@field events moor.TestEvent[]
---@field results table[] the action.result payloads
---@field transcript table[]

---@class moor.HarnessTurn a scripted harness agent's turn (t.workflow)
---@field prompt string
---@field schema? moor.Schema
---@field key string
---@field n integer
---@field resume? string
---@field fork? string
---@field tool fun(name: string, input?: table): { kind: "result"|"refused"|"failed", output?: any, code?: string, error?: string, outcome?: string }
---@field send fun(name: string, input?: table): fun(): table
---@field session fun(id: string)

---@class moor.HarnessScript

---@class moor.WorkflowOutcome
---@field value any
---@field error? moor.TestError
---@field runId string
---@field status string

---@class moor.testing
---@field reply { timedOut: fun(): table, failed: fun(message?: string): table, silent: fun(): table, interrupted: fun(): table, cancelled: fun(): table }
local testing = {}

--- Start a run of tool (a definition or a tool name) with input and drive it to the end.
---@param tool moor.Tool|string
---@param input? table
---@param opts? table
---@return any result
---@return moor.TestError|nil err
---@return string runId
function testing.call(tool, input, opts) end

--- Start a run without driving it (opts.noInput: ctx.ask answers "unavailable").
---@param tool moor.Tool|string
---@param input? table
---@param opts? { noInput?: boolean }
---@return string|nil runId
---@return moor.TestError? err
function testing.start(tool, input, opts) end

--- Drive a run until it settles or parks (nothing due within maxWait ms, default 2000): its status.
---@param runId string
---@param maxWait? integer
---@return string status
function testing.drive(runId, maxWait) end

--- The run's outcome now (both nil while it runs).
---@param runId string
---@return any result
---@return moor.TestError|nil err
---@return string runId
function testing.outcome(runId) end

--- One scheduler round: run what is ready now.
---@return integer|nil dueMs
function testing.step() end

--- Run the engine on a virtual clock for the rest of this spec (the wall clock is back when it ends):
--- timers, step retries, event times and os.time/os.date in bodies read it; only testing.advance moves it.
---@param startMs? integer ms since the epoch (default: now)
---@return integer nowMs
function testing.useVirtualClock(startMs) end

--- Move the virtual clock forward, firing every timer due on the way at its own due time, in order.
---@param d string|integer a duration ("4h", "20m", "250ms") or ms
---@return integer nowMs
function testing.advance(d) end

--- Back to the wall clock within a spec.
function testing.useRealClock() end

--- The engine's now in ms since the epoch (the virtual clock's when it is on).
---@return integer nowMs
function testing.now() end

--- Forget the run's in-memory state, replay it from its log, drive it on.
---@param runId string
---@return any result
---@return moor.TestError|nil err
function testing.restart(runId) end

--- The run's event log, payloads decoded.
---@param runId string
---@return moor.TestEvent[]
function testing.events(runId) end

--- Pending questions of a run and of the runs it started.
---@param runId string
---@return moor.PendingInput[]
function testing.inputs(runId) end

--- Answer a question as the HTTP API would (true, or nil, status, code, message);
--- given a function, a scripted harness agent for testing.workflow.
---@param requestId string|fun(turn: moor.HarnessTurn): any
---@param answer? { optionId?: string, text?: string }
---@return true|nil|moor.HarnessScript
---@return integer? status
---@return string? code
---@return string? message
function testing.answer(requestId, answer) end

--- Complete a pending sign-in as if the person signed in.
---@param requestId string
---@param grant? { token?: string, refreshToken?: string, expiresIn?: number }
---@return true|nil
---@return moor.TestError?
function testing.authorize(requestId, grant) end

--- Decline a pending sign-in.
---@param requestId string
---@return true|nil
---@return moor.TestError?
function testing.decline(requestId) end

--- Cancel a run as the HTTP API would.
---@param runId string
---@return true|nil
function testing.cancel(runId) end

--- Deliver to a hook or webhook as the HTTP API would.
---@param token string
---@param payload any
---@return any
function testing.deliver(token, payload) end

--- Run a workflow tool with its harness agents replaced by scripts.
---@param tool moor.Tool|string
---@param input? table
---@param opts? { agents?: table<string, moor.HarnessScript|table>, timeout?: integer, call?: table }
---@return moor.WorkflowOutcome
function testing.workflow(tool, input, opts) end

--- A scripted model: the `model` of moor.defineAgent in specs, or until a key is set.
---@param script fun(turn: moor.ScriptTurn): moor.ScriptReply|moor.ScriptReply[]
---@return moor.ScriptedModel
function testing.script(script) end

--- Hold a conversation with an agent definition; drives each message until the session is idle.
---@param agent moor.Agent
---@param messages string|(string|table)[]
---@param opts? { sessionId?: string, maxWait?: integer }
---@return moor.Conversation
function testing.converse(agent, messages, opts) end

return testing
