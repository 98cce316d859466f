--- moor.harness.host: the host's side of harness agents (issue 11, seed 001).
-- Per agent a directory with an unguessable name, under a root that can be
-- traversed but not listed (0300), holding the launcher `wfa` (0500) and the
-- agent's Unix socket (0600): the connection is the identity. Per turn the
-- harness process. The launcher's requests are checked here and delivered
-- into the workflow run (engine.deliver: recorded and committed before the
-- handler runs); the body answers them (M.reply, from its harness.reply
-- step). A call's and a turn's timers, and at start-up (M.recover) the turns a
-- restart cut: each ends as interrupted and its process group is killed.
--
-- Runs outside any body: from the socket's and the process's callbacks,
-- core.after timers, and the steps of moor.harness (start_turn, reply,
-- stop_turn, close_agent). moor.testing.workflow puts scripts in place of
-- processes (M.script): their turn.tool goes through the same checks.
local core = require "moor.core"
local json = require "moor.json"
local engine = require "moor.engine"
local store = require "moor.store"
local conf = require "moor.conf"
local schema = require "moor.schema"
local teach = require "moor.harness.teach"
local runtime = require "moor.harness.runtime"
local harness_dirs = require "moor.harness.dirs"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local encode, decode = json.encode, json.decode
local now_ms, after = core.now, core.after
local fmt, concat = string.format, table.concat

local M = {}

local remove_dir, write_launcher, dirs_root = harness_dirs.remove, harness_dirs.write_launcher, harness_dirs.root
M.new_dir_name, M.root = harness_dirs.new_name, harness_dirs.root

local agents = {}       -- hook token -> the live agent { token, key, run_id, dir, path, server, tools, turn }
local interrupted = {}  -- "token:n" -> true: turns a restart cut (M.recover), never started again
local dirs = {}         -- hook token -> directory name of every agent a run in memory opened (replays too)
local scripts = nil     -- agent key -> script, while moor.testing.workflow runs (M.script)

local L = teach.LIMITS

---------------------------------------------------------------------------
-- answers

