--- Scheduling primitives: the ready queue, threads (a body or a branch in
-- its own coroutine), whether a run is still replaying its log, and
-- recording an op's result for delivery after the next commit, and futures
-- (branches, abort signals) settling the waits on them.
local json = require "moor.json"
local log = require "moor.engine.log"
local S = require "moor.engine.state"

local M = {}

local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield

--- Queue thread th to resume with (ok, v1, v2).
function M.ready(th, ok, v1, v2)
  th.ok, th.v1, th.v2 = ok, v1, v2
  S.qtail = S.qtail + 1
  S.runq[S.qtail] = th
  th.run.nready = th.run.nready + 1
end

--- The body has not yet re-issued every op the log holds: what it publishes
-- now was published before the restart.
function M.behind_log(r)
  return r.rpos <= r.nreplay or r.nops < r.max_op
end

--- Live work for a run waits until its replay is over (rpos <= nreplay: it
-- still has logged results to hand its body), so that results keep the
-- order the log gives them.
function M.live(r, fn)
  if r.rpos <= r.nreplay then
    r.deferred[#r.deferred + 1] = fn
  else
    fn()
  end
end

local function push_pending(item)
  S.npending = S.npending + 1
  S.pending[S.npending] = item
end

--- Queue a recorded result { r, n, kind, payload, time } for delivery after
-- the next commit. While the run is still replaying its log, delivery waits
-- for the replay to end, so results reach the body in log order.
function M.queue_delivery(r, item)
  if r.rpos <= r.nreplay then
    r.deferred[#r.deferred + 1] = function() push_pending(item) end
  else
    push_pending(item)
  end
end

--- Record the result of op n and queue it for delivery.
function M.complete(r, n, kind, name, payload)
  local _, t = log.append(r, n, kind, name, payload)
  M.queue_delivery(r, { r, n, kind, payload, t })
end

--- An op that parks with nothing to record yet still leaves a mark in the log
-- ("waiting"), so a restart after later ops were recorded sees this op in its
-- place instead of a gap.
function M.mark_waiting(r, n, kind, name, payload)
  if r.recorded[n] then return end
  log.append(r, n, kind, name, payload)
  r.recorded[n] = { kind = log.OPKIND[kind], name = name }
end

-- A body or a branch runs under pcall inside its own coroutine, so an error
-- (or the Cancelled raised at a parked op) unwinds there: to-be-closed
-- variables close during the unwinding, where their __close may still yield
-- (run steps). coroutine.close, from outside, cannot let them yield.
-- The coroutine is started at once up to a first yield that holds fn and its
-- arguments; its first real resume calls fn (a tail call: no frame is left).
local function start(fn, a, b, c)
  co_yield()
  return fn(a, b, c)
end

--- A new thread of run r that will call fn(a, b, c) when first resumed.
function M.new_thread(r, fn, a, b, c)
  local co = co_create(pcall)
  co_resume(co, start, fn, a, b, c)
  local th = { run = r, co = co }
  r.threads[#r.threads + 1] = th
  return th
end

-- futures: branches (moor.async) and abort signals, waited on by race/all/await

--- Whether wait w (race, all, await over futures) is over: done, ok, value, index.
function M.wait_result(w)
  local fs = w.futures
  if w.mode == "race" then
    for i = 1, #fs do
      local f = fs[i]
      if f.done then return true, f.ok, f.value, i end
    end
    return false
  end
  -- all (await is all of one)
  local values = {}
  for i = 1, #fs do
    local f = fs[i]
    if f.done and not f.ok then return true, false, f.value end
    if not f.done then return false end
    values[i] = f.value
  end
  if w.mode == "await" then return true, true, values[1] end
  return true, true, json.array(values)
end

--- Settle future f (a branch, an abort signal) and wake the threads waiting on it.
function M.settle_future(f, ok, v)
  f.done, f.ok, f.value = true, ok, v
  local ws = f.waiters
  f.waiters = nil
  if not ws then return end
  for i = 1, #ws do
    local th, w = ws[i][1], ws[i][2]
    if th.wait == w then
      local done, rok, rv, idx = M.wait_result(w)
      if done then
        th.wait = nil
        M.ready(th, rok, rv, idx)
      end
    end
  end
end

return M
