-- fake_harness: a coding-agent harness of our own, for the end-to-end tests
-- of harness agents (issue 11): the `{ command = ... }` runtime
--
--   runtime = { command = { "lua5.4", "<src>/tests/fake/fake_harness.lua",
--                           "--script", "<file>", "--log", "<dir>" } }
--
-- (or $FAKE_HARNESS_SCRIPT and $FAKE_HARNESS_LOG). It reads its whole prompt
-- on standard input, finds the launcher's absolute path there (the prompt's
-- line `<path>/wfa tool <name> --<option> '<value>' ...`), and plays the
-- script: commands separated by lines that are exactly `%%`. Each command is
-- shell text in which `$WFA` (or `${WFA}`) stands for the launcher's path; the
-- path is put in literally, as an agent copies it from its prompt, and the
-- text is run by `/bin/sh -c` with standard input /dev/null (a heredoc in it
-- gives its own), as a real agent's shell runs it. A command that starts with
-- `@` is the harness's own (`${NAME}` in it is the environment variable's value):
--   @hang [SECONDS]       write <log>/pid (its own pid) and <log>/child (the
--                         pid of a child `sleep` it starts), then wait for
--                         that child: a harness stuck mid-turn (600 s at most)
--   @wait FILE [SECONDS]  wait until FILE exists (20 s at most by default)
--   @say TEXT             print TEXT as one line on standard output (such as
--                         {"session_id": "s-1"}, the session it holds)
--   @exit STATUS          exit at once with STATUS
-- Everything goes to the log directory: prompt (standard input as read),
-- launcher (the path found), for the n-th command n.cmd (as run), n.out,
-- n.err (its standard output and error, byte for byte), n.rc (its exit
-- status), and `log`, one line per command: "<n> <status>". Numbering goes on
-- from the commands already in the directory, so a second turn appends.
-- Exits 0 after the last command; 3 when the prompt names no launcher; 2 on
-- bad arguments.
local script_path, log_dir = os.getenv("FAKE_HARNESS_SCRIPT"), os.getenv("FAKE_HARNESS_LOG")
do
  local i = 1
  while arg[i] do
    if arg[i] == "--script" and arg[i + 1] then
      script_path, i = arg[i + 1], i + 2
    elseif arg[i] == "--log" and arg[i + 1] then
      log_dir, i = arg[i + 1], i + 2
    else
      io.stderr:write("fake_harness: unknown argument ", arg[i], "\n",
        "usage: fake_harness.lua --script FILE --log DIR\n")
      os.exit(2)
    end
  end
end
if not script_path or not log_dir then
  io.stderr:write("fake_harness: give --script FILE and --log DIR (or $FAKE_HARNESS_SCRIPT, $FAKE_HARNESS_LOG)\n")
  os.exit(2)
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function write(name, text)
  local tmp = log_dir .. "/." .. name .. ".tmp"
  local f = assert(io.open(tmp, "wb"))
  f:write(text)
  f:close()
  assert(os.rename(tmp, log_dir .. "/" .. name)) -- whole or not at all, for a test that polls
end

local function append(name, text)
  local f = assert(io.open(log_dir .. "/" .. name, "ab"))
  f:write(text)
  f:close()
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

os.execute("mkdir -p " .. quote(log_dir))

local prompt = io.stdin:read("a") or ""
write("prompt", prompt)
local launcher
for line in (prompt .. "\n"):gmatch("([^\n]*)\n") do
  launcher = line:match("^(/%S+/wfa) tool <name> %-%-<option> '<value>' %.%.%.$")
  if launcher then break end
end
if not launcher then
  io.stderr:write("fake_harness: the prompt names no launcher (no line '<path>/wfa tool <name> ...')\n")
  os.exit(3)
end
write("launcher", launcher .. "\n")

-- the commands of the script
local commands, cur = {}, {}
for line in (read(script_path) .. "\n"):gmatch("([^\n]*)\n") do
  if line == "%%" then
    commands[#commands + 1] = table.concat(cur, "\n")
    cur = {}
  else
    cur[#cur + 1] = line
  end
end
commands[#commands + 1] = table.concat(cur, "\n")

-- the next command's number: after those already logged
local n = 0
while exists(log_dir .. "/" .. (n + 1) .. ".cmd") do n = n + 1 end

local function own_pid()
  return (read("/proc/self/stat"):match("^(%d+)"))
end

local function sleep(seconds) os.execute("sleep " .. seconds) end

local function run(text)
  text = text:gsub("%$%{WFA%}", function() return launcher end)
    :gsub("%$WFA([^%w_])", function(c) return launcher .. c end)
    :gsub("%$WFA$", function() return launcher end)
  n = n + 1
  local base = log_dir .. "/" .. n
  write(n .. ".cmd", text .. "\n")
  -- `exec` first only sets where its output goes; the command itself runs
  -- as the agent wrote it, in one /bin/sh -c (os.execute is system(3)).
  local ok, how, status = os.execute("exec >" .. quote(base .. ".out") .. " 2>" .. quote(base .. ".err")
    .. " </dev/null\n" .. text .. "\n")
  if how == "signal" then status = 128 + status end
  if ok == true then status = 0 end
  write(n .. ".rc", status .. "\n")
  append("log", n .. " " .. status .. "\n")
end

for _, c in ipairs(commands) do
  local word, rest = c:match("^@(%a+)%s*(.-)%s*$")
  if word then rest = rest:gsub("%${([%w_]+)}", function(name) return os.getenv(name) or "" end) end
  if not word then
    if c:match("%S") then run(c) end
  elseif word == "hang" then
    local secs = math.min(tonumber(rest) or 600, 600)
    -- the child is this process's own (sh replaced by sleep), in its group
    local p = assert(io.popen("echo $$; exec sleep " .. secs .. " 2>/dev/null", "r"))
    local child = p:read("l")
    write("child", child .. "\n")
    write("pid", own_pid() .. "\n")
    p:read("a") -- until the sleep ends (or this process is killed)
    p:close()
  elseif word == "wait" then
    local file, secs = rest:match("^(%S+)%s*(%d*)$")
    local tries = (tonumber(secs) or 20) * 10
    for _ = 1, tries do
      if exists(file) then break end
      sleep(0.1)
    end
  elseif word == "say" then
    io.stdout:write(rest, "\n")
    io.stdout:flush()
  elseif word == "exit" then
    os.exit(tonumber(rest) or 0)
  else
    io.stderr:write("fake_harness: unknown directive @", word, "\n")
    os.exit(2)
  end
end
write("done", n .. "\n")
os.exit(0)
