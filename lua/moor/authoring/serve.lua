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
-- receive() within the cancel grace (30 s).
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

-- receive() in a run no session feeds, after its one call was answered:
-- the run ends with that answer.
local NO_MORE_CALLS = setmetatable({}, { __tostring = function() return "no more calls" end })

--- The run body of a serve tool whose author's function is serve_fn.
function M.body(serve_fn)
  return function(input, ctx, task)
    local run = engine.current()
    local inbox = run and run.session and run.session.inbox
    local session = ctx.session
    ctx.task = task
    local hook = world.createHook { token = M.calls_token(ctx.runId) }
    local first = { input = input, callId = ctx.callId, turnId = session.turnId }
    local queue = {}        -- calls that arrived and receive() has not handed out
    local waiting = {}      -- call ids handed out with no result yet
    local stretch = signals.new() -- this stretch of work's abortSignal; false when idle
    local asks = signals.new()    -- withdraws the questions of the calls a reply settles
    local pending = false   -- the receive() waiting now: { f }
    local receives, in_receive = 0, false
    ctx.askSignal = asks

    local function hand_out(c)
      waiting[#waiting + 1] = c.callId
      -- ctx follows the call being served (its callId, its turn).
      ctx.callId = c.callId
      session.turnId = c.turnId
      return { input = c.input, callId = c.callId, abortSignal = stretch }
    end

    -- The session's end (a cancel of this run) aborts the stretch too.
    ctx.abortSignal:addEventListener("abort", function(reason)
      if stretch then engine.abort(stretch, reason) end
    end)

    flow.async(function() -- reads the calls hook for the task's whole life
      while true do
        local d = hook:await()
        if type(d) == "table" and type(d.call) == "table" then
          if not stretch then stretch = signals.new() end -- an idle task works again
          if pending then
            local p = pending
            pending = false
            engine.abort(p.f, hand_out(d.call)) -- (a signal is a future: its reason is the call)
          else
            queue[#queue + 1] = d.call
          end
        elseif type(d) == "table" and d.cancel and stretch then
          -- The session settled the waiting calls as cancelled.
          local st = stretch
          stretch, waiting, queue = false, {}, {}
          engine.abort(asks, "cancelled")
          asks = signals.new()
          ctx.askSignal = asks
          engine.abort(st, "cancelled")
          if not in_receive then
            local mark = receives
            flow.async(function()
              flow.sleep(conf.CANCEL_GRACE)
              if receives == mark and not in_receive then end_step(ctx.runId) end
            end)
          end
        end
      end
    end)

    local last_reply = nil -- (a run with no session: its first reply is its result)

    --- receive() -> { input, callId, abortSignal }
    local function receive()
      flow.need_body("receive()")
      if first then
        local c = first
        first = nil
        return hand_out(c)
      end
      -- Called on its own (moor call, POST /v1/tools), no second call can come.
      if not inbox and #waiting == 0 then error(NO_MORE_CALLS, 0) end
      receives = receives + 1
      if #queue > 0 then return hand_out(table.remove(queue, 1)) end
      if not pending then pending = { f = signals.new() } end
      local p = pending
      in_receive = true
      local c = flow.await(p.f)
      in_receive = false
      return c
    end

    --- ctx.reply(output): settle every call received so far with output.
    -- Returns false (dropped) when no call is waiting.
    ctx.reply = function(output)
      flow.need_body("ctx.reply")
      if #waiting == 0 then return false end
      local ids = waiting
      waiting = {}
      last_reply = output
      if inbox then
        reply_step(inbox, { task = { kind = "reply", taskId = task and task.taskId, runId = ctx.runId,
          callIds = json.array(ids), output = output == nil and json.null or output } })
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
    if v == NO_MORE_CALLS then return last_reply end
    error(v, 0)
  end
end

return M
