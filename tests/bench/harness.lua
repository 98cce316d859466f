-- Harness agents' launcher benchmark (issue 11): figures, not pass/fail.
--   lua5.4 tests/bench/harness.lua MOOR [N]      (`make bench`: build/moor, N = 1000)
-- `moor call` runs tests/bench/harness_agent's workflow: one agent whose
-- harness is the fake harness (tests/fake/fake_harness.lua) and whose one
-- tool's handler does nothing. Its script, one bash command, calls
-- `wfa tool noop` 50 times to warm up, then N times, one after another,
-- reading bash's $EPOCHREALTIME just before each launcher process starts and
-- just after it exited with its output: each call's round trip is launcher
-- start (/bin/sh running the wfa file, exec of moor-wfa) -> connect -> the
-- request recorded (a committed delivery) -> the handler -> its reply
-- recorded (a step) -> the response written -> the launcher's exit.
local moor_bin, n = arg[1], math.tointeger(tonumber(arg[2] or "1000"))
if not moor_bin or not n or n < 10 then
  io.stderr:write("usage: lua5.4 tests/bench/harness.lua MOOR [N >= 10]\n")
  os.exit(2)
end

local function sh(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  local ok = p:close()
  return ok and out or nil, out
end

local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
local src = assert(sh("cd " .. here .. "/../.. && pwd")):gsub("\n$", "")
local dir = assert(sh("mktemp -d /tmp/moor-harness-bench.XXXXXX")):gsub("\n$", "")
local script, log = dir .. "/script.txt", dir .. "/log"

local f = assert(io.open(script, "w"))
-- (then the baseline: a copy of the launcher whose socket is not there,
-- which exits 9 at its connect: the cost of starting and ending it alone)
f:write(([[bash -c 'for i in $(seq 1 50); do $WFA tool noop >/dev/null || exit 1; done
for i in $(seq 1 %d); do s=$EPOCHREALTIME; $WFA tool noop >/dev/null || exit 1; e=$EPOCHREALTIME; echo "$s $e"; done'
%%%%
sed "s|'[^']*/s'|'/nonexistent/s'|" $WFA >%s/nowhere && chmod 700 %s/nowhere && bash -c 'for i in $(seq 1 %d); do
s=$EPOCHREALTIME; %s/nowhere tool noop 2>/dev/null; [ $? = 9 ] || exit 1; e=$EPOCHREALTIME; echo "$s $e"; done'
%%%%
$WFA result 'done'
]]):format(n, dir, dir, n, dir))
f:close()

local input = ('{"fake": "%s/tests/fake/fake_harness.lua", "script": "%s", "log": "%s"}'):format(src, script, log)
local out, err = sh(("'%s' call harness_bench '%s' --agent '%s/tests/bench/harness_agent' --db '%s/bench.db' "
  .. "</dev/null 2>&1"):format(moor_bin, input, src, dir))
if not out or not out:find('"answered":true', 1, true) then
  io.stderr:write("harness bench: the run failed: ", tostring(out or err), "\n")
  os.exit(1)
end
for k = 1, 2 do
  local rc = assert(io.open(log .. "/" .. k .. ".rc")):read("l")
  if rc ~= "0" then
    local e = assert(io.open(log .. "/" .. k .. ".err")):read("a")
    io.stderr:write("harness bench: a launcher call failed: ", e, "\n")
    os.exit(1)
  end
end

-- the timings of command k: sorted round trips (us), and calls per second
local function timings(k)
  local times, first, last = {}, nil, nil
  for line in io.lines(log .. "/" .. k .. ".out") do
    local s, e = line:match("^([%d.]+) ([%d.]+)$")
    s, e = tonumber(s), tonumber(e)
    times[#times + 1] = (e - s) * 1e6
    first = first or s
    last = e
  end
  assert(#times == n, "expected " .. n .. " timings, got " .. #times)
  table.sort(times)
  local function pct(p) return times[math.max(1, math.ceil(p * #times))] end
  return pct(0.5), pct(0.9), n / (last - first)
end
local med, p90, rate = timings(1)
local bmed, bp90 = timings(2)
os.execute("rm -rf '" .. dir .. "'")

print(("harness: launcher tool call round trip (handler does nothing), %d calls: median %6.0f us, p90 %6.0f us")
  :format(n, med, p90))
print(("harness: one agent calling sequentially:                      %6.0f calls/s"):format(rate))
print(("harness: the launcher alone (start, refused connect, exit):  median %6.0f us, p90 %6.0f us")
  :format(bmed, bp90))
