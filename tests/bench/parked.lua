-- Parked-runs benchmark (issue 13: "1,000,000 runs parked on sleeps and
-- questions in under 1 GiB RSS, with new 1-step runs still answering in under
-- 1 ms median / 10 ms p99 while they are parked"). Figures, not pass/fail.
-- Run with moor.core as a module of the stock lua5.4 (`make bench` runs it with PARKED=100000 runs):
--   MOOR_DB=/tmp/p.db lua5.4 -e "package.cpath='build/lua/?.so;'..package.cpath;
--     package.path='lua/?.lua;lua/?/init.lua;'..package.path" tests/bench/parked.lua [N]
-- N runs (default 1,000,000; half sleep for a day, half wait on a question)
-- are started and parked; the engine's defaults evict them (MAX_PARKED_LIVE:
-- beyond 10,000 in memory the least recently active go). Then 1,000 new
-- 1-step runs are timed, start to result, while the N are parked. Prints
-- progress, then RSS, bytes per parked run, median and p99. The database is
-- made afresh; run the script three times for min-max figures.
local moor = require "moor"
local core = require "moor.core"
local engine = require "moor.engine"
local s = moor.schema

local N = math.tointeger(tonumber(arg and arg[1] or "")) or 1000000
local LAT_RUNS = 1000
local BATCH = 1000

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
print(("parked runs: %d parked in %.0f s (%d in memory, %d evicted): RSS %.0f MiB (%.0f bytes per parked run); "
  .. "1-step run while parked: median %.0f us, p99 %.0f us, max %.0f us (%d runs)"):format(N, park_s, st.runs,
  st.evicted, rss / 1024, (rss - rss0) * 1024 / N, pct(lat, 0.5), pct(lat, 0.99), lat[#lat], LAT_RUNS))
