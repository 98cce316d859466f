--- moor.harness: coding agents that run in their own harness (Claude Code,
-- Codex, any program) and call the workflow's tools from their shell through
-- a launcher (issue 11, seed 001). Part of the authoring API:
--
--   local reviewer = moor.harness.open {
--     key = "reviewer", runtime = "codex",
--     tools = { add_finding = moor.harness.tool { description = ..., input = Finding,
--                                                  handler = function(finding, call) ... end } },
--   }
--   local r = reviewer:run { prompt = "Find dead code in src/ ...", timeout = "20m" }
--   -- r.outcome: { answered = true, value } | { answered = false, reason }
--
-- A handler is body code of the workflow run: each call is a delivery into
-- the run (the agent's hook, "harness-<runId>-<key>-<gen>"), recorded before
-- the handler runs, so replay gives the handlers the same calls in the same
-- order and rebuilds what they built; side effects belong in moor.step. Its
-- result or error is recorded by the harness.reply step, whose live run
-- answers the launcher. The host's side (sockets, processes, timers, the
-- checks every call goes through) is moor.harness.host.
local engine = require "moor.engine"
local json = require "moor.json"
local errors = require "moor.errors"
local schema = require "moor.schema"
local duration = require "moor.duration"
local signals = require "moor.signal"
local conf = require "moor.conf"
local flow = require "moor.authoring.flow"
local world = require "moor.authoring.world"
local teach = require "moor.harness.teach"
local runtime = require "moor.harness.runtime"
local host = require "moor.harness.host"

local type, pairs, ipairs, tostring, setmetatable, getmetatable = type, pairs, ipairs, tostring, setmetatable,
  getmetatable
local fmt, encode = string.format, json.encode
local need_body = flow.need_body

local M = {}

local TOOL = { __name = "moor.harness.tool" }
local Agent = {}
Agent.__index = Agent

