--- A session's tasks (seed 000 "Run calls as tasks", "Resumable tasks";
-- seed 003 §2-§4, §7, §8): the other column of the tool model. A call to a
-- task-lifetime tool (`task`, `serve`, or a background plain tool) starts a
-- child run of the session with a task id, and its tool result is a fixed
-- receipt. What the task sends back reaches this table through the session's
-- inbox (engine.post), in order: messages it posts, a serve body's replies,
-- and the report of its run's end (engine/runs.lua). The table lives in the
-- session's body, so replay rebuilds it from the log like any local value.
-- At each step boundary of a turn the loop calls boundary(): the messages,
-- then one task.result message with every result not yet delivered, then the
-- [Tasks] note when its listing changed. The turn loop holds a turn while a
-- task of that turn works (hold_needed), and moor__task_wait waits here.
local engine = require "moor.engine"
local json = require "moor.json"
local signals = require "moor.signal"
local conf = require "moor.conf"
local flow = require "moor.authoring.flow"
local serve = require "moor.authoring.serve"
local text = require "moor.session.tasktext"

local M = {}

local Tasks = {}
Tasks.__index = Tasks

-- Sends to a task's run: recorded, in the same commit as the step's result.
local post_step = flow.step("task.send", function(token, payload) return engine.post(token, payload) end,
  { retries = 0 })
local cancel_step = flow.step("task.cancel", function(run_id)
  local ok = engine.cancel(run_id)
  return ok == true
end, { retries = 0 })

--- A session's table. project(tool, output) -> text (what the model reads
-- of a result: toModelOutput's projection) or nil, err.
function M.new(session_id, inbox, project)
  return setmetatable({
    session_id = session_id, inbox = inbox, project = project,
    byid = {}, order = {},  -- task id -> task; ids in start order
    nworking = 0,
    results = {},           -- results not yet delivered: { taskId, name, status, output?, error?, turns }
    messages = {},          -- postMessage texts not yet delivered: { taskId, name, message }
    note = false,           -- the last [Tasks] note the model read
    used = 0,               -- a clock for "most recently used"
    changed = signals.new(), -- aborted (and replaced) when a result or a message arrives
  }, Tasks)
end

local function kind_of(tool)
  if tool.entry == "serve" then return "serve" end
  return tool.shape.suspend == "none" and "background" or "task"
end

function Tasks:touch(t)
  self.used = self.used + 1
  t.used = self.used
end

function Tasks:set_status(t, status)
  if t.status == "working" then self.nworking = self.nworking - 1 end
  t.status = status
  if status == "working" then self.nworking = self.nworking + 1 end
  if status == "finished" then
    -- A finished task leaves the table, so a long session keeps only the
    -- live ones: its id is unknown from now on (UNKNOWN_TASK, as for a
    -- finished task) and what its run still sends is dropped (on_event).
    self.byid[t.id] = nil
    for i, id in ipairs(self.order) do
      if id == t.id then table.remove(self.order, i); break end
    end
  end
end

function Tasks:wake()
  local c = self.changed
  self.changed = signals.new()
  engine.abort(c, "changed")
end

local function too_many()
  return nil, "TOO_MANY_TASKS", text.too_many(conf.MAX_TASKS)
end

