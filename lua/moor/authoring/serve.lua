--- The body of a `serve(receive, ctx)` tool (seed 000 "Resumable tasks:
-- serve"; part of the authoring API): one run per task, fed its calls.
-- receive() gives the call that started the task at once (no op), then each
-- call the session sends by taskId, in arrival order, through the task's
-- calls hook ("task-<runId>", made with the run); calls that arrive while the
-- body is busy are kept, and a pending receive() is shared. ctx.reply(output)
-- settles every call received so far (posted to the session's inbox in a
-- step) and withdraws their questions without aborting their signal. One
-- abort signal per stretch of work: a cancel (the session's, on the hook)
-- aborts it, leaves the task idle, and ends a body that does not come back to
-- receive() within the cancel grace (30 s). The session's end (a cancel of
-- the run) aborts the stretch and rejects a pending receive(). Called on its
-- own (moor call: no session, so no later calls), the first reply is the
-- run's result.
local engine = require "moor.engine"
local store = require "moor.store"
local core = require "moor.core"
local json = require "moor.json"
local errors = require "moor.errors"
local signals = require "moor.signal"
local conf = require "moor.conf"
local flow = require "moor.authoring.flow"
local world = require "moor.authoring.world"

local M = {}

--- The hook a serve task's later calls arrive on.
function M.calls_token(run_id) return "task-" .. run_id end

--- Made with the run (engine.call's setup), so a call sent at once finds it.
function M.calls_setup(run_id) store.ensure_hook(M.calls_token(run_id), run_id, core.now()) end

-- A reply reaches the session in the same commit as the step's result.
local reply_step = flow.step("serve.reply", function(inbox, payload) return engine.post(inbox, payload) end,
  { retries = 0 })

-- The 30 s rule: the body did not come back to receive() after a cancel.
local end_step = flow.step("serve.end", function(run_id)
  engine.cancel(run_id)
  return true
end, { retries = 0 })

-- Raised by receive() in a serve run called on its own, once it replied.
local FINISHED = setmetatable({}, { __tostring = function() return "the serve run replied and has no more calls" end })

--- The run body of a serve tool whose author's function is serve_fn.
function M.body(serve_fn)
  return function(input, ctx, task)
    local run = engine.current()
    local inbox = run and run.session and run.session.inbox
    local session = ctx.session
    ctx.task = task
    local first = { input = input, callId = ctx.callId, turnId = session.turnId, principal = session.principal }
    local queue = {}        -- calls that arrived and receive() has not handed out
    local waiting = {}      -- call ids handed out with no result yet
    local stretch = signals.new() -- this stretch of work's abortSignal; false when idle
    local asks = signals.new()    -- withdraws the questions of the calls a reply settles
    local pending = false   -- the receive() waiting now: { f }, settled with { call } or { error }
    local ended = nil       -- what ended the calls hook (the run's cancel): later receive()s raise it
    local receives, in_receive = 0, false
    local replied = false   -- called on its own (no session): { output } of the first reply
    ctx.askSignal = asks

    local function hand_out(c)
      waiting[#waiting + 1] = c.callId
      -- ctx follows the call being served (its callId, its turn, its caller:
      -- getToken in a step resolves as who made this call).
      ctx.callId = c.callId
      session.turnId = c.turnId
      session.principal = c.principal
      return { input = c.input, callId = c.callId, abortSignal = stretch }
    end

    -- The session's end (a cancel of this run) aborts the stretch too.
    local run_signal = ctx.abortSignal
    run_signal:addEventListener("abort", function()
      if stretch then engine.abort(stretch, run_signal.reason) end
    end)

    local function on_call(c)
      if not stretch then stretch = signals.new() end -- an idle task works again
      if pending then
        local p = pending
        pending = false
        engine.abort(p.f, { call = hand_out(c) }) -- (a signal is a future: its reason is the call)
      else
        queue[#queue + 1] = c
      end
    end

    local function on_cancel()
      -- The session settled the waiting calls as cancelled.
      local st = stretch
      stretch, waiting, queue = false, {}, {}
      engine.abort(asks, "cancelled")
      asks = signals.new()
      ctx.askSignal = asks
      engine.abort(st, "cancelled")
      if not in_receive then
        -- The 30 s rule: a body that is not back in receive() within the
        -- grace ends (engine.cancel of this run, in a step).
        local mark = receives
        flow.async(function()
          flow.sleep(conf.CANCEL_GRACE)
          if receives == mark and not in_receive then end_step(ctx.runId) end
        end)
      end
    end

    -- Reads the calls hook for the task's whole life, as a branch: the body
    -- makes no op before its first receive() (the hook exists since the run
    -- was made: calls_setup). When the run is cancelled (the session's end)
    -- the await raises, and a pending receive() is rejected with it. A run
    -- with no session (moor call) has no later calls, so no hook.
    if inbox then flow.async(function()
      local hook = world.createHook { token = M.calls_token(ctx.runId) }
      while true do
        local ok, d = pcall(hook.await, hook)
        if not ok then
          ended = d
          local p = pending
          pending = false
          if p then engine.abort(p.f, { error = d }) end
          return
        end
        if type(d) == "table" and type(d.call) == "table" then
          on_call(d.call)
        elseif type(d) == "table" and d.cancel and stretch then
          on_cancel()
        end
      end
    end) end

    --- receive() -> { input, callId, abortSignal }
    local function receive()
      flow.need_wait("receive()")
      if first then
        local c = first
        first = nil
        return hand_out(c)
      end
      -- Called on its own, the task has no one to send it more calls: its
      -- first reply is the run's result, given back once the body is here.
      if not inbox and replied then error(FINISHED, 0) end
      -- The session ended (this run is cancelled): no more calls, even kept ones.
      if ended ~= nil then error(ended, 0) end
      if run.cancelling then error(errors.Cancelled("the run was cancelled"), 0) end
      receives = receives + 1
      if #queue > 0 then return hand_out(table.remove(queue, 1)) end
      if not pending then pending = { f = signals.new() } end
      local p = pending
      in_receive = true
      local v = flow.await(p.f)
      in_receive = false
      if v.error ~= nil then error(v.error, 0) end
      return v.call
    end

    --- ctx.reply(output): settle every call received so far with output.
    -- Returns false (dropped) when no call is waiting.
    ctx.reply = function(output)
      flow.need_body("ctx.reply")
      if #waiting == 0 then return false end
      local ids = waiting
      waiting = {}
      if inbox then
        reply_step(inbox, { task = { kind = "reply", taskId = task and task.taskId, runId = ctx.runId,
          callIds = json.array(ids), output = output == nil and json.null or output } })
      elseif not replied then
        replied = { output = output }
      end
      engine.abort(asks, "replied")
      asks = signals.new()
      ctx.askSignal = asks
      if #queue == 0 then stretch = false end -- the stretch is over: the next call gets a new signal
      return true
    end

    local ask = ctx.ask
    ctx.ask = function(request, opts)
      if #waiting == 0 then
        error(errors.new("NoCallWaiting", "ctx.ask in a serve body needs a call waiting for a result; "
          .. "ctx.reply settled them all, so ask while serving the next call (after receive())"), 2)
      end
      return ask(request, opts)
    end

    if inbox then return serve_fn(receive, ctx) end
    local ok, v = pcall(serve_fn, receive, ctx)
    if ok then return v end
    if v == FINISHED then return replied.output end
    error(v, 0)
  end
end

return M