-- per run (the engine's run object; a replay makes a new one): key -> agent,
-- and how many agents each key has had (a closed key opened again is new)
local by_run = setmetatable({}, { __mode = "k" })

---------------------------------------------------------------------------
-- defining tools

--- moor.harness.tool{ description, input?, handler, timeout? }: a tool a
-- harness agent calls. input: an object schema (JSON Schema or moor.schema);
-- without it the handler is given {}. timeout: a handler's budget ("2m";
-- 30 s by default; false leaves only the turn's deadline).
function M.tool(spec)
  if type(spec) ~= "table" then error("moor.harness.tool needs a table { description, input?, handler }", 2) end
  for k in pairs(spec) do
    if k ~= "description" and k ~= "input" and k ~= "handler" and k ~= "timeout" then
      error(fmt("moor.harness.tool: unknown field '%s' (description, input, handler, timeout)", tostring(k)), 2)
    end
  end
  if type(spec.description) ~= "string" or spec.description:match("^%s*$") then
    error("moor.harness.tool: description must say what the tool is for and when to use it", 2)
  end
  if type(spec.handler) ~= "function" then error("moor.harness.tool: handler must be a function(input, call)", 2) end
  local input = spec.input
  if input ~= nil then
    if type(input) ~= "table" then error("moor.harness.tool: input must be an object schema", 2) end
    local okc, cerr = schema.check(input)
    if not okc then error("moor.harness.tool: input is not a schema moor understands: " .. cerr, 2) end
    if input.type ~= "object" then
      error("moor.harness.tool: input must be an object schema (type = \"object\"), as moor.schema.object builds", 2)
    end
  end
  local timeout_ms = nil
  if spec.timeout == false then
    timeout_ms = false
  elseif spec.timeout ~= nil then
    local ms, derr = duration.parse(spec.timeout)
    if not ms then error("moor.harness.tool: timeout: " .. tostring(derr), 2) end
    timeout_ms = ms
  end
  return setmetatable({ description = spec.description, input = input, handler = spec.handler,
    timeout_ms = timeout_ms }, TOOL)
end

local NAME_RULE = "^[a-z0-9_]+$"

-- tools = { name = moor.harness.tool{...} }: checked, as a sorted list of
-- { name, description, input, json, timeout_ms } plus the handlers by name.
-- Every limit is checked here, when the agent opens (seed 001 "Limits").
local function check_tools(tools, level)
  if tools == nil then tools = {} end
  if type(tools) ~= "table" then error("moor.harness.open: tools must be a table { name = moor.harness.tool{...} }",
    level) end
  local list, handlers, n = {}, {}, 0
  for name, t in pairs(tools) do
    n = n + 1
    if type(name) ~= "string" or not name:match(NAME_RULE) then
      error(fmt("moor.harness.open: tool name '%s' must be lowercase letters, digits and _", tostring(name)), level)
    end
    if getmetatable(t) ~= TOOL then
      error(fmt("moor.harness.open: tools.%s must be made with moor.harness.tool{...}", name), level)
    end
    list[#list + 1] = { name = name, description = t.description, input = t.input, timeout_ms = t.timeout_ms,
      json = not teach.takes_nothing(t.input) and not teach.is_small(t.input) }
    handlers[name] = t.handler
  end
  if n > teach.LIMITS.tools then
    error(fmt("moor.harness.open: an agent holds at most %d tools; this one is given %d", teach.LIMITS.tools, n),
      level)
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  local block, berr = teach.prompt_block("/wfa", list)
  if not block then error("moor.harness.open: " .. berr.message, level) end
  return list, handlers
end

-- The same names, descriptions and schemas (seed 001 "reopening").
local function same_tools(old, new)
  if #old ~= #new then return false, "it had " .. #old .. " tools and is given " .. #new end
  for i, t in ipairs(old) do
    local u = new[i]
    if t.name ~= u.name then return false, "its tools were named differently (" .. t.name .. ")" end
    if t.description ~= u.description then return false, t.name .. "'s description differs" end
    if encode(t.input == nil and json.null or t.input) ~= encode(u.input == nil and json.null or u.input) then
      return false, t.name .. "'s input schema differs"
    end
  end
  return true
end

---------------------------------------------------------------------------
-- steps

local open_step = flow.step("harness.open", function() return { dir = host.new_dir_name() } end)
-- (a turn that cannot start fails; the run goes on with what its handlers built)
local start_step = flow.step("harness.start", function(spec)
  local ok, v = pcall(host.start_turn, spec)
  if ok then return v end
  return { failed = "the turn could not start: " .. tostring(v) }
end, { retries = 0 })
local reply_step = flow.step("harness.reply", function(token, n, payload)
  host.reply(token, n, payload.id, payload)
  return payload
end, { retries = 0 })
local stop_step = flow.step("harness.stop", function(token, n) return host.stop_turn(token, n) end, { retries = 0 })
local close_step = flow.step("harness.close", function(token) return host.close_agent(token) end, { retries = 0 })

---------------------------------------------------------------------------
-- opening an agent

local function run_state()
  local r = engine.current()
  local st = by_run[r]
  if not st then
    st = { agents = {}, gens = {} }
    by_run[r] = st
  end
  return st, r
end

local function new_agent(st, r, key, rt, list, handlers, opts)
  local gen = (st.gens[key] or 0) + 1
  st.gens[key] = gen
  local a = setmetatable({ key = key, runtime = rt, list = list, handlers = handlers,
    instructions = opts.instructions, cwd = opts.cwd, turns = 0, calls = {},
    token = fmt("harness-%s-%s-%d", r.id, key, gen) }, Agent)
  a.dir = open_step().dir
  host.opened(a.token, a.dir)
  st.agents[key] = a
  return a
end

local KEY_RULE = "^[%w_.-]+$"

local function check_key(key, what)
  if type(key) ~= "string" or not key:match(KEY_RULE) or #key > 64 then
    error(what .. ": key must be 1-64 letters, digits or . _ -", 3)
  end
end

--- moor.harness.open{ key, runtime, tools?, instructions?, cwd? } -> agent.
-- Opening a key this run already opened gives that agent: with tools, they
-- must have the same names, descriptions and schemas (their handlers
-- replace the old); without, it keeps what it has.
function M.open(spec)
  need_body("moor.harness.open")
  if type(spec) ~= "table" then error("moor.harness.open needs a table { key, runtime, tools, ... }", 2) end
  for k in pairs(spec) do
    if k ~= "key" and k ~= "runtime" and k ~= "tools" and k ~= "instructions" and k ~= "cwd" then
      error(fmt("moor.harness.open: unknown field '%s' (key, runtime, tools, instructions, cwd)", tostring(k)), 2)
    end
  end
  check_key(spec.key, "moor.harness.open")
  local st, r = run_state()
  local old = st.agents[spec.key]
  if old then
    if spec.tools ~= nil then
      local list, handlers = check_tools(spec.tools, 2)
      local same, why = same_tools(old.list, list)
      if not same then
        error(fmt("moor.harness.open: %s is open already, and opening it again must give the same tools: %s",
          spec.key, why), 2)
      end
      old.handlers = handlers
    end
    return old
  end
  local rterr = runtime.check(spec.runtime)
  if rterr then error("moor.harness.open: " .. rterr, 2) end
  if spec.instructions ~= nil and type(spec.instructions) ~= "string" then
    error("moor.harness.open: instructions must be a string", 2)
  end
  if spec.cwd ~= nil and type(spec.cwd) ~= "string" then error("moor.harness.open: cwd must be a string", 2) end
  local list, handlers = check_tools(spec.tools, 2)
  return new_agent(st, r, spec.key, spec.runtime, list, handlers, spec)
end

---------------------------------------------------------------------------
-- a turn

-- "/a/b.lua:12: msg" -> "msg": the agent reads exactly the error's message.
local function message_of(e)
  if type(e) == "string" then
    return (e:gsub("^[^\n]-%.lua:%d+: ", "", 1):gsub('^%[string "[^"]*"%]:%d+: ', "", 1))
  end
  local n = errors.normalize(e)
  return tostring(n and n.message or e)
end

-- One call, as a branch of the run: the handler, then its recorded answer.
local function run_call(a, n, call)
  engine.refuse_waits(fmt("the handler of %s's tool %s", a.key, tostring(call.tool)))
  local sig = signals.new()
  a.calls[call.id] = sig
  local handler = a.handlers[call.tool]
  local payload
  if not handler then
    payload = { id = call.id, error = "there is no tool named " .. tostring(call.tool) }
  else
    local okh, v = pcall(handler, call.input, { id = call.id, agent = a.key, signal = sig })
    if not okh then
      payload = { id = call.id, error = message_of(v) }
    else
      local text, err, kind = encode(v == nil and json.null or v, conf.HARNESS_TOOL_MAX_RESULT, "result")
      if text then
        payload = { id = call.id, output = v }
      elseif kind == "size" then
        payload = { id = call.id, error = fmt("the tool's result is over %d KiB as JSON; return a summary or a "
          .. "path, not a whole file", conf.HARNESS_TOOL_MAX_RESULT // 1024) }
      else
        payload = { id = call.id, error = "the tool's result isn't JSON: " .. tostring(err) }
      end
    end
  end
  a.calls[call.id] = nil
  reply_step(a.token, n, payload)
end

local function turn(a, opts)
  a.turns = a.turns + 1
  local n = a.turns
  if not a.hook then a.hook = world.createHook { token = a.token } end
  local started = start_step {
    token = a.token, key = a.key, run_id = engine.current().id, dir = a.dir, n = n, tools = a.list,
    runtime = a.runtime, prompt = opts.prompt, schema = opts.schema, timeout_ms = opts.timeout_ms, cwd = a.cwd,
    instructions = a.instructions, resume = not a.fork_from and a.session or nil, fork = a.fork_from,
  }
  if started.interrupted then return { outcome = { answered = false, reason = "interrupted" } } end
  if started.failed then return { outcome = { answered = false, reason = "failed", error = started.failed } } end
  local answered, value = false, nil
  local ended
  local running = {} -- the futures of this turn's calls
  while true do
    local okw, d = pcall(a.hook.await, a.hook)
    if not okw then
      -- The run is cancelled: the harness is stopped; what the agent
      -- recorded is kept, and the body goes on to its cleanup.
      stop_step(a.token, n)
      for _, sig in pairs(a.calls) do engine.abort(sig, "cancelled") end
      if errors.is(d, "Cancelled") then return { outcome = { answered = false, reason = "cancelled" } } end
      error(d, 0)
    end
    if type(d) == "table" and d.turn == n then
      if d.call ~= nil then
        running[#running + 1] = flow.async(run_call, a, n, d.call)
      elseif d.abort ~= nil then
        local sig = a.calls[d.abort]
        if sig then engine.abort(sig, "the call's time is up") end
      elseif d.answer ~= nil then
        answered, value = true, d.answer
        if value == json.null then value = nil end
      elseif d.waiting ~= nil then
        a.waiting = d.waiting
      elseif d.ended ~= nil then
        ended = d.ended
        break
      end
    end
  end
  for _, sig in pairs(a.calls) do engine.abort(sig, "the turn ended") end -- (seed 001: call.signal)
  -- What the agent recorded is kept however the turn ended: a handler still
  -- running (its signal now aborted) gets the grace to finish first.
  local pending = {}
  for _, f in ipairs(running) do if f.done == false then pending[#pending + 1] = f end end
  if #pending > 0 then
    local all = flow.async(function() for _, f in ipairs(pending) do pcall(flow.await, f) end end)
    pcall(flow.race, { all, flow.timer(teach.LIMITS.grace_seconds * 1000) })
  end
  ended = ended or {}
  if type(ended.session) == "string" then
    a.session = ended.session
    a.fork_from = nil
  end
  if answered then return { outcome = { answered = true, value = value } } end
  local reason = ended.reason
  if reason == "answered" then reason = "unanswered" end
  return { outcome = { answered = false, reason = reason, error = ended.error } }
end

local function not_in_turn(a, what)
  if a.in_turn then
    error(fmt("%s:%s(): %s is working on a turn (one of its tools' handlers is running, or a branch gave it "
      .. "one): run, fork and close wait until the turn is over; run another agent instead", a.key, what, a.key), 3)
  end
  if a.closed then error(fmt("%s:%s(): the agent is closed; open it again", a.key, what), 3) end
end

--- agent:run{ prompt, schema?, timeout? } -> { outcome }. timeout: the
-- turn's deadline ("20m"; 30 minutes unless given).
function Agent:run(opts)
  need_body(self.key .. ":run")
  not_in_turn(self, "run")
  if type(opts) ~= "table" or type(opts.prompt) ~= "string" or opts.prompt == "" then
    error(self.key .. ":run needs { prompt = '...' }", 2)
  end
  for k in pairs(opts) do
    if k ~= "prompt" and k ~= "schema" and k ~= "timeout" then
      error(fmt("%s:run: unknown field '%s' (prompt, schema, timeout)", self.key, tostring(k)), 2)
    end
  end
  if opts.schema ~= nil then
    local okc, cerr = schema.check(opts.schema)
    if type(opts.schema) ~= "table" or not okc then
      error(self.key .. ":run: schema is not a schema moor understands: " .. tostring(cerr), 2)
    end
  end
  local timeout_ms = conf.HARNESS_TURN_TIMEOUT
  if opts.timeout ~= nil then
    local ms, derr = duration.parse(opts.timeout)
    if not ms then error(self.key .. ":run: timeout: " .. tostring(derr), 2) end
    timeout_ms = ms
  end
  -- A handler may run another agent: that agent's waits are its own.
  local refused = engine.waits_refused()
  engine.refuse_waits(false)
  self.in_turn = true
  local ok, res = pcall(turn, self, { prompt = opts.prompt, schema = opts.schema, timeout_ms = timeout_ms })
  self.in_turn = false
  engine.refuse_waits(refused or false)
  if not ok then error(res, 0) end
  return res
end

--- agent:fork{ key, tools? } -> a new agent that continues this one's
-- conversation (the harness's own resume/fork), with this one's tools
-- unless given its own (tools = {} gives none).
function Agent:fork(spec)
  need_body(self.key .. ":fork")
  not_in_turn(self, "fork")
  if type(spec) ~= "table" then error(self.key .. ":fork needs { key, tools? }", 2) end
  check_key(spec.key, self.key .. ":fork")
  if not self.session then
    error(fmt("%s:fork(): %s has no conversation to fork yet (its harness named no session): give it a turn first",
      self.key, self.key), 2)
  end
  local st, r = run_state()
  if st.agents[spec.key] then error(fmt("%s:fork(): an agent with key %s is open already", self.key, spec.key), 2) end
  local list, handlers = self.list, {}
  if spec.tools ~= nil then
    list, handlers = check_tools(spec.tools, 2)
  else
    for k, v in pairs(self.handlers) do handlers[k] = v end
  end
  local a = new_agent(st, r, spec.key, self.runtime, list, handlers, self)
  a.fork_from = self.session
  return a
end

--- agent:close(): its launcher and socket go; a later open of its key
-- starts a new agent.
function Agent:close()
  need_body(self.key .. ":close")
  not_in_turn(self, "close")
  close_step(self.token)
  self.closed = true
  local st = run_state()
  if st.agents[self.key] == self then st.agents[self.key] = nil end
end

return M
