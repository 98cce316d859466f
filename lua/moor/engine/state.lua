--- The engine's shared state: the runs in memory, the ready queue, the
-- results waiting for a commit, and what is executing now. Every part of
-- lua/moor/engine/ reads and writes it here (fields, not upvalues, because
-- several files share them); nothing here does work but dropping a run.
local timers = require "moor.engine.timers"
local store = require "moor.store"

local S = {}

-- A body yields (OP, kind, name, spec) to ask for a durable op; any other
-- yield is a progress snapshot (DESIGN.md, "The op protocol").
S.OP = setmetatable({}, { __name = "moor.op", __tostring = function() return "moor.op" end })
-- A step yields (IO, start) to park on I/O (moor.fetch, a provider's backoff).
S.IO = setmetatable({}, { __name = "moor.io" })
-- A task body yields a value with this metatable (task.postMessage(msg)) to
-- wake its parent session with a message (seed 003 §3.1); any other value
-- it yields stays stream-only progress.
S.TASK_MESSAGE = { __name = "moor.taskMessage" }

S.tools = {}            -- name -> loaded tool definition (engine.tools)
S.runs = {}             -- id -> run, for runs in memory
S.nruns = 0
S.runq, S.qhead, S.qtail = {}, 1, 0 -- threads ready to resume (FIFO: deterministic)
S.pending, S.npending = {}, 0       -- completions appended, not yet committed
S.replaying = {}        -- runs still answering ops from their log (array)
S.io_inflight = 0       -- steps parked on I/O
S.outside = 0           -- work outside the engine that reports back into a run (harness agents' turns)
S.later = {}            -- threads that paused (moor.pause) until the loop turns once
S.holding = {}          -- runs holding results back while a thread of theirs is paused
S.on_end = {}           -- functions called with a run's id when it ends (engine.on_run_end)
S.discards = 0          -- failed commits taken back so far (counts kept from the database go stale)
-- eviction (engine/evict.lua): runs out of memory until something reaches them
S.evicted = {}          -- id -> its timer entry, or true: an evicted run
S.nevicted = 0
S.pinned = {}           -- id -> count: outside work held in memory for the run (a harness turn): never evicted
S.wake = function() end -- S.wake(id): an evicted run is reached (evict.lua sets these two)
S.forget = function() end

-- These four are false, never nil, when unset: a field set to nil leaves S's
-- hash part at the next rehash, and setting it again then rehashes S (twice
-- a step, when S.step_info and S.current_run took turns being nil).
S.current_run = false   -- the run whose body is executing
S.in_body = false       -- true while a body (not a step) executes
S.closing = false       -- why ops are refused: a run's parked threads are being closed
S.step_info = false     -- the step executing now, for moor.stepInfo()
S.current_thread = false -- the body thread executing now (its .no_wait: why it may not wait)

--- Forget a run held in memory (it ended, or it is to be loaded again from
-- its log): its threads never run again.
function S.drop(r)
  for _, th in ipairs(r.threads) do th.dead = true end
  if r.settled then timers.drop_run(r) end -- (they would never fire: out of the heap now)
  if S.runs[r.id] then
    S.runs[r.id] = nil
    S.nruns = S.nruns - 1
  end
  store.forget(r.id)
  S.forget(r)
end

--- Run id is no longer evicted (it is loaded again, or has ended): its timer
-- entry, if it kept one, is dropped (a stale one would keep moor_run waiting).
function S.unevict(id)
  local e = S.evicted[id]
  if e ~= nil then
    if e ~= true then timers.cancel(e) end
    S.evicted[id] = nil
    S.nevicted = S.nevicted - 1
  end
end

return S
