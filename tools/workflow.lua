--- workflow: the runtime-generated workflow tool (seed 000 "Add a
-- runtime-generated workflow tool"; issue 10). The model writes a short Lua
-- program that fans work out to subagents and combines their replies; moor
-- runs it in a sandbox (moor.sandbox: host/sandbox.c, one capped lua_State
-- per program) as a task. Not a tool itself: this file returns a factory,
-- and an agent enables the tool with agent/tools/workflow.lua returning
-- `require("moor.tools.workflow") { maxSubagents = 20 }`.
--
-- Durable and resumed in place: each ctx.agent call of the program is a
-- branch of the task's run that records the call (target and message hash),
-- opens a child session with ctx.agent and waits for its turn; while the
-- host lives the parked sandbox is resumed directly with the result, so no
-- code of the program runs twice. After a restart the task's body replays:
-- a fresh sandbox runs the program from the start, its calls are answered
-- from the log in order (one reply per resume, as live), and a call that
-- differs from the record fails the run with a non-determinism error. To
-- bound memory, the least recently parked programs past parkedMemory bytes
-- (all programs of the host) are evicted and, when their next reply comes,
-- run again in a fresh sandbox on the replies they were given.
-- Written only on the public API.
local moor = require "moor"

local LIMITS = { "memory", "instructions", "seconds", "source", "output", "result", "message", "coroutines" }

-- The bytes the parked programs of this host may hold in all (sb:memory())
-- before the least recently parked are evicted; the option parkedMemory.
local PARKED_MEMORY = 256 * 1024 * 1024

local DESCRIPTION = [[
Run a short Lua 5.4 program that delegates work to subagents and combines their replies. `lua` is the
body of a function that receives `ctx`; `return` its result (a JSON value). In the program:
- ctx.agent(name, { message = "...", outputSchema = <JSON Schema, optional> }) opens a new session with
  that subagent, sends the message and returns its reply text (or the structured value when
  outputSchema is given); a failed turn raises a table error { code, message } you can pcall.
- ctx.all{ function() ... end, ... } runs each function concurrently and returns their results in order;
  ctx.race{ ... } returns the first result and its index and stops the others.
- print(...) writes to a log returned with the result. No io, os, require or load.
Each call starts one subagent session; at most %d per program.]]

local function names(set)
  local list = {}
  for n in moor.sortedPairs(set) do list[#list + 1] = n end
  return #list > 0 and table.concat(list, ", ") or "(none)"
end

local function fail(code, message) return { ok = false, error = { code = code, message = message } } end

-- Record a call before the program sees its result: replay compares what
-- the program asks now with what it asked then.
local record = moor.step("workflow.call", function(id, name, hash)
  return { id = id, name = name, hash = hash }
end, { retries = 0 })

-- One ctx.agent call of the program, as a branch of the task's run: a reply
-- for sb:resume (never raises but for a cancel or a non-determinism).
local function call_agent(ctx, c, signal)
  local hash = moor.sha256(c.message)
  local rec = record(c.id, c.name, hash)
  if rec.id ~= c.id or rec.name ~= c.name or rec.hash ~= hash then
    error(moor.Error.new("NonDeterminism", ("workflow program: call %d asks %s now, but the log recorded a call "
      .. "to %s with another message; the program is not the same as before the restart"):format(c.id, c.name,
      tostring(rec.name))))
  end
  local ok, r = pcall(function()
    return ctx.agent(c.name):send(c.message, { outputSchema = c.outputSchema, signal = signal }):result()
  end)
  if not ok then
    if moor.Error.is(r, "Cancelled") then error(r, 0) end
    local e = moor.Error.normalize(r)
    return fail(e.code or "AgentError", e.message)
  end
  if r.status == "failed" then
    return fail("AGENT_FAILED", ("%s: %s"):format(c.name, r.error and r.error.message or "the turn failed"))
  end
  if r.data ~= nil then return { ok = true, value = r.data } end
  if r.message == nil then return fail("CANCELLED", c.name .. ": the turn was cancelled") end
  return { ok = true, value = r.message }
end

-- Programs parked on their calls in this host, least recently parked first.
-- Past the budget the oldest are evicted: the state is freed, and when the
-- program's next reply comes it is run again from the start in a fresh
-- sandbox and given the same replies in the same order (it is deterministic:
-- random seeded per run, pairs in a fixed order, no clock), which brings it
-- back to where it was parked. Nothing outside the sandbox runs again.
-- (weak: a run dropped from memory without ending takes its program along)
local parked = setmetatable({}, { __mode = "k" }) -- prog -> when it parked
local parks = 0

local function unpark(prog) parked[prog] = nil end

local function park(prog, budget)
  parks = parks + 1
  parked[prog] = parks
  local list, total = {}, 0
  for p in pairs(parked) do
    list[#list + 1] = p
    total = total + p.sb:memory()
  end
  if total <= budget then return end
  table.sort(list, function(a, b) return parked[a] < parked[b] end)
  for _, p in ipairs(list) do
    if total <= budget or p == prog then break end -- (never the program parking now, the last)
    total = total - p.sb:memory()
    p.sb:evict()
    p.evicted = true
    parked[p] = nil
  end
end

-- What a "calls" answer asked, for the trace a re-execution must repeat.
local function trace_calls(prog, calls)
  for _, c in ipairs(calls) do
    prog.trace[#prog.trace + 1] = ("%d %s %d"):format(c.id, c.name, #c.message)
  end
end

-- Whether the program's first sandbox opened, recorded: a host failure
-- (no memory for a new state) is retried under the step policy (3 retries,
-- 1 s doubling), and a replay waits the same way.
local opened = moor.step("workflow.open", function(ok, message) return { ok = ok, message = message } end,
  { retries = 0 })

local function load_program(prog, sb)
  local ok, lerr = sb:load(prog.source, "program")
  if not ok then
    sb:close()
    error(moor.FatalError(lerr.message))
  end
  return sb
end

local function open_first(prog)
  for attempt = 1, 4 do
    local sb, serr = moor.sandbox(prog.sbopts)
    local rec = opened(sb ~= nil, sb == nil and (serr and serr.message or "cannot open a sandbox") or nil)
    if rec.ok then
      if not sb then error("the program's sandbox opened before the restart but cannot open now: "
        .. tostring(serr and serr.message)) end
      return load_program(prog, sb)
    end
    if sb then sb:close() end
    if attempt == 4 then error(rec.message) end -- (a host failure: the task fails)
    moor.sleep(1000 * 2 ^ (attempt - 1))
  end
end

local function open_sandbox(prog)
  local sb, serr = moor.sandbox(prog.sbopts)
  if not sb then error(serr and serr.message or "cannot open a sandbox") end -- (a host failure)
  return load_program(prog, sb)
end

-- An evicted program, run again up to where it was parked.
local function rebuild(prog)
  local sb = open_sandbox(prog)
  local trace = prog.trace
  prog.trace = {}
  local kind, v = sb:run()
  while kind == "slice" do kind, v = sb:resume({}) end -- (at once: a rebuild is rare)
  for i = 1, #prog.history + 1 do
    if kind ~= "calls" then break end
    trace_calls(prog, v)
    if i > #prog.history then break end
    kind, v = sb:resume(prog.history[i])
    while kind == "slice" do kind, v = sb:resume({}) end
  end
  local same = kind == "calls" and #prog.trace == #trace
  for i = 1, same and #trace or 0 do same = same and trace[i] == prog.trace[i] end
  if not same then
    sb:close()
    error(moor.Error.new("NonDeterminism", "workflow program: run again after its eviction, it did not make "
      .. "the same calls as before"))
  end
  prog.sb:close()
  prog.sb, prog.evicted = sb, false
end

-- A bad option is a load error of the agent's file (the loader adds its
-- file and line).
local function bad(message) error(moor.Error.new("DefinitionError", message), 3) end

return function(opts)
  if opts ~= nil and type(opts) ~= "table" then
    bad("moor.tools.workflow takes a table of options, as { maxSubagents = 20 }")
  end
  opts = opts or {}
  local max = opts.maxSubagents
  if max == nil then max = 100 end
  if math.type(max) ~= "integer" or max < 1 or max > 128 then
    bad(("maxSubagents must be an integer from 1 through 128, not %s"):format(tostring(opts.maxSubagents)))
  end
  local budget = opts.parkedMemory
  if budget == nil then budget = PARKED_MEMORY end
  if math.type(budget) ~= "integer" or budget < 0 then
    bad(("parkedMemory must be a number of bytes (an integer >= 0), not %s"):format(tostring(opts.parkedMemory)))
  end
  local limits = {}
  for _, k in ipairs(LIMITS) do limits[k] = opts[k] end
  for k in pairs(opts) do
    if k ~= "maxSubagents" and k ~= "parkedMemory" and limits[k] == nil then
      local known = table.concat(LIMITS, ", ")
      bad(("unknown option '%s' of moor.tools.workflow (maxSubagents, parkedMemory, %s)"):format(tostring(k),
        known))
    end
  end

  return moor.defineWorkflowTool {
    description = DESCRIPTION:format(max),
    inputSchema = { type = "object", additionalProperties = false, required = moor.json.array { "lua" },
      properties = { lua = { type = "string", minLength = 1, description = "the body of function(ctx)" } } },
    task = function(input, ctx)
      -- The allowlist: the agent's declared subagents (hidden ones included).
      local allowed = {}
      for name in pairs(ctx.agents or {}) do if name ~= "agent" then allowed[name] = true end end
      -- (seed: the run's generator, the same on replay; slice: the host's loop
      -- turns between slices of a long computation)
      local sbopts = { seed = math.random(1, 0x7fffffff), slice = true }
      for k, v in pairs(limits) do sbopts[k] = v end
      local prog = { sbopts = sbopts, source = input.lua, history = {}, trace = {}, evicted = false }
      prog.sb = open_first(prog)
      -- Closing the program runs its to-be-closed variables (an evicted one
      -- is brought back first), under the budget it has left.
      local _ <close> = setmetatable({}, { __close = function()
        unpark(prog)
        if prog.evicted then pcall(rebuild, prog) end
        prog.sb:close()
      end })
      -- A program that computes past its slice (MOOR_SANDBOX_SLICE_US) gives
      -- the host its loop back (moor.pause: other runs go on), then goes on.
      local function go_on(k, val)
        while k == "slice" do
          moor.pause()
          k, val = prog.sb:resume({})
        end
        return k, val
      end
      local function resume(replies)
        if prog.evicted then rebuild(prog) end
        prog.history[#prog.history + 1] = replies
        return go_on(prog.sb:resume(replies))
      end
      local started = 0
      local pending, signals = {}, {} -- call id -> future, abort controller
      local queued = {}               -- replies decided at once: { id, reply }, in id order
      local kind, v
      -- Calls the program no longer waits for (it lost a ctx.race, or it
      -- ended): stop them, which cancels their child's turn.
      local function stop_unwaited()
        local waiting = {}
        for _, id in ipairs(kind == "calls" and prog.sb:pending() or {}) do waiting[id] = true end
        for id, ac in moor.sortedPairs(signals) do
          if not waiting[id] then
            ac.abort("the program stopped waiting for this call")
            signals[id], pending[id] = nil, nil
          end
        end
      end
      kind, v = go_on(prog.sb:run())
      for _ = 1, math.maxinteger do
        if kind == "calls" then trace_calls(prog, v) end
        if kind ~= "calls" then stop_unwaited() end
        if kind == "done" then
          if v == nil then v = moor.json.null end
          -- (what the sandbox lets out may still not be JSON: { 1, x = 2 })
          local text, jerr = moor.json.encode(v, nil, "the program's result")
          if not text then error(moor.FatalError(jerr)) end
          return { result = v, output = prog.sb:output() }
        elseif kind == "error" then
          -- (a raised { code, message } the program did not catch: its code first)
          local message = v.cause and v.cause.code and (v.cause.code .. ": " .. v.message) or v.message
          local out = prog.sb:output()
          error(moor.FatalError(message .. (out ~= "" and ("\noutput:\n" .. out) or "")))
        end
        for _, c in ipairs(v) do -- new calls
          if not allowed[c.name] then
            queued[#queued + 1] = { c.id, fail("AGENT_NOT_ALLOWED", ("'%s' is not a subagent this program may "
              .. "call; it may call: %s"):format(c.name, names(allowed))) }
          elseif c.message == "" then
            queued[#queued + 1] = { c.id, fail("INVALID_ARGUMENT", ("ctx.agent(\"%s\"): message must be a non-empty "
              .. "string"):format(c.name)) }
          elseif c.outputSchema ~= nil and not moor.schema.check(c.outputSchema) then
            local _, why = moor.schema.check(c.outputSchema)
            queued[#queued + 1] = { c.id, fail("INVALID_ARGUMENT", ("ctx.agent(\"%s\"): outputSchema is not a JSON "
              .. "Schema moor understands: %s"):format(c.name, (why:gsub("^schema", "outputSchema")))) }
          elseif started >= max then
            queued[#queued + 1] = { c.id, fail("SUBAGENT_LIMIT_REACHED", ("this program may start at most %d "
              .. "subagent sessions (maxSubagents)"):format(max)) }
          else
            started = started + 1
            local ac = moor.AbortController()
            signals[c.id] = ac
            pending[c.id] = moor.async(call_agent, ctx, c, ac.signal)
          end
        end
        stop_unwaited()
        if #queued > 0 then
          local q = table.remove(queued, 1)
          kind, v = resume({ [q[1]] = q[2] })
        else
          local futures, ids = {}, {}
          for id, f in moor.sortedPairs(pending) do
            futures[#futures + 1] = f
            ids[#ids + 1] = id
          end
          if #futures == 0 then
            error(moor.FatalError("the program waits on no call (an internal error of the sandbox)"))
          end
          park(prog, budget)
          local reply, idx = moor.race(futures)
          unpark(prog)
          local id = ids[idx]
          pending[id], signals[id] = nil, nil
          kind, v = resume({ [id] = reply })
        end
      end
    end,
  }
end
