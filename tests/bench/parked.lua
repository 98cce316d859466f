-- Parked-runs benchmark (issue 13: "1,000,000 runs parked on sleeps and
-- questions in under 1 GiB RSS, with new 1-step runs still answering in under
-- 1 ms median / 10 ms p99 while they are parked"). Figures, not pass/fail.
-- Run with moor.core as a module of the stock lua5.4 (`make bench` runs it with PARKED=100000 runs):
--   MOOR_DB=/tmp/p.db lua5.4 -e "package.cpath='build/lua/?.so;'..package.cpath;
--     package.path='lua/?.lua;lua/?/init.lua;'..package.path" tests/bench/parked.lua [N [ROUNDS]]
-- N runs (default 1,000,000; half sleep for a day, half wait on a question)
-- are started and parked; the engine's defaults evict them (MAX_PARKED_LIVE:
-- beyond 10,000 in memory the least recently active go). Then 1,000 new
-- 1-step runs are timed, start to result, while the N are parked. Prints
-- progress, then RSS, bytes per parked run, median and p99. ROUNDS rounds
-- (default 3), each in a fresh process (this script again, with the same
-- interpreter and options) on a fresh database, each round's line, then
-- min-max over the rounds. (100,000 runs: about 30 s a round here.)
local N = math.tointeger(tonumber(arg and arg[1] or "")) or 1000000
local ROUNDS = 3 -- (nil: "round", one round in this process)
if arg and arg[2] == "round" then
  ROUNDS = nil
elseif arg and arg[2] then
  ROUNDS = math.tointeger(tonumber(arg[2]))
  if not ROUNDS or ROUNDS < 1 then error("parked.lua: ROUNDS must be a whole number of 1 or more, not " .. arg[2]) end
end
local LAT_RUNS = 1000
local BATCH = 1000

local KEYS = { "park_s", "runs", "evicted", "rss_mib", "bytes", "median", "p99", "max" }

-- The figures line; fig(key) formats one figure.
local function line(label, fig, note)
  return (label .. ": %d parked in %s s (%s in memory, %s evicted): RSS %s MiB (%s bytes per parked run); "
    .. "1-step run while parked: median %s us, p99 %s us, max %s us (%d runs%s)"):format(N, fig("park_s"),
    fig("runs"), fig("evicted"), fig("rss_mib"), fig("bytes"), fig("median"), fig("p99"), fig("max"), LAT_RUNS,
    note or "")
end

-- ROUNDS rounds, each this script again in a fresh process: the interpreter
-- and its options as this one was started (arg[-k] .. arg[0]), N, "round".
-- This process only drives them and never requires moor (that takes
-- $MOOR_DB, which each round's process makes afresh).
if ROUNDS then
  local function quote(a) return "'" .. a:gsub("'", "'\\''") .. "'" end
  local cmd = {}
  local first = 0
  while arg[first - 1] do first = first - 1 end
  for a = first, 0 do cmd[#cmd + 1] = quote(arg[a]) end
  cmd[#cmd + 1] = quote(tostring(N)) .. " round"
  cmd = table.concat(cmd, " ")
  local lo, hi = {}, {}
  for r = 1, ROUNDS do
    local p = assert(io.popen(cmd))
    local got
    for l in p:lines() do
      local kv = l:match("^=figures (.*)")
      if kv then
        got = {}
        for key, v in kv:gmatch("([%w_]+)=(%S+)") do got[key] = tonumber(v) end
      else
        print((l:gsub("^  round", "  round " .. r)))
        io.stdout:flush()
      end
    end
    assert(p:close() and got, "parked.lua: round " .. r .. " failed")
    for _, key in ipairs(KEYS) do
      lo[key] = math.min(lo[key] or math.huge, got[key])
      hi[key] = math.max(hi[key] or -math.huge, got[key])
    end
  end
  print(line("parked runs", function(key)
    local a, b = ("%.0f"):format(lo[key]), ("%.0f"):format(hi[key])
    return a == b and a or a .. "-" .. b
  end, ("; min-max over %d rounds; target: median < 1000, p99 < 10000"):format(ROUNDS)))
  return
end

local moor = require "moor"
local core = require "moor.core"
local engine = require "moor.engine"
local s = moor.schema

local function rss_kib()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local text = f:read("a")
  f:close()
  return tonumber(text:match("VmRSS:%s*(%d+)")) or 0
end

local one = moor.step("one", function(x) return x + 1 end)
moor.register("bench_sleeper", moor.defineWorkflowTool { description = "sleeps a day", inputSchema = s.object {},
  execute = function() moor.sleep("24h"); return true end })
moor.register("bench_asker", moor.defineWorkflowTool { description = "asks", inputSchema = s.object {},
  execute = function(_, ctx) return ctx.ask { prompt = "ok?", options = { { id = "y", label = "Yes" } } } end })
moor.register("bench_one", moor.defineWorkflowTool { description = "one step", inputSchema = s.object {},
  execute = function() return one(1) end })

local function drain() -- (until nothing is due now)
  for _ = 1, 100000 do
    local due = engine.tick()
    if not due or due > 0 then return end
  end
end

local function pct(sorted, p)
  return sorted[math.max(1, math.ceil(#sorted * p))]
end

-- One round in this process: N runs parked, then the 1-step runs timed.
local function round()
  local db = os.getenv("MOOR_DB") or "/tmp/moor-bench-parked.db"
  for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(db .. suffix) end -- (opened at the first call)
  collectgarbage()
  local rss0 = rss_kib()
  local t0 = core.mono()
  local i = 0
  while i < N do
    for _ = 1, math.min(BATCH, N - i) do
      i = i + 1
      assert(moor.call(i % 2 == 0 and "bench_sleeper" or "bench_asker", {}))
    end
    drain()
    if i % 50000 == 0 or i == N then
      local st = engine.stats()
      io.stderr:write(("  %d parked, %d in memory, %d evicted, RSS %.0f MiB, %.1f s\n"):format(i, st.runs,
        st.evicted, rss_kib() / 1024, (core.mono() - t0) / 1e6))
    end
  end
  drain()
  collectgarbage()
  collectgarbage()
  local rss = rss_kib()
  local st = engine.stats()
  local park_s = (core.mono() - t0) / 1e6
  -- New 1-step runs while the N are parked: start to result.
  local lat = {}
  for k = 1, LAT_RUNS do
    local a = core.mono()
    local id = assert(moor.call("bench_one", {}))
    for _ = 1, 1000 do
      engine.tick()
      if engine.run_status(id) ~= "running" then break end
    end
    lat[k] = core.mono() - a
    if lat[k] > 100000 then io.stderr:write(("  run %d took %.0f ms\n"):format(k, lat[k] / 1000)) end
    assert(engine.run_status(id) == "completed")
  end
table.sort(lat)
  return { park_s = park_s, runs = st.runs, evicted = st.evicted, rss_mib = rss / 1024,
    bytes = (rss - rss0) * 1024 / N, median = pct(lat, 0.5), p99 = pct(lat, 0.99), max = lat[#lat] }
end

-- One round here ("round"): its line, and its figures for the process that started it.
local f = round()
print(line("  round", function(key) return ("%.0f"):format(f[key]) end))
local kv = {}
for _, key in ipairs(KEYS) do kv[#kv + 1] = ("%s=%.17g"):format(key, f[key]) end
print("=figures " .. table.concat(kv, " "))

