-- Sandbox benchmark (host/sandbox.c): figures, not pass/fail. Run by
-- `make bench` with moor.core as a module of the stock lua5.4:
--   MOOR_DB=/tmp/x.db lua5.4 -e "package.cpath='build/lua/?.so;'..package.cpath" tests/bench/sandbox.lua
local core = require "moor.core"

local function us() return core.mono() end

-- 1. A trivial program: open a sandbox, load, run to its result, free it.
local n = 10000
collectgarbage()
local t0 = us()
for _ = 1, n do
  local sb = core.sandbox_new()
  assert(sb:load("return 1 + 1", "bench"))
  local status, v = sb:run()
  assert(status == "done" and v == 2)
  sb:close()
end
local trivial = (us() - t0) / n

-- 2. 1,000 programs alive, each parked on a ctx.agent call.
collectgarbage()
collectgarbage()
local base, base_host = core.sandbox_stats().bytes, collectgarbage("count")
local parked = {}
for i = 1, 1000 do
  local sb = core.sandbox_new()
  assert(sb:load("local r = ctx.agent('helper', { message = 'task " .. i .. "' }) return r", "bench"))
  assert(sb:run() == "calls")
  parked[i] = sb
end
collectgarbage()
local per = (core.sandbox_stats().bytes - base) / 1000 / 1024
local per_host = (collectgarbage("count") - base_host) / 1000
t0 = us()
for i = 1, 1000 do
  local status = parked[i]:resume { [1] = { ok = true, value = "done" } }
  assert(status == "done")
end
local resume = (us() - t0) / 1000
parked = nil -- luacheck: ignore parked
collectgarbage()

-- 3. One program making 10,000 ctx.agent calls one after another, each
-- answered at once: the host round trip per call (no subagent).
local sb = core.sandbox_new()
assert(sb:load("local s = 0 for i = 1, 10000 do s = s + ctx.agent('count', { message = 'x' }) end return s", "bench"))
t0 = us()
local status, calls = sb:run()
while status == "calls" do
  status, calls = sb:resume { [calls[1].id] = { ok = true, value = 1 } }
end
assert(status == "done" and calls == 10000)
local per_call = (us() - t0) / 10000

print(("sandbox: trivial program, open to result:   %8.1f us      (target <= 50)"):format(trivial))
print(("sandbox: 1,000 parked on ctx.agent:         %8.1f KiB/program in the sandbox (target <= 64), " ..
  "%.1f KiB host-side"):format(per, per_host))
print(("sandbox: resuming a parked program to done: %8.1f us"):format(resume))
print(("sandbox: ctx.agent round trip, no subagent: %8.1f us/call"):format(per_call))
