--- The authoring API's flow of a workflow body (part of `require "moor"`):
-- durable steps (moor.step, stepInfo), sleep and timers, branches and their
-- futures (async, all, race, await), moor.version, moor.sortedPairs and
-- moor.AbortController. Each is an op of the engine; need_body() is the guard
-- the other parts use for what belongs in a workflow body.
local engine = require "moor.engine"
local duration = require "moor.duration"
local abort_signals = require "moor.signal"
local conf = require "moor.conf"

-- A step's policy unless it says otherwise.
local DEFAULT_POLICY = conf.STEP_POLICY

local M = {}

local function make_policy(p)
  if p == nil then return DEFAULT_POLICY end
  if type(p) ~= "table" then error("a step policy is a table { retries, backoff, factor, maxBackoff }", 3) end
  local policy = {}
  for k, v in pairs(DEFAULT_POLICY) do policy[k] = v end
  for k, v in pairs(p) do
    if DEFAULT_POLICY[k] == nil then error(("unknown step policy option '%s'"):format(tostring(k)), 3) end
    if k == "retries" then
      if math.type(v) ~= "integer" or v < 0 then error("retries must be an integer >= 0", 3) end
      policy.retries = v
    elseif k == "factor" then
      if type(v) ~= "number" or v < 1 then error("factor must be a number >= 1", 3) end
      policy.factor = v
    else
      policy[k] = duration.check(v, 3)
    end
  end
  return policy
end

function M._step_call(name, fn, policy, ...)
  if not engine.in_body() then return fn(...) end
  local ok, v = engine.step(name, fn, policy, ...)
  if ok then return v end
  error(v, 0)
end

--- moor.step(name, fn [, policy]) -> a function. Called in a workflow body it
-- is a durable step: run once, its result recorded and replayed; retried on
-- error (3 retries, exponential backoff from 1s, unless policy says
-- otherwise; FatalError is never retried). Called anywhere else it is a
-- plain call. policy = { retries, backoff, factor, maxBackoff }.
-- moor.auth's: a step's arguments as the step gets them (the call's ctx,
-- given directly, becomes the step context; nested or captured, refused).
local step_args = nil
function M.set_step_args(fn) step_args = fn end

