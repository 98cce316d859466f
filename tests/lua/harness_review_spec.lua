-- Harness agents (issue 11) with real processes: what a review of the host's
-- side found. A turn's end leaves no process of its harness running (one the
-- harness left in the background, holding its stdout, included); a turn a
-- restart cut has its whole process group killed even when its leader is
-- already gone; a turn always ends, whatever its harness printed.
local moor = require "moor"
local core = require "moor.core"
local store = require "moor.store"
local host = require "moor.harness.host"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local n = 0
local function workflow(fn)
  n = n + 1
  local name = "harness_review_spec_" .. n
  support.register(name, moor.defineWorkflowTool { description = "A spec's workflow.", inputSchema = s.object {},
    execute = fn })
  return name
end

local function capture(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local out = f:read("a")
  f:close()
  return out
end

local function wait_until(pred, ms)
  local deadline = core.mono() + (ms or 5000) * 1000
  local v = pred()
  while not v and core.mono() < deadline do
    core.wait(10)
    v = pred()
  end
  return v
end

local function alive(pid) return core.pid_start(pid) ~= nil end

describe("harness agents with real processes", function()
  local tmp
  before_each(function() tmp = capture("mktemp -d"):gsub("%s+$", "") end)
  after_each(function()
    if tmp and tmp:match("^/tmp/") then os.execute("rm -rf '" .. tmp .. "'") end
  end)

  it("a turn's process is recorded while it runs (what a restart ends as interrupted), and only then", function()
    local name = workflow(function()
      local a = moor.harness.open { key = "rec", runtime = { command = { "sh", "-c", "cat > /dev/null; sleep 1" } } }
      return a:run { prompt = "go", timeout = "10s" }.outcome
    end)
    local id = assert(t.start(name, {}))
    local function rows()
      local l = {}
      for _, r in ipairs(assert(store.harness_turns())) do
        if r.token:find("-" .. id .. "-rec-", 1, true) then l[#l + 1] = r end
      end
      return l
    end
    local seen = wait_until(function()
      t.drive(id, 0)
      return #rows() == 1 and rows()[1]
    end, 5000)
    assert.is_table(seen, "no row for the live turn")
    assert.are.equal(1, seen.turn)
    assert.is_truthy(core.pid_start(seen.pid))
    assert.are.equal(core.pid_start(seen.pid), seen.pstart)
    wait_until(function() return t.drive(id, 0) ~= "running" end, 8000)
    local v = t.outcome(id)
    assert.are.equal("unanswered", v.reason)
    assert.are.same({}, rows())
  end)

  it("a turn that ends leaves no process of its harness running, one holding its stdout included", function()
    local pidfile = tmp .. "/pid"
    -- The harness exits at once; what it left in the background keeps its stdout open.
    local script = "sleep 30 & echo $! > '" .. pidfile .. "'; exit 0"
    local name = workflow(function()
      local a = moor.harness.open { key = "a", runtime = { command = { "sh", "-c", script } } }
      return a:run { prompt = "go", timeout = "1s" }.outcome
    end)
    local v, err = t.call(name, {})
    assert.is_nil(err)
    assert.is_false(v.answered)
    local pid = assert(math.tointeger(tonumber(read_file(pidfile))))
    local gone = wait_until(function() return not alive(pid) end, 2000)
    if not gone then core.kill_group(pid, 9) end
    assert.is_true(gone, "the harness's background process outlived its turn")
  end)

  it("a turn a restart cut has its process group killed, even when its leader has exited", function()
    local pidfile = tmp .. "/pid"
    local done = false
    local p = assert(core.spawn {
      argv = { "sh", "-c", "sleep 30 > /dev/null 2>&1 & echo $! > '" .. pidfile .. "'; exit 0" },
      on_exit = function() done = true end,
    })
    local leader = p:pid()
    local pstart = core.pid_start(leader)
    assert(wait_until(function() return done end), "the leader did not exit")
    local pid = assert(math.tointeger(tonumber(read_file(pidfile))))
    assert.is_true(alive(pid))
    -- What a host killed with -9 leaves: the turn's row, its leader gone, a member of its group running.
    store.insert_harness_turn("harness-review-gone-a-1", 1, leader, pstart, "review-no-such-dir", core.now())
    assert.is_truthy(host.recover())
    local gone = wait_until(function() return not alive(pid) end, 2000)
    if not gone then core.kill_group(pid, 9) end
    assert.is_true(gone, "the group of a cut turn was left running")
  end)

  it("a turn ends however long the session and last message its harness printed", function()
    -- Two lines of the stream, each under the 1 MiB line limit: together over a delivery's size.
    local script = "printf '{\"session_id\":\"'; head -c 700000 /dev/zero | tr '\\0' s; printf '\"}\\n';"
      .. " printf '{\"type\":\"result\",\"result\":\"'; head -c 700000 /dev/zero | tr '\\0' r; printf '\"}\\n';"
      .. " exit 0"
    local name = workflow(function()
      local a = moor.harness.open { key = "a", runtime = { command = { "sh", "-c", script } } }
      return a:run { prompt = "go", timeout = "20s" }.outcome
    end)
    local id = assert(t.start(name, {}))
    local started = core.mono()
    local status = t.drive(id, 2000)
    while status == "running" and core.mono() - started < 8000000 do
      core.wait(50)
      status = t.drive(id, 2000)
    end
    local v, err = t.outcome(id)
    if status == "running" then t.cancel(id); t.drive(id) end
    assert.are.equal("completed", status)
    assert.is_nil(err)
    assert.are.equal("unanswered", v.reason)
  end)

  it("a run cancelled during a turn stops its harness and ends the turn as cancelled", function()
    local pidfile = tmp .. "/pid"
    local name = workflow(function()
      local a = moor.harness.open { key = "c", runtime = { command = { "sh", "-c",
        "echo $$ > '" .. pidfile .. "'; exec sleep 30" } } }
      local r = a:run { prompt = "go", timeout = "20s" }
      return r.outcome
    end)
    local id = assert(t.start(name, {}))
    assert(wait_until(function() t.drive(id, 0) return read_file(pidfile) end, 5000), "the harness did not start")
    local pid = assert(math.tointeger(tonumber(read_file(pidfile))))
    assert.is_true(alive(pid))
    assert.is_truthy(t.cancel(id))
    local status = wait_until(function()
      local st = t.drive(id, 0)
      return st ~= "running" and st
    end, 5000)
    local gone = wait_until(function() return not alive(pid) end, 2000)
    if not gone then core.kill_group(pid, 9) end
    assert.is_true(gone, "the harness outlived its cancelled run")
    assert.are.equal("cancelled", status)
  end)

  it("recovery at a second moor.resume() leaves the turns this process runs alone", function()
    local pidfile = tmp .. "/pid"
    local name = workflow(function()
      local a = moor.harness.open { key = "again", runtime = { command = { "sh", "-c",
        "cat > /dev/null; echo $$ > '" .. pidfile .. "'; sleep 1" } } }
      return a:run { prompt = "go", timeout = "10s" }.outcome
    end)
    local id = assert(t.start(name, {}))
    assert(wait_until(function() t.drive(id, 0) return read_file(pidfile) end, 5000), "the harness did not start")
    local pid = assert(math.tointeger(tonumber(read_file(pidfile))))
    assert.is_truthy(moor.resume())
    assert.is_true(alive(pid), "a live turn's harness was killed")
    wait_until(function() return t.drive(id, 0) ~= "running" end, 8000)
    local v = t.outcome(id)
    assert.are.equal("unanswered", v and v.reason)
  end)

  it("the socket answers connections over its limit at once: idle ones hold nothing", function()
    local UNIX_SEND = assert(os.getenv("MOOR_UNIX_SEND"), "MOOR_UNIX_SEND is not set (tests/CMakeLists.txt)")
    local sock = tmp .. "/s"
    local full = '{"v":1,"code":"too-many-connections","exit":7}'
    local requests = {}
    local server = assert(core.unix_listen { path = sock, max_connections = 2, full_response = full,
      on_request = function(id) requests[#requests + 1] = id end })
    for _ = 1, 2 do os.execute("echo '{}' | '" .. UNIX_SEND .. "' '" .. sock .. "' > /dev/null 2>&1 &") end
    assert(wait_until(function() return #requests == 2 end), "the two held requests did not arrive")
    -- 40 connections that send nothing for 3 s (a slow or stuck client, or a flood)
    for i = 1, 40 do
      os.execute("sleep 3 | '" .. UNIX_SEND .. "' '" .. sock .. "' > '" .. tmp .. "/idle" .. i .. "' 2>&1 &")
    end
    wait_until(function() return false end, 1000) -- (the loop turns: they connect and are accepted)
    local count = server:count()
    local function all_answered()
      for i = 1, 40 do
        local out = read_file(tmp .. "/idle" .. i)
        if not out or out == "" then return false end
      end
      return true
    end
    wait_until(all_answered, 8000)
    for _, id in ipairs(requests) do core.unix_reply(id, '{"v":1,"code":"ok","exit":0}') end
    server:close()
    assert.are.equal(2, count, "connections open a second after 40 idle ones came")
    for i = 1, 40 do assert.are.equal(full .. "\n", read_file(tmp .. "/idle" .. i), "idle " .. i) end
  end)
end)
