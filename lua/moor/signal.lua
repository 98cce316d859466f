--- Abort signals, as the web's AbortSignal: ctx.abortSignal and
-- moor.AbortController().signal. A signal is also a future (the
-- { done, ok, value, waiters } of moor.async's), so a workflow body can wait
-- for it: signal:wait(), moor.race{ moor.timer("1h"), signal }, moor.all{...}.
--
-- Durable across replay: ctx.abortSignal aborts only when its run's
-- `run.abort` (a steering message) or `run.cancel` event is delivered, and
-- the engine delivers those in log order, live and in a replay alike; a
-- controller's abort() runs in body code, which replays the same way. So a
-- replayed wait settles at the same point as the live one did.
-- engine.abort (lua/moor/engine/waits.lua) marks the signal aborted, withdraws the
-- questions asked with it, calls its listeners, then settles it as a future
-- with the reason.
local errors = require "moor.errors"

local M = {}

local engine -- set by M.install (the engine requires this module)

local Signal = {}
Signal.__index = Signal
Signal.__name = "moor.AbortSignal"
M.Signal = Signal

--- A signal that has not aborted.
function M.new()
  return setmetatable({ kind = "signal", aborted = false, reason = nil, done = false }, Signal)
end

function M.is(s) return getmetatable(s) == Signal end

--- signal:wait() -> reason: park the workflow body until the signal aborts
-- (at once when it already has). Holds no timer and no polling.
function Signal:wait()
  if not engine.in_body() then
    error("signal:wait belongs in a workflow body (defineWorkflowTool's execute), not in a step or plain code", 2)
  end
  local why = engine.waits_refused() -- (a harness tool's handler: its agent waits for it)
  if why then error("signal:wait can't wait in " .. why .. ": the agent that called it waits for its answer, "
    .. "so a handler may run steps (and other agents) but not sleep, race or wait on hooks, signals or questions",
    2) end
  local ok, v = engine.op("wait", "await", { mode = "await", futures = { self } })
  if not ok then error(v, 0) end
  return v
end

--- signal:throwIfAborted(): raise moor.Error "Aborted" (with the reason)
-- when the signal has aborted.
function Signal:throwIfAborted()
  if self.aborted then
    error(errors.new("Aborted", "the operation was aborted: " .. tostring(self.reason), { reason = self.reason }), 2)
  end
end

local function check_listener(kind, fn, what)
  if kind ~= "abort" then error(what .. ": a signal has only the \"abort\" event", 3) end
  if type(fn) ~= "function" then error(what .. ": the listener must be a function", 3) end
end

--- signal:addEventListener("abort", fn [, { once = true }]): call
-- fn({ type = "abort", target = signal }) when the signal aborts, once (as
-- the web, a listener added after the abort is not called: check
-- signal.aborted, or use signal:wait()). fn runs when the abort is delivered,
-- outside the body's coroutine, so it cannot wait; an error it raises is
-- reported on stderr and the other listeners still run, as on the web.
function Signal:addEventListener(kind, fn, opts)
  check_listener(kind, fn, "addEventListener")
  if opts ~= nil and type(opts) ~= "table" then error("addEventListener: options must be a table { once }", 2) end
  if self.aborted then return end
  self._wrapped = self._wrapped or {}
  if self._wrapped[fn] then return end -- the web adds a listener once
  local target = self
  local function call()
    local ok, err = pcall(fn, { type = "abort", target = target })
    if not ok then io.stderr:write("moor: an abort listener raised: ", tostring(err), "\n") end
  end
  self._wrapped[fn] = call
  self._listeners = self._listeners or {}
  self._listeners[#self._listeners + 1] = call
end

--- signal:removeEventListener("abort", fn).
function Signal:removeEventListener(kind, fn)
  check_listener(kind, fn, "removeEventListener")
  local call = self._wrapped and self._wrapped[fn]
  if not call then return end
  self._wrapped[fn] = nil
  for i, f in ipairs(self._listeners or {}) do
    if f == call then table.remove(self._listeners, i) return end
  end
end

function M.install(e) engine = e end

return M