function M.step(name, fn, policy)
  if type(name) ~= "string" or name == "" then error("moor.step needs a name (a non-empty string)", 2) end
  if type(fn) ~= "function" then error("moor.step needs a function", 2) end
  local pol = make_policy(policy)
  local in_body, engine_step, recorded = engine.in_body, engine.step, engine.step_recorded
  return function(...)
    if not in_body() then return fn(...) end
    local ok, v
    -- (a replayed step's arguments are never used: they were checked when it ran)
    if step_args and not recorded() then
      ok, v = engine_step(name, fn, pol, step_args(name, fn, ...))
    else
      ok, v = engine_step(name, fn, pol, ...)
    end
    if ok then return v end
    error(v, 0)
  end
end

--- Inside a running step: { runId, seq, attempt, name, idempotencyKey }.
-- idempotencyKey (run id + op seq) is stable across retries and restarts:
-- hand it to services that deduplicate, since steps are at-least-once.
function M.stepInfo() return engine.step_info() end

local function not_in_body(what)
  return what .. " belongs in a workflow body (defineWorkflowTool's execute), not in a step or plain code"
end

local function need_body(what)
  if not engine.in_body() then error(not_in_body(what), 3) end
end
M.need_body = need_body

--- need_body, and the thread may wait on the world: a harness tool's handler
-- may not (seed 001 "What a handler can't do": its agent waits for it).
local function need_wait(what)
  if not engine.in_body() then error(not_in_body(what), 3) end
  local why = engine.waits_refused()
  if why then error(what .. " can't wait in " .. why .. ": the agent that called it waits for its answer, "
    .. "so a handler may run steps (and other agents) but not sleep, race or wait on hooks or questions", 3) end
end
M.need_wait = need_wait

--- Durable sleep: parks the run without holding compute; survives restarts.
function M.sleep(d)
  -- parse, not check: a frame less at the deepest point of a run that parks
  -- here, which keeps its coroutine within Lua's first stack (issue 7 bench)
  local ms, err = duration.parse(d)
  if not ms then error(err, 2) end
  need_wait("moor.sleep")
  local ok, v = engine.op("sleep", "sleep", { ms = ms })
  if not ok then error(v, 0) end
end

--- moor.pause(): let the host's loop turn once before the body goes on (for
-- a body that computes a long time, as the workflow tool's sandbox does).
-- Not recorded: replay may pause elsewhere, and the run sees the same.
function M.pause()
  need_body("moor.pause")
  local ok, v = engine.op("pause", "pause", nil)
  if ok == false then error(v, 0) end
end

--- moor.async(fn, ...) -> future: run fn as a branch of this run.
function M.async(fn, ...)
  need_body("moor.async")
  if type(fn) ~= "function" then error("moor.async needs a function", 2) end
  return engine.async(fn, ...)
end

--- A future that settles (with nil) after d: for moor.race.
function M.timer(d)
  local ms = duration.check(d, 2)
  need_wait("moor.timer")
  return engine.async(M.sleep, ms)
end

local function check_futures(list, what)
  if type(list) ~= "table" or #list == 0 then error(what .. " takes a non-empty list of futures", 3) end
  for i, f in ipairs(list) do
    if type(f) ~= "table" or f.done == nil then
      error(("%s: item %d is not a future (make one with moor.async or moor.timer, or pass a signal)"):format(
        what, i), 3)
    end
  end
end

local function wait(mode, futures)
  local ok, v, idx = engine.op("wait", mode, { mode = mode, futures = futures })
  if not ok then error(v, 0) end
  return v, idx
end

-- A signal (ctx.abortSignal, moor.AbortController().signal) is a future too:
-- it settles with its reason when it aborts (lua/moor/signal.lua).

--- Wait for every future; returns their values as an array (raises the first error).
function M.all(futures)
  need_wait("moor.all")
  check_futures(futures, "moor.all")
  return (wait("all", futures))
end

--- Wait for the first future to settle; returns its value and its index.
function M.race(futures)
  need_wait("moor.race")
  check_futures(futures, "moor.race")
  return wait("race", futures)
end

--- Wait for one future.
function M.await(f)
  need_wait("moor.await")
  check_futures({ f }, "moor.await")
  return (wait("await", { f }))
end

--- moor.version(id, min, max): change a live workflow deliberately, as
-- Temporal's patching. New runs record max; runs that reached this point
-- before the marker existed get min.
function M.version(id, min, max)
  need_body("moor.version")
  if type(id) ~= "string" then error("moor.version needs an id string", 2) end
  if math.type(min) ~= "integer" or math.type(max) ~= "integer" or min > max then
    error("moor.version(id, min, max) needs integers with min <= max", 2)
  end
  local ok, v = engine.op("version", id, { min = min, max = max })
  if not ok then error(v, 0) end
  return v
end

--- moor.AbortController(): { signal, abort(reason) }, as the web's. Pass
-- the signal to ctx.ask to withdraw the question when it aborts; wait for it
-- with signal:wait(), moor.race or moor.all; signal:addEventListener("abort",
-- fn). Both ac.abort(reason) and ac:abort(reason) keep the reason (signal.reason).
function M.AbortController()
  local signal = abort_signals.new()
  local ac = { signal = signal }
  ac.abort = function(a, b)
    if a == ac then a = b end
    engine.abort(signal, a)
  end
  return ac
end

--- pairs in a stable (sorted-key) order: Lua's pairs order differs between
-- processes, so a body that makes ops while iterating must use this.
function M.sortedPairs(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    return a < b
  end)
  local i = 0
  return function()
    i = i + 1
    local k = keys[i]
    if k ~= nil then return k, t[k] end
  end
end

return M