--- A model's call of task-lifetime tool `tool` (registered as `registered`)
-- with its input (a serve tool's taskId taken out, as task_id): without a
-- task_id it starts a task, with one it is sent to that task. Returns the
-- receipt and the task id, or nil, code, message. principal: who made the
-- call (the task's user-scoped tokens are theirs; a serve call's, per call).
function Tasks:call(call, tool, registered, turn_id, input, task_id, principal)
  if task_id ~= nil then return self:send(call, input, task_id, turn_id, principal) end
  if self.nworking >= conf.MAX_TASKS then return too_many() end
  local id
  repeat id = engine.task_id(call.name, math.random) until not self.byid[id] -- (math.random: the run's, replayed)
  local kind = kind_of(tool)
  -- The slot is taken before the start parks: the calls of one model step
  -- run as concurrent branches, and each checks the limit above.
  self.nworking = self.nworking + 1
  local ok, started = engine.op("child", registered, { tool = registered, input = input, callId = call.id,
    session = { id = self.session_id, turnId = turn_id, principal = principal, taskId = id, inbox = self.inbox },
    setup = kind == "serve" and serve.calls_setup or nil })
  self.nworking = self.nworking - 1
  if not ok then error(started, 0) end
  if started.error then return nil, started.error.code or "Error", started.error.message end
  local t = { id = id, name = call.name, registered = registered, kind = kind, runId = started.runId, status = "idle",
              calls = { { callId = call.id, turnId = turn_id } },
              seen = {} } -- delivery ids already taken (a step run again posts again)
  self.byid[id] = t
  self.order[#self.order + 1] = id
  self:set_status(t, "working")
  self:touch(t)
  engine.publish("task.started", { taskId = id, callId = call.id, turnId = turn_id, name = call.name, kind = kind,
    runId = started.runId })
  return text.receipt(id, kind == "serve" and call.name or nil), id
end

local function unknown(task_id, name)
  return nil, "UNKNOWN_TASK", text.unknown_task(tostring(task_id), name)
end

--- A call with taskId: to that unfinished serve task of the same tool.
function Tasks:send(call, input, task_id, turn_id, principal)
  local t = type(task_id) == "string" and self.byid[task_id]
  if not t or t.status == "finished" or t.name ~= call.name or t.kind ~= "serve" then
    return unknown(task_id, call.name)
  end
  -- An idle task takes a slot before the send parks, as a new task does in
  -- call (the calls of one model step run as concurrent branches); a second
  -- send to the same idle task in that step needs none (t.slot).
  local slot = false
  if t.status == "idle" and not t.slot then
    if self.nworking >= conf.MAX_TASKS then return too_many() end
    slot, t.slot = true, true
    self.nworking = self.nworking + 1
  end
  local posted = post_step(serve.calls_token(t.runId), { call = { input = input, callId = call.id, turnId = turn_id,
    principal = principal } })
  if slot then t.slot, self.nworking = nil, self.nworking - 1 end
  if not posted then
    return unknown(task_id, call.name) -- (its run ended; the report is on its way)
  end
  t.calls[#t.calls + 1] = { callId = call.id, turnId = turn_id }
  if t.status == "idle" then self:set_status(t, "working") end
  self:touch(t)
  engine.publish("task.started", { taskId = t.id, callId = call.id, turnId = turn_id, name = t.name, kind = t.kind,
    runId = t.runId })
  return text.sent(t.id), t.id
end

-- Settle the given waiting calls of t (all when ids is nil) with status and
-- output/error: each reports its own task.settled. Returns the turns they
-- were made in.
function Tasks:settle_calls(t, ids, status, output, err) -- luacheck: ignore self
  local keep, turns = {}, {}
  local wanted
  if ids then
    wanted = {}
    for _, id in ipairs(ids) do wanted[id] = true end
  end
  for _, c in ipairs(t.calls) do
    if wanted == nil or wanted[c.callId] then
      turns[#turns + 1] = c.turnId
      engine.publish("task.settled", { taskId = t.id, callId = c.callId, turnId = c.turnId, status = status,
        output = status == "completed" and (output == nil and json.null or output) or nil, error = err })
    else
      keep[#keep + 1] = c
    end
  end
  t.calls = keep
  return turns
end

function Tasks:add_result(t, status, output, err, turns)
  self.results[#self.results + 1] = { taskId = t.id, name = t.name, registered = t.registered, status = status,
    output = output,
    error = err, turns = turns }
end

--- Something a task sent the session (an inbox delivery's `task`). Returns
-- true when it is a message that should wake an idle session.
function Tasks:on_event(ev)
  if type(ev) ~= "table" then return false end
  local t = self.byid[ev.taskId]
  if not t or t.status == "finished" or ev.runId ~= t.runId then return false end -- (runId: an id used again)
  if ev.deliveryId ~= nil then
    if t.seen[ev.deliveryId] then return false end
    t.seen[ev.deliveryId] = true
  end
  if ev.kind == "message" then
    if type(ev.message) ~= "string" then return false end
    self.messages[#self.messages + 1] = { taskId = t.id, name = t.name, message = text.clip(ev.message) }
    self:wake()
    return true
  elseif ev.kind == "reply" then
    local turns = self:settle_calls(t, type(ev.callIds) == "table" and ev.callIds or {}, "completed", ev.output)
    if #turns == 0 then return false end -- a reply with no call left to settle is dropped
    self:add_result(t, "completed", ev.output, nil, turns)
    if #t.calls == 0 then self:set_status(t, "idle") end
    self:wake()
  elseif ev.kind == "settled" then
    local status = ev.status
    if status == "cancelled" then
      -- Cancelled work never reports (its calls still settle, as cancelled);
      -- a moor__task_wait learns that one task fewer works.
      self:settle_calls(t, nil, "cancelled", nil, ev.error)
      self:set_status(t, "finished")
      self:wake()
      return false
    elseif t.kind ~= "serve" or #t.calls > 0 then
      local e = status ~= "completed" and (type(ev.error) == "table" and ev.error or { message = "the task failed" })
        or nil
      local turns = self:settle_calls(t, nil, status, ev.result, e)
      self:add_result(t, status, ev.result, e, turns)
      self:wake()
    end
    self:set_status(t, "finished")
  end
  return false
end

local function has_turn(turns, turn_id)
  for _, id in ipairs(turns) do if id == turn_id then return true end end
  return false
end

--- Is a task of this turn still working?
function Tasks:working_in(turn_id)
  for _, id in ipairs(self.order) do
    local t = self.byid[id]
    if t.status == "working" then
      for _, c in ipairs(t.calls) do if c.turnId == turn_id then return true end end
    end
  end
  return false
end

--- Is something waiting for the model: a message, or a result (of this
-- turn's tasks when turn_id is given)?
function Tasks:pending(turn_id)
  if #self.messages > 0 then return true end
  if turn_id == nil then return #self.results > 0 end
  for _, r in ipairs(self.results) do if has_turn(r.turns, turn_id) then return true end end
  return false
end

--- Working tasks' run ids (their sole question can be answered by a message).
function Tasks:working_runs()
  local ids = {}
  for _, id in ipairs(self.order) do
    local t = self.byid[id]
    if t.status == "working" then ids[#ids + 1] = t.runId end
  end
  return ids
end

function Tasks:working_ids()
  local ids = {}
  for _, id in ipairs(self.order) do
    if self.byid[id].status == "working" then ids[#ids + 1] = id end
  end
  return ids
end

-- The body of a result for the model.
function Tasks:result_body(r)
  if r.status == "completed" then
    local content, err = self.project(engine.tools[r.registered] or {}, r.output)
    if content == nil then return "failed", err end
    if type(content) ~= "string" then content = json.encode(content) end
    return "completed", content
  end
  return r.status, tostring(r.error and r.error.message or "the task failed")
end

--- A step boundary of turn turn_id: append to the transcript what the model
-- has not read yet. Returns whether anything was appended.
function Tasks:boundary(transcript, turn_id)
  local added = false
  for _, m in ipairs(self.messages) do
    local content = ("[Message from task %s (%s)]\n%s"):format(m.taskId, m.name, m.message)
    transcript[#transcript + 1] = { role = "user", content = content }
    engine.publish("task.message", { turnId = turn_id, taskId = m.taskId, name = m.name, text = m.message })
    added = true
  end
  self.messages = {}
  if #self.results > 0 then
    local blocks, ids = {}, json.array {}
    for i, r in ipairs(self.results) do
      local status, body = self:result_body(r)
      blocks[i] = { taskId = r.taskId, tool = r.name, status = status, body = body }
      ids[i] = r.taskId
    end
    self.results = {}
    local content = text.result_message(blocks)
    transcript[#transcript + 1] = { role = "user", content = content }
    engine.publish("task.result", { turnId = turn_id, taskIds = ids, text = content })
    added = true
  end
  -- [Tasks]: the working tasks and the most recently used idle serve tasks,
  -- whenever that listing changes.
  local working, idle = {}, {}
  for _, id in ipairs(self.order) do
    local t = self.byid[id]
    if t.status == "working" then
      working[#working + 1] = { taskId = id, tool = t.name }
    elseif t.status == "idle" then
      idle[#idle + 1] = { taskId = id, tool = t.name, used = t.used }
    end
  end
  table.sort(idle, function(a, b) return a.used > b.used end)
  if self.note ~= false or #working > 0 or #idle > 0 then
    local note = text.tasks_note(working, idle)
    if note ~= self.note then
      self.note = note
      transcript[#transcript + 1] = { role = "user", content = note }
      added = true
    end
  end
  return added
end

--- moor__task_wait: park until a result or a message is waiting, signal
-- aborts (a new message steered), or timeout_ms. Returns eve's text.
function Tasks:wait(timeout_ms, signal)
  local r = engine.current()
  local started = r.now
  local function ready()
    local list = {}
    for _, x in ipairs(self.results) do list[#list + 1] = { taskId = x.taskId, status = x.status } end
    return list
  end
  if #self.results == 0 and #self.messages == 0 then
    if self.nworking == 0 then return text.wait_text("none", {}) end
    local timer = flow.timer(timeout_ms)
    while true do
      local futures = { self.changed, timer }
      if signal then futures[3] = signal end
      local _, idx = flow.race(futures)
      if idx == 2 then
        return text.wait_text("timeout", { working = self:working_ids(), elapsed_ms = r.now - started })
      elseif idx == 3 then
        return text.wait_text("message", { working = self:working_ids(), elapsed_ms = r.now - started })
      end
      if #self.results > 0 or #self.messages > 0 then break end
      -- A task stopped without a result (cancelled from outside): wait on
      -- for the others, unless none is left.
      if self.nworking == 0 then return text.wait_text("none", {}) end
    end
  end
  local list = ready()
  if #list == 0 then -- a message arrived from a task: it follows too
    return text.wait_text("message", { working = self:working_ids(), elapsed_ms = r.now - started })
  end
  return text.wait_text("results", { ready = list, working = self:working_ids(), elapsed_ms = r.now - started })
end

--- moor__task_cancel: stop a task's work. Returns eve's text, or nil, code, message.
function Tasks:cancel(task_id)
  local t = type(task_id) == "string" and self.byid[task_id]
  if not t or t.status == "finished" then
    return nil, "UNKNOWN_TASK", text.unknown_cancel(tostring(task_id))
  end
  if t.status == "idle" then return text.cancel_text(t.id, false) end
  if t.kind == "serve" then
    -- The task stays available: its waiting calls settle as cancelled and
    -- its run aborts the stretch (moor.authoring.serve).
    post_step(serve.calls_token(t.runId), { cancel = true })
    self:settle_calls(t, nil, "cancelled")
    self:set_status(t, "idle")
  else
    -- A run that ended already (its report still on its way) had no work
    -- to stop: its result still comes.
    if not cancel_step(t.runId) then return text.cancel_text(t.id, false) end
    self:settle_calls(t, nil, "cancelled")
    self:set_status(t, "finished")
  end
  self:touch(t)
  return text.cancel_text(t.id, true)
end

--- A failed or cancelled turn cancels the tasks working for it.
function Tasks:cancel_turn(turn_id)
  local ids = {} -- (a copy: a cancelled task leaves the table)
  for i, id in ipairs(self.order) do ids[i] = id end
  for _, id in ipairs(ids) do
    local t = self.byid[id]
    if t and t.status == "working" then
      for _, c in ipairs(t.calls) do
        if c.turnId == turn_id then
          self:cancel(id)
          break
        end
      end
    end
  end
end

--- The handle moor__task_wait and moor__task_cancel reach as ctx.session.tasks.
function Tasks:handle(signal)
  return {
    wait = function(timeout_seconds)
      local ms = timeout_seconds and math.floor(timeout_seconds * 1000) or conf.TASK_WAIT
      return self:wait(ms, signal)
    end,
    cancel = function(task_id) return self:cancel(task_id) end,
    working = function() return self:working_ids() end,
  }
end

return M
