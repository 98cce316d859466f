--- moor.harness.runtime: how each harness is started for a turn, and what
-- moor reads from its standard output (issue 11). Pure: it builds argv, env
-- and the text for standard input, and folds output lines into a state.
--
--   "claude"   Claude Code, non-interactive: claude -p --output-format
--              stream-json --verbose, the prompt on stdin; --resume <id> for
--              the agent's next turns, --resume <id> --fork-session for a fork;
--              the launcher allowed as a Bash command (--allowedTools).
--   "codex"    Codex: codex exec --json ... - (the prompt on stdin); codex exec
--              ... resume <id> - / ... fork <id> - for later turns and forks;
--              -c sandbox_workspace_write.network_access=true so its
--              workspace-write sandbox lets the launcher reach its socket.
--   { command = { prog, args... } }
--              any program: the prompt on stdin; $MOOR_HARNESS_RESUME or
--              $MOOR_HARNESS_FORK name the session to continue, and a stdout
--              line {"session_id": "..."} names the session it holds.
-- Each finds its program on PATH, or through $MOOR_CLAUDE / $MOOR_CODEX; it
-- runs with the host's environment (the user's own configuration and keys),
-- plus $MOOR_WFA, the launcher's path.
local json = require "moor.json"

local type, ipairs, getenv = type, ipairs, os.getenv

local M = {}

--- Check a runtime as moor.harness.open is given it: nil, or a message.
function M.check(rt)
  if rt == "claude" or rt == "codex" then return nil end
  if type(rt) == "table" and type(rt.command) == "table" and #rt.command >= 1 then
    for i, a in ipairs(rt.command) do
      if type(a) ~= "string" or (i == 1 and a == "") then
        return ("runtime.command[%d] must be a non-empty string"):format(i)
      end
    end
    for k in pairs(rt) do
      if k ~= "command" then return ("runtime has an unknown field '%s' (only command)"):format(tostring(k)) end
    end
    return nil
  end
  return 'runtime must be "claude", "codex" or { command = { "prog", "arg", ... } }'
end

--- The name a runtime is known by (for messages and `wfa tool`).
function M.name(rt)
  if type(rt) == "string" then return rt end
  return "command"
end

local function push(t, ...)
  for _, v in ipairs { ... } do t[#t + 1] = v end
end

--- How to start one turn. t: { prompt, instructions?, resume?, fork?,
-- launcher }. Returns { argv, env, stdin }.
function M.command(rt, t)
  local env = { MOOR_WFA = t.launcher }
  local argv
  local prompt = t.prompt
  if rt == "claude" then
    argv = { getenv("MOOR_CLAUDE") or "claude", "-p", "--output-format", "stream-json", "--verbose",
      "--allowedTools", "Bash(" .. t.launcher .. ":*)" }
    if t.instructions then push(argv, "--append-system-prompt", t.instructions) end
    if t.fork then
      push(argv, "--resume", t.fork, "--fork-session")
    elseif t.resume then
      push(argv, "--resume", t.resume)
    end
  elseif rt == "codex" then
    -- (exec's options before its subcommand: codex exec resume refuses --sandbox after it)
    argv = { getenv("MOOR_CODEX") or "codex", "exec", "--json", "--skip-git-repo-check", "--sandbox",
      "workspace-write", "-c", "sandbox_workspace_write.network_access=true" }
    if t.fork then
      push(argv, "fork", t.fork)
    elseif t.resume then
      push(argv, "resume", t.resume)
    end
    push(argv, "-")
    if t.instructions and not (t.resume or t.fork) then prompt = t.instructions .. "\n\n" .. prompt end
  else
    argv = {}
    for i, a in ipairs(rt.command) do argv[i] = a end
    if t.fork then env.MOOR_HARNESS_FORK = t.fork elseif t.resume then env.MOOR_HARNESS_RESUME = t.resume end
    env.MOOR_HARNESS_RESUME = env.MOOR_HARNESS_RESUME or false
    env.MOOR_HARNESS_FORK = env.MOOR_HARNESS_FORK or false
    if t.instructions and not (t.resume or t.fork) then prompt = t.instructions .. "\n\n" .. prompt end
  end
  return { argv = argv, env = env, stdin = prompt }
end

--- Fold one line of the harness's standard output into state: the session
-- it holds (state.session) and its last message (state.final). Lines that
-- are not JSON objects are ignored.
-- (Both go in the turn's last delivery, which must fit or the turn would
-- never end: a session id over SESSION_MAX bytes is not one; the last message
-- is kept to its first FINAL_MAX bytes.)
local SESSION_MAX, FINAL_MAX = 1024, 64 * 1024
M.SESSION_MAX, M.FINAL_MAX = SESSION_MAX, FINAL_MAX

local function session(state, id)
  if type(id) == "string" and id ~= "" and #id <= SESSION_MAX then state.session = id end
end

local function final(state, text)
  if #text > FINAL_MAX then
    local cut = FINAL_MAX -- (not inside a UTF-8 sequence)
    while cut > 0 and (text:byte(cut + 1) or 0) >= 0x80 and text:byte(cut + 1) < 0xC0 do cut = cut - 1 end
    text = text:sub(1, cut)
  end
  state.final = text
end

function M.read_line(state, line)
  if line:sub(1, 1) ~= "{" then return end
  local v = json.decode(line)
  if type(v) ~= "table" then return end
  session(state, v.session_id)
  if v.type == "thread.started" then session(state, v.thread_id) end
  if v.type == "result" and type(v.result) == "string" then final(state, v.result) end
  local item = v.item
  if v.type == "item.completed" and type(item) == "table" and item.type == "agent_message"
      and type(item.text) == "string" then
    final(state, item.text)
  end
end

return M