-- A response: { code, exit, stdout?, stderr?, output?, error? }; a socket
-- connection (an integer) gets it as the wire's JSON line, a script's call
-- (a function) as it is.
local function respond(conn, res)
  if type(conn) == "function" then return conn(res) end
  local line = encode({ v = 1, code = res.code, exit = res.exit, stdout = res.stdout, stderr = res.stderr })
  if #line > L.response_bytes then
    line = encode({ v = 1, code = "failed", exit = teach.EXIT.failed,
      stderr = fmt("the result is over %d KiB once sent; return a summary or a path\n", L.response_bytes // 1024) })
  end
  return core.unix_reply(conn, line)
end

local function refusal(code, message)
  return { code = code, exit = teach.EXIT[code], stderr = code .. ": " .. message .. "\n", error = message }
end

local function refuse(conn, code, message) respond(conn, refusal(code, message)) end

local function ok(stdout, output) return { code = "ok", exit = 0, stdout = stdout, output = output } end

---------------------------------------------------------------------------
-- requests

local handle_request -- (below)

-- The agent's socket and launcher exist and are served (made again after a
-- restart, in the same directory). spec as start_turn's.
local function ensure_agent(spec)
  local a = agents[spec.token]
  if a and a.dir == spec.dir then
    a.tools = spec.tools
    return a
  end
  if a then M.close_agent(spec.token) end
  local r, rerr = M.root()
  if not r then return nil, rerr end
  a = { token = spec.token, key = spec.key, run_id = spec.run_id, dir = spec.dir, tools = spec.tools,
    path = r .. "/" .. spec.dir, calls = 0 }
  a.launcher = a.path .. "/wfa"
  if scripts and scripts[spec.key] ~= nil then
    agents[spec.token] = a
    return a
  end
  local okm, err, errno = core.mkdir(a.path, tonumber("700", 8))
  if not okm and errno ~= 17 then return nil, err end
  local names = {}
  for _, t in ipairs(spec.tools) do if t.json then names[#names + 1] = t.name end end
  os.remove(a.launcher)
  local okw, werr = write_launcher(a.launcher, a.path .. "/s", concat(names, " "))
  if not okw then remove_dir(a.path); return nil, "cannot write the launcher: " .. tostring(werr) end
  local server, serr = core.unix_listen {
    path = a.path .. "/s",
    max_connections = L.connections,
    max_request = L.value_bytes + 64 * 1024,
    lifetime_ms = L.connection_seconds * 1000,
    full_response = encode({ v = 1, code = "too-many-connections", exit = teach.EXIT["too-many-connections"],
      stderr = fmt("too-many-connections: over %d connections at once; nothing was done: call again\n",
        L.connections) }),
    on_request = function(conn, text) handle_request(a, conn, text) end,
  }
  if not server then remove_dir(a.path); return nil, "cannot open the agent's socket: " .. tostring(serr) end
  a.server = server
  agents[spec.token] = a
  return a
end

local function tool_of(a, name)
  for _, t in ipairs(a.tools) do if t.name == name then return t end end
end

local function tool_names(a)
  local l = {}
  for _, t in ipairs(a.tools) do l[#l + 1] = t.name end
  table.sort(l)
  return #l > 0 and concat(l, ", ") or "none"
end

--- Check a call's input as every call is checked (the launcher's and a
-- scripted turn.tool's). args: the flags (nil when input is given decoded);
-- stdin: its text or nil. Returns the input, or nil, code, message.
function M.check_input(t, args, stdin, input)
  if input == nil then
    if teach.takes_nothing(t.input) then
      if #args > 0 or (stdin and stdin ~= "") then
        return nil, "invalid-input", t.name .. " takes no input: call it by its name alone"
      end
      input = {}
    elseif t.json then
      if #args > 0 then
        return nil, "invalid-input", t.name .. " takes its input as JSON on standard input, not as options:"
          .. " send it with <<'WF_JSON', as the prompt shows"
      end
      if stdin == nil or stdin == "" then
        return nil, "invalid-input", t.name .. " takes its input as JSON on standard input: send it with"
          .. " <<'WF_JSON', as the prompt shows"
      end
      local v, err = decode(stdin)
      if err then return nil, "invalid-input", "standard input is not JSON: " .. err end
      input = v
    else
      local v, e = teach.parse_flags(t.input, args)
      if not v then return nil, "invalid-input", e.message end
      input = v
    end
  end
  if t.input then
    local okv, verr = schema.validate(t.input, input)
    if not okv then return nil, "invalid-input", verr end
  elseif type(input) ~= "table" or next(input) ~= nil then
    return nil, "invalid-input", t.name .. " takes no input: call it by its name alone"
  end
  return input
end

-- Whatever ends the call in flight: answer everyone waiting on it.
local function finish_call(turn, c, res)
  if turn.call ~= c then return end
  turn.call = nil
  for _, conn in ipairs(c.conns) do respond(conn, res) end
end

-- true, or nil, err and the agent's refusal (too large once recorded: bad-request; a full queue: busy)
local function deliver(a, payload)
  local kind, err = engine.deliver(a.token, payload)
  if kind then return true end
  if err and err.code == "bad_request" then
    return nil, err, "bad-request", "too large once recorded: " .. err.message
  end
  if err and err.code == "too_many_deliveries" then return nil, err, "busy", err.message end
  return nil, err, "outside-a-turn", "the workflow is no longer running this agent's turn"
end
M.deliver = deliver

-- A handler's budget: its tool's timeout (30 s unless set; false: none),
-- never past the turn's deadline. Then call.signal aborts (an abort
-- delivery), 5 s of grace, and the agent is told the call may have run.
local function arm_call_timer(a, turn, c, t)
  local left = turn.deadline - now_ms()
  local budget = t.timeout_ms
  if budget == nil then budget = L.handler_seconds * 1000 end
  if budget == false or budget > left then budget = left end
  if budget < 0 then budget = 0 end
  local grace = L.grace_seconds * 1000
  for _, conn in ipairs(c.conns) do
    if type(conn) ~= "function" then core.unix_hold(conn, budget + grace + 1000) end
  end
  c.hold = budget + grace + 1000
  after(budget, function()
    if turn.call ~= c then return end
    deliver(a, { turn = turn.n, abort = c.id })
    after(grace, function()
      finish_call(turn, c, refusal("timed-out", "the handler's time was up; the call may have run"))
    end)
  end)
end

--- A call of tool name by the agent a (the launcher's, or a script's:
-- conn is then a function given the response table).
local function call_tool(a, conn, name, args, stdin, input)
  local turn = a.turn
  if not turn or turn.answered or turn.ended then
    return refuse(conn, "outside-a-turn", "you are not working on a turn, or its answer was already accepted:"
      .. " a tool can be called only during a turn")
  end
  local t = tool_of(a, name)
  if not t then
    return refuse(conn, "unknown-tool", fmt("there is no tool named '%s'; your tools are %s", tostring(name),
      tool_names(a)))
  end
  local checked, code, message = M.check_input(t, args or {}, stdin, input)
  if checked == nil then return refuse(conn, code, message) end
  local key = name .. "\0" .. encode(checked)
  local c = turn.call
  if c then
    if c.key == key then -- the same call again while it runs (a harness that stopped waiting): its answer
      c.conns[#c.conns + 1] = conn
      if type(conn) ~= "function" then core.unix_hold(conn, c.hold) end
      return
    end
    return refuse(conn, "busy", "another call of yours is running (one call at a time): call again once it"
      .. " has answered")
  end
  a.calls = a.calls + 1
  -- <key>-<turn>-<n>, unique in the run: a key closed and opened again is
  -- <key>~<gen> ("~" is in no key), as its token counts them
  local gen = a.token:match("%-(%d+)$")
  local who = (gen and gen ~= "1") and (a.key .. "~" .. gen) or a.key
  c = { id = fmt("%s-%d-%d", who, turn.n, a.calls), key = key, tool = name, conns = { conn } }
  turn.call = c
  local okd, _, rcode, rmessage = deliver(a, { turn = turn.n, call = { id = c.id, tool = name, input = checked } })
  if not okd then
    turn.call = nil
    return refuse(conn, rcode, rmessage)
  end
  arm_call_timer(a, turn, c, t)
end

local function answer_turn(a, conn, value, given)
  local turn = a.turn
  if not turn or turn.answered or turn.ended then
    return refuse(conn, "outside-a-turn", "you are not working on a turn, or its answer was already accepted")
  end
  if turn.call then
    return refuse(conn, "busy", "a tool call of yours is running: answer once it has answered")
  end
  if not given then
    return refuse(conn, "invalid-answer", "give your answer: result '<your answer>'")
  end
  if turn.schema then
    local okv, verr = schema.validate(turn.schema, value, "answer")
    if not okv then
      return refuse(conn, "invalid-answer", verr .. "; fix it and answer again")
    end
  end
  local okd, _, rcode, rmessage = deliver(a, { turn = turn.n, answer = value == nil and json.null or value })
  if not okd then return refuse(conn, rcode, rmessage) end
  turn.answered = true
  respond(conn, ok("Your answer was accepted.\n", nil))
  -- The harness is expected to finish; past the grace it is stopped.
  after(conf.HARNESS_EXIT_GRACE, function()
    if a.turn == turn and not turn.ended then M.end_turn(a, turn, "answered") end
  end)
end

local REQUEST_FIELDS = { v = true, argv = true, stdin = true }
M.call_tool = call_tool

handle_request = function(a, conn, text)
  local req, derr = decode(text)
  if type(req) ~= "table" or json.isarray(req) then
    return refuse(conn, "bad-request", "the request is not a JSON object" .. (derr and (": " .. derr) or ""))
  end
  for k in pairs(req) do
    if not REQUEST_FIELDS[k] then return refuse(conn, "bad-request", "unknown field '" .. tostring(k) .. "'") end
  end
  if req.v ~= 1 then
    return refuse(conn, "bad-request", "this workflow speaks version 1 of the launcher's protocol, not "
      .. tostring(req.v))
  end
  local argv = req.argv
  if type(argv) ~= "table" or #argv == 0 then return refuse(conn, "bad-request", "argv must be a non-empty list") end
  for i, s in ipairs(argv) do
    if type(s) ~= "string" then return refuse(conn, "bad-request", fmt("argv[%d] is not a string", i)) end
  end
  local stdin = req.stdin
  if stdin ~= nil and type(stdin) ~= "string" then return refuse(conn, "bad-request", "stdin must be a string") end
  if stdin and #stdin > L.value_bytes then
    return refuse(conn, "bad-request", fmt("standard input is over %d MiB", L.value_bytes // (1024 * 1024)))
  end
  local cmd = argv[1]
  if cmd == "tool" then
    if #argv == 1 then return respond(conn, ok(teach.codes_text(), nil)) end
    local args = {}
    for i = 3, #argv do args[#args + 1] = argv[i] end
    for _, s in ipairs(args) do
      if #s > L.value_bytes then
        return refuse(conn, "bad-request", fmt("a value is over %d MiB", L.value_bytes // (1024 * 1024)))
      end
    end
    return call_tool(a, conn, argv[2], args, stdin, nil)
  elseif cmd == "result" then
    local raw = argv[2]
    if #argv > 2 then
      return refuse(conn, "invalid-answer", "give the answer as one value: result '<your answer>' (quote it)")
    end
    if raw == nil then raw = stdin end
    if raw == nil then return answer_turn(a, conn, nil, false) end
    local v, err = decode(raw)
    if err then v = raw end -- not JSON: the text itself
    return answer_turn(a, conn, v, true)
  elseif cmd == "waiting" then
    local turn = a.turn
    if not turn or turn.answered or turn.ended then
      return refuse(conn, "outside-a-turn", "you are not working on a turn")
    end
    if turn.call then return refuse(conn, "busy", "a tool call of yours is running: wait for its answer") end
    local reason = argv[2] == "--reason" and argv[3] or (argv[2] or ""):match("^%-%-reason=(.*)$")
    if not reason or #argv > 3 or #reason > 4096 then
      return refuse(conn, "bad-request", "say what you wait for, in at most 4096 bytes: waiting --reason '<what>'")
    end
    deliver(a, { turn = turn.n, waiting = reason })
    return respond(conn, ok("Noted.\n", nil))
  end
  return refuse(conn, "bad-request", fmt("unknown command '%s': use tool, result or waiting", tostring(cmd)))
end

---------------------------------------------------------------------------
-- turns

--- End a turn (the process exited, the deadline passed, the answer's grace
-- is over, the run stopped it): recorded as its last delivery; the process
-- group is killed; a call still waiting is told it may have run.
function M.end_turn(a, turn, reason, extra)
  if turn.ended then return end
  turn.ended = true
  if turn.live then engine.outside(-1, turn.run_id) end
  if a.turn == turn then a.turn = nil end
  -- (the whole group, even when its leader has exited: what it left in the
  -- background may hold its stdout, and on_exit waits for that)
  if turn.proc then turn.proc:kill("KILL") end
  if turn.row then store.delete_harness_turn(a.token, turn.n) end
  if turn.call then
    finish_call(turn, turn.call, refusal("timed-out", "the turn ended before the call answered; it may have run"))
  end
  if reason ~= nil then
    local ended = { reason = reason, session = turn.stream.session, final = turn.stream.final }
    for k, v in pairs(extra or {}) do ended[k] = v end
    deliver(a, { turn = turn.n, ended = ended })
  end
end

local function exited(a, turn, status, signal, tail)
  if turn.proc then turn.proc:kill("KILL") end -- (what it left running in its group)
  if turn.ended then
    if turn.row then store.delete_harness_turn(a.token, turn.n) end
    return
  end
  local reason, extra = "unanswered", nil
  if turn.answered then
    reason = "answered"
  elseif status ~= 0 or signal ~= 0 then
    reason = "failed"
    local why = signal ~= 0 and ("was killed by signal " .. signal) or ("exited with status " .. status)
    tail = tail and tail:gsub("%s+$", "") or ""
    extra = { error = "the harness " .. why .. (tail ~= "" and (": " .. tail:sub(-1000)) or "") }
  end
  M.end_turn(a, turn, reason, extra)
end

local run_script -- moor.harness.script's runner, while scripts are in place

--- Step harness.start: start turn n. spec: { token, key, run_id, dir, n,
-- tools = { { name, description, input, json, timeout_ms } }, runtime, prompt,
-- schema, timeout_ms, cwd, instructions, resume, fork }. Returns
-- { started = true } | { interrupted = true } | { failed = message }.
function M.start_turn(spec)
  local tk = spec.token .. ":" .. spec.n
  if interrupted[tk] then
    interrupted[tk] = nil
    return { interrupted = true }
  end
  if scripts and scripts[spec.key] == nil then -- (a test never runs a real harness, with the user's keys)
    return { failed = ("moor.testing.workflow has no script for agent '%s': give it in agents = { [%q] ="
      .. " t.answer(function(turn) ... end) }"):format(spec.key, spec.key) }
  end
  local a, err = ensure_agent(spec)
  if not a then return { failed = err } end
  if a.turn then M.end_turn(a, a.turn, nil) end
  -- The prompt ends with how to answer and the tools (seed 001 "What the agent runs").
  local prompt = spec.prompt .. "\n\n" .. teach.answer_block(a.launcher, spec.schema) .. "\n\n"
    .. assert(teach.prompt_block(a.launcher, spec.tools))
  local turn = { n = spec.n, schema = spec.schema, stream = {}, deadline = now_ms() + spec.timeout_ms,
    resume = spec.resume, fork = spec.fork }
  a.turn = turn
  turn.live = true
  turn.run_id = spec.run_id -- (its run is never evicted while the turn is under way)
  engine.outside(1, spec.run_id)
  local script = scripts and scripts[spec.key]
  if script ~= nil then
    after(0, function() run_script(a, turn, script, prompt) end)
  else
    local cmd = runtime.command(spec.runtime, { prompt = prompt, instructions = spec.instructions,
      resume = spec.resume, fork = spec.fork, launcher = a.launcher })
    local proc, perr = core.spawn {
      argv = cmd.argv, env = cmd.env, stdin = cmd.stdin, cwd = spec.cwd, shim = core.wfa_path(),
      on_line = function(line) runtime.read_line(turn.stream, line) end,
      on_exit = function(status, signal, tail) exited(a, turn, status, signal, tail) end,
    }
    if not proc then
      a.turn = nil
      turn.ended = true
      engine.outside(-1, spec.run_id)
      return { failed = ("cannot start the %s harness (%s): %s"):format(runtime.name(spec.runtime),
        tostring(cmd.argv[1]), tostring(perr)) }
    end
    turn.proc = proc
    local pid = proc:pid()
    -- (without its row a restart could not end the turn: the run would wait for it forever)
    local okr, rerr = store.insert_harness_turn(a.token, turn.n, pid, core.pid_start(pid), a.dir, now_ms())
    if not okr then
      M.end_turn(a, turn, nil)
      return { failed = "cannot record the turn's process: " .. tostring(rerr) }
    end
    turn.row = true
  end
  after(spec.timeout_ms, function()
    if a.turn == turn and not turn.ended then M.end_turn(a, turn, "timed-out") end
  end)
  return { started = true }
end

--- Step harness.reply: the body's answer to call id of turn n (payload
-- { id, output } or { id, error }), to everyone waiting on it (live only).
function M.reply(token, n, id, payload)
  local a = agents[token]
  local turn = a and a.turn
  local c = turn and turn.n == n and turn.call
  if not c or c.id ~= id then return end
  if payload.error ~= nil then
    finish_call(turn, c, { code = "failed", exit = teach.EXIT.failed, stderr = payload.error .. "\n",
      error = payload.error })
  else
    -- What the agent reads: a string as it is, any other JSON value as JSON, nothing as nothing.
    local out = payload.output
    local text = nil
    if type(out) == "string" then text = out elseif out ~= nil and out ~= json.null then text = encode(out) end
    finish_call(turn, c, ok(text, out))
  end
end

--- Step harness.stop: the run stops turn n (it was cancelled).
function M.stop_turn(token, n)
  local a = agents[token]
  if a and a.turn and a.turn.n == n then M.end_turn(a, a.turn, nil) end
  return true
end

--- An agent's body opened it (live or replayed): its directory is removed
-- when it is closed or its run ends, even if no turn of it runs again after
-- a restart (its launcher and a stale socket would be left).
function M.opened(token, dir) dirs[token] = dir end

--- The agent is closed (agent:close(), or its run ended): socket, launcher
-- and directory go.
function M.close_agent(token)
  local a = agents[token]
  local dir = dirs[token]
  dirs[token] = nil
  if not a then
    if dir and not scripts then
      local r = M.root()
      if r then remove_dir(r .. "/" .. dir) end
    end
    return true
  end
  agents[token] = nil
  if a.turn then M.end_turn(a, a.turn, nil) end
  if a.server then a.server:close() end
  if a.server or not (scripts and scripts[a.key] ~= nil) then remove_dir(a.path) end
  return true
end

engine.on_run_end(function(run_id)
  if next(dirs) == nil and next(agents) == nil then return end -- (no harness agent open: most runs)
  local prefix = "harness-" .. run_id .. "-"
  local mine = {}
  for token in pairs(agents) do
    if token:sub(1, #prefix) == prefix then mine[#mine + 1] = token end
  end
  for token in pairs(dirs) do
    if token:sub(1, #prefix) == prefix and not agents[token] then mine[#mine + 1] = token end
  end
  for _, token in ipairs(mine) do M.close_agent(token) end
end)

--- At start-up, before runs are loaded: every turn that had a live process
-- ends as interrupted (a delivery its run replays into), and what is left
-- of its process group is killed.
function M.recover()
  for _, row in ipairs(store.harness_turns() or {}) do
    local live = agents[row.token] and agents[row.token].turn
    if live and live.n == row.turn then goto continue end -- (this process runs it: a second moor.resume())
    interrupted[row.token .. ":" .. row.turn] = true
    -- Its group, when its leader is the process started then or is gone (what
    -- it started may live on); a pid naming another process is left alone.
    local started = row.pid > 1 and core.pid_start(row.pid)
    if row.pid > 1 and (started == nil or started == row.pstart) then core.kill_group(row.pid, 9) end
    store.delete_harness_turn(row.token, row.turn)
    engine.deliver(row.token, { turn = row.turn, ended = { reason = "interrupted" } })
    local r = dirs_root()
    if r then remove_dir(r .. "/" .. row.dir) end
    ::continue::
  end
  return engine.commit()
end

---------------------------------------------------------------------------
-- scripted agents (moor.testing.workflow, moor.harness.script)

--- Is a turn of some agent under way (a process or a script)?
function M.busy()
  for _, a in pairs(agents) do
    if a.turn and not a.turn.ended then return true end
  end
  return false
end

--- Put scripts in place of the harness for agents by key (nil: none);
-- runner(a, turn, script, prompt) plays one turn (moor.harness.script).
function M.script(by_key, runner) scripts, run_script = by_key, runner end

return M
