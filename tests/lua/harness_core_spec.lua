-- Specs for the C parts of harness agents (issue 11): core.spawn and its
-- process userdata, core.pid_start, core.kill_group (host/harness.c), the
-- per-agent Unix socket core.unix_listen / unix_reply / unix_hold, and the
-- real launcher moor-wfa (host/wfa.c) run through a generated `wfa` file,
-- as an agent's shell runs it. Runs inside the host (`moor test`); the build's
-- binaries come from tests/CMakeLists.txt as MOOR_WFA, MOOR_EPERM_EXEC,
-- MOOR_UNIX_SEND and MOOR_BIN.
local core = require "moor.core"

local WFA = os.getenv("MOOR_WFA") or core.wfa_path()
local EPERM_EXEC = os.getenv("MOOR_EPERM_EXEC")
local UNIX_SEND = os.getenv("MOOR_UNIX_SEND")
local MOOR_BIN = os.getenv("MOOR_BIN")

local FULL = '{"v":1,"code":"too-many-connections","exit":7,"stderr":"too-many-connections: call again\\n"}'

local function sh_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function write_file(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function capture(cmd)
  local p = assert(io.popen(cmd))
  local s = p:read("a")
  p:close()
  return s
end

local function tmpdir()
  local d = capture("mktemp -d"):gsub("%s+$", "")
  assert(d:match("^/"), "mktemp -d: " .. d)
  return d
end

local function rm_rf(dir)
  if dir and dir:match("^/tmp/") then os.execute("rm -rf " .. sh_quote(dir)) end
end

-- Drive the loop until pred() is true or ms have passed; pred()'s last value.
local function wait_until(pred, ms)
  local deadline = core.mono() + (ms or 5000) * 1000
  local v = pred()
  while not v and core.mono() < deadline do
    core.wait(10)
    v = pred()
  end
  return v
end

-- The `wfa` file moor writes per agent (mode 0500 in a 0700 directory).
local function make_wfa(dir, sock, json_tools)
  local path = dir .. "/wfa"
  write_file(path, ("#!/bin/sh\nexec %s %s %s \"$@\"\n"):format(sh_quote(WFA), sh_quote(sock),
    sh_quote(json_tools or "")))
  assert(os.execute("chmod 0500 " .. sh_quote(path)))
  return path
end

-- Run cmd (a shell command line) in the background, its stdout, stderr and
-- exit status to files; returns a function that is the result once it is in:
-- { out, err, rc } or nil.
local bg_n = 0
local function background(dir, cmd)
  bg_n = bg_n + 1
  local base = ("%s/bg%d"):format(dir, bg_n)
  local script = ("%s > %s.out 2> %s.err; echo $? > %s.rc.tmp; mv %s.rc.tmp %s.rc"):format(cmd,
    base, base, base, base, base)
  assert(os.execute("sh -c " .. sh_quote(script) .. " < /dev/null > /dev/null 2>&1 &"))
  return function()
    local rc = read_file(base .. ".rc")
    if not rc then return nil end
    return { out = read_file(base .. ".out"), err = read_file(base .. ".err"), rc = tonumber(rc) }
  end
end

-- Wait for a background command's result (bounded).
local function result_of(poll, ms)
  local r = wait_until(poll, ms or 10000)
  assert(r, "the background command did not finish in time")
  return r
end

-- A spawned process, run to its end: lines, status, signal, err_tail.
local function run(opts, ms)
  local seen = { lines = {} }
  opts.on_line = function(line) seen.lines[#seen.lines + 1] = line end
  opts.on_exit = function(status, signal, tail)
    seen.done, seen.status, seen.signal, seen.tail = true, status, signal, tail
  end
  local p, err = core.spawn(opts)
  assert(p, err)
  seen.proc = p
  assert(wait_until(function() return seen.done end, ms or 10000), "the process did not end in time")
  return seen
end

describe("core.spawn", function()
  it("passes argv, reads stdout as lines, reports the exit status and stderr's tail", function()
    local r = run { argv = { "sh", "-c", "printf 'a\\nb\\n\\n'; printf \"it's\"; echo oops >&2; exit 3" } }
    assert.are.same({ "a", "b", "", "it's" }, r.lines)
    assert.are.equal(3, r.status)
    assert.are.equal(0, r.signal)
    assert.are.equal("oops\n", r.tail)
    assert.is_false(r.proc:running())
  end)

  it("finds argv[1] on PATH and keeps each argument whole", function()
    local r = run { argv = { "printf", "%s|", "one two", "", "three" } }
    assert.are.same({ "one two||three|" }, r.lines)
  end)

  it("adds, overrides and removes environment names; cwd sets the directory", function()
    local dir = tmpdir()
    local r = run {
      argv = { "sh", "-c", 'echo "$MOOR_SPEC_ADDED|${HOME-unset}|$PATH"; pwd' },
      env = { MOOR_SPEC_ADDED = "x y", HOME = false, PATH = "/usr/bin:/bin" },
      cwd = dir,
    }
    assert.are.same({ "x y|unset|/usr/bin:/bin", dir }, r.lines)
    assert.are.equal(0, r.status)
    rm_rf(dir)
  end)

  it("writes stdin then closes it; without stdin the child reads /dev/null", function()
    local r = run { argv = { "cat" }, stdin = "hello\nworld" }
    assert.are.same({ "hello", "world" }, r.lines)
    local big = string.rep("z", 300000)
    r = run { argv = { "wc", "-c" }, stdin = big }
    assert.are.equal("300000", r.lines[1]:match("%d+"))
    r = run { argv = { "cat" } }
    assert.are.same({}, r.lines)
    assert.are.equal(0, r.status)
  end)

  it("reports the terminating signal", function()
    local r = run { argv = { "sh", "-c", "kill -TERM $$; sleep 5" } }
    assert.are.equal(15, r.signal)
  end)

  it("keeps the last 4 KiB of stderr", function()
    local r = run { argv = { "sh", "-c", "head -c 10000 /dev/zero | tr '\\0' e >&2; printf END >&2" } }
    assert.are.equal(4096, #r.tail)
    assert.are.equal(string.rep("e", 4093) .. "END", r.tail)
  end)

  it("cuts a line over 1 MiB and goes on with the next", function()
    local r = run { argv = { "sh", "-c", "head -c 1572864 /dev/zero | tr '\\0' a; echo; echo after" } }
    assert.are.equal(2, #r.lines)
    assert.are.equal(1048576, #r.lines[1])
    assert.are.equal("after", r.lines[2])
  end)

  it("reports after the exit and stdout's end; a stderr kept open does not hold the report", function()
    local t0 = core.mono()
    local r = run { argv = { "sh", "-c", "echo first; sleep 1 & exit 0" } } -- sleep holds stdout
    assert.is_true(core.mono() - t0 >= 800000)
    assert.are.same({ "first" }, r.lines)
    t0 = core.mono()
    r = run { argv = { "sh", "-c", "echo err >&2; sleep 3 > /dev/null & exit 1" } } -- sleep holds stderr only
    assert.is_true(core.mono() - t0 < 2500000)
    assert.are.equal(1, r.status)
    assert.are.equal("err\n", r.tail)
  end)

  it("runs its callbacks on the main thread, not on a coroutine that called it and is suspended", function()
    local seen = { lines = {} }
    local co = coroutine.create(function()
      assert(core.spawn { argv = { "sh", "-c", "echo one; echo two; exit 5" },
        on_line = function(line) seen.lines[#seen.lines + 1] = line end,
        on_exit = function(status) seen.status = status end })
      local x = coroutine.yield()
      return x + 1
    end)
    assert(coroutine.resume(co))
    assert.are.equal("suspended", coroutine.status(co))
    assert(wait_until(function() return seen.status end), "no exit")
    assert.are.same({ "one", "two" }, seen.lines)
    assert.are.equal(5, seen.status)
    assert.are.same({ true, 42 }, { coroutine.resume(co, 41) }) -- the coroutine is intact
    -- a coroutine that is gone (collected) when the callbacks fire
    seen = { lines = {} }
    coroutine.wrap(function()
      assert(core.spawn { argv = { "sh", "-c", "sleep 0.2; echo late" },
        on_line = function(line) seen.lines[#seen.lines + 1] = line end,
        on_exit = function(status) seen.status = status end })
    end)()
    collectgarbage()
    collectgarbage()
    assert(wait_until(function() return seen.status end), "no exit")
    assert.are.same({ "late" }, seen.lines)
    local dir = tmpdir()
    local got = {}
    co = coroutine.create(function()
      local s = assert(core.unix_listen { path = dir .. "/s", full_response = FULL,
        on_request = function(id, text)
          got.text = text
          core.unix_reply(id, '{"v":1,"code":"ok","exit":0}')
        end })
      coroutine.yield(s)
    end)
    local _, server = assert(coroutine.resume(co))
    local res = background(dir, "printf 'hi\\n' | " .. sh_quote(UNIX_SEND) .. " " .. sh_quote(dir .. "/s"))
    assert.are.equal('{"v":1,"code":"ok","exit":0}\n', result_of(res).out)
    assert.are.equal("hi", got.text)
    server:close()
    rm_rf(dir)
  end)

  it("refuses a program that is not there", function()
    local p, err = core.spawn { argv = { "moor-no-such-program-xyz" }, on_exit = function() end }
    assert.is_nil(p)
    assert.matches("cannot run moor%-no%-such%-program%-xyz: no such file", err)
    assert.has_error(function() core.spawn { argv = {} } end)
    assert.has_error(function() core.spawn { argv = { "true" }, env = { X = 1 } } end)
  end)

  it("kills the whole process group, a grandchild included", function()
    local seen = { lines = {} }
    local p = assert(core.spawn {
      argv = { "sh", "-c", "sleep 30 & echo $!; wait" },
      on_line = function(l) seen.lines[#seen.lines + 1] = l end,
      on_exit = function(_, signal) seen.done, seen.signal = true, signal end,
    })
    assert(wait_until(function() return seen.lines[1] end), "no grandchild pid")
    local grandchild = assert(math.tointeger(tonumber(seen.lines[1])))
    assert.is_true(p:running())
    assert.truthy(core.pid_start(grandchild))
    assert.are.equal(p:pid(), tonumber(capture("ps -o pgid= -p " .. grandchild):match("%d+")))
    assert.is_true(p:kill("KILL"))
    assert(wait_until(function() return seen.done end), "the group did not end")
    assert.are.equal(9, seen.signal)
    assert(wait_until(function() return core.pid_start(grandchild) == nil end), "the grandchild survived")
    local ok, err = p:kill("TERM") -- reported: nothing left to signal
    assert.is_nil(ok)
    assert.truthy(err)
  end)

  it("with a shim, the harness runs under moor-wfa --exec <host pid> and dies with its parent", function()
    local r = run { argv = { "sh", "-c", "echo $PPID" }, shim = WFA }
    assert.are.equal(tostring(core.getpid()), r.lines[1])
    assert.are.equal(0, r.status)
    -- not started when the given parent is not its parent
    assert.are.equal(127, select(3, os.execute(sh_quote(WFA) .. " --exec 1 -- true")))
    -- PR_SET_PDEATHSIG: the shimmed child of a shell killed with -9 is killed too
    r = run { argv = { "sh", "-c", sh_quote(WFA) .. " --exec $$ -- sleep 30 & echo $!; sleep 0.5; kill -9 $$" } }
    assert.are.equal(9, r.signal)
    local child = assert(math.tointeger(tonumber(r.lines[1])))
    assert(wait_until(function() return core.pid_start(child) == nil end), "the shimmed child survived its parent")
  end)
end)

describe("core.pid_start and core.kill_group", function()
  it("reads a process's start time, nil when there is no such process", function()
    local mine = core.pid_start(core.getpid())
    assert.matches("^%d+$", mine)
    assert.are.equal(mine, core.pid_start(core.getpid()))
    assert.is_nil(core.pid_start(2 ^ 22 + 12345))
    assert.is_nil(core.pid_start(0))
  end)

  it("signals a group by its leader's pid", function()
    local seen = {}
    local p = assert(core.spawn {
      argv = { "sh", "-c", "sleep 30 & wait" },
      on_exit = function(_, signal) seen.done, seen.signal = true, signal end,
    })
    assert.truthy(core.pid_start(p:pid()))
    assert.is_true(core.kill_group(p:pid(), "TERM"))
    assert(wait_until(function() return seen.done end), "the group did not end")
    assert.are.equal(15, seen.signal)
    -- signal 0 only asks: false once no process of the group is left (the
    -- killed sleep may be a zombie a moment longer)
    assert(wait_until(function() return not core.kill_group(p:pid(), 0) end), "the group is still there")
  end)
end)

describe("core.spawn at the host's close", function()
  it("sends SIGKILL to every live process group when the engine closes", function()
    assert(MOOR_BIN, "MOOR_BIN is not set (tests/CMakeLists.txt)")
    local dir = tmpdir()
    write_file(dir .. "/close_spec.lua", ([[
      local core = require "moor.core"
      it("leaves a process group running", function()
        local p = assert(core.spawn { argv = { "sh", "-c", "sleep 30 & echo $! > %s/gc; wait" } })
        local f = assert(io.open(%q, "w")); f:write(p:pid()); f:close()
        local t0 = core.mono()
        while not io.open(%q) and core.mono() - t0 < 5000000 do core.wait(10) end
      end)
    ]]):format(dir, dir .. "/pid", dir .. "/gc"))
    local out = capture(sh_quote(MOOR_BIN) .. " test " .. sh_quote(dir) .. " 2>&1")
    local pid = math.tointeger(tonumber(read_file(dir .. "/pid") or ""))
    local gc = math.tointeger(tonumber(read_file(dir .. "/gc") or ""))
    assert(pid and gc, "the inner spec did not run: " .. out)
    assert(wait_until(function() return core.pid_start(pid) == nil and core.pid_start(gc) == nil end),
      "a process outlived the host")
    rm_rf(dir)
  end)
end)

describe("core.unix_listen and the moor-wfa launcher", function()
  local dir, sock, wfa, server, requests

  local function listen(opts)
    opts = opts or {}
    requests = {}
    opts.path = opts.path or sock
    opts.full_response = opts.full_response or FULL
    opts.on_request = opts.on_request or function(id, text) requests[#requests + 1] = { id = id, text = text } end
    local s, err = core.unix_listen(opts)
    assert(s, err)
    server = s
    return s
  end

  before_each(function()
    dir = tmpdir() -- mktemp -d: mode 0700
    sock = dir .. "/s"
    wfa = make_wfa(dir, sock, "label_item other_json")
  end)

  after_each(function()
    if server then server:close() end
    server = nil
    rm_rf(dir)
  end)

  it("makes the socket 0600 and the wfa file 0500", function()
    listen()
    assert.are.equal("600", capture("stat -c %a " .. sh_quote(sock)):gsub("%s", ""))
    assert.are.equal("500", capture("stat -c %a " .. sh_quote(wfa)):gsub("%s", ""))
    server:close()
    assert.is_nil(io.open(sock)) -- close unlinks it
    server = nil
  end)

  it("a round trip: argv as sent, stdout, stderr and the exit status exactly as answered", function()
    listen { on_request = function(id, text)
      requests[#requests + 1] = { id = id, text = text }
      assert(core.unix_reply(id, '{"v":1,"code":"failed","exit":3,"stdout":"out\\n\\u00e9 no newline",'
        .. '"stderr":"failed: it\'s \\"bad\\"\\n"}'))
    end }
    local res = background(dir, sh_quote(wfa)
      .. " tool add_finding --file 'src/a b.ts' --line '41' --problem 'it'\\''s'")
    local r = result_of(res)
    assert.are.equal(1, #requests)
    assert.are.equal('{"v":1,"argv":["tool","add_finding","--file","src/a b.ts","--line","41","--problem","it\'s"]}',
      requests[1].text)
    assert.are.equal(3, r.rc)
    assert.are.equal("out\n\195\169 no newline", r.out)
    assert.are.equal('failed: it\'s "bad"\n', r.err)
    assert.is_false(core.unix_reply(requests[1].id, '{"v":1}')) -- answered: gone
    assert.are.equal(0, server:count())
  end)

  it("passes an answer of 200 KiB through whole, and refuses one over 272 KiB", function()
    local big = string.rep("0123456789abcdef", 200 * 64) -- 200 KiB
    local huge = string.rep("0123456789abcdef", 280 * 64)
    listen { on_request = function(id, text)
      requests[#requests + 1] = { id = id, text = text }
      core.unix_reply(id, '{"v":1,"code":"ok","exit":0,"stdout":"' .. (#requests == 1 and big or huge) .. '"}')
    end }
    local r = result_of(background(dir, sh_quote(wfa) .. " tool list_findings"))
    assert.are.equal(0, r.rc)
    assert.are.equal(big, r.out)
    r = result_of(background(dir, sh_quote(wfa) .. " tool list_findings"))
    assert.are.equal(8, r.rc)
    assert.are.equal("", r.out)
    assert.matches("^bad%-request: the workflow's answer is over 278528 bytes", r.err)
  end)

  it("refuses a connection from another user", function()
    if capture("id -u"):match("%d+") ~= "0" then return pending("needs root to connect as another user") end
    listen()
    -- open the modes up so the other user can reach the socket at all: the peer check is what refuses
    assert(os.execute(("chmod 0755 %s && chmod 0666 %s"):format(sh_quote(dir), sh_quote(sock))))
    local r = result_of(background(dir, "printf '{\"v\":1}\\n' | setpriv --reuid=65534 --regid=65534 --clear-groups "
      .. sh_quote(UNIX_SEND) .. " " .. sh_quote(sock)))
    assert.are.equal('{"v":1,"code":"bad-request","exit":8,'
      .. '"stderr":"bad-request: the connection is not from this workflow\'s user\\n"}\n', r.out)
    assert.are.equal(0, #requests)
  end)

  it("sends stdin for a JSON tool and for result, and does not read it otherwise", function()
    listen { on_request = function(id, text)
      requests[#requests + 1] = { id = id, text = text }
      core.unix_reply(id, '{"v":1,"code":"ok","exit":0}')
    end }
    local r = result_of(background(dir, "printf '{\"id\": \"b2\"}\\n' | " .. sh_quote(wfa) .. " tool label_item"))
    assert.are.equal(0, r.rc)
    assert.are.equal('{"v":1,"argv":["tool","label_item"],"stdin":"{\\"id\\": \\"b2\\"}\\n"}', requests[1].text)
    r = result_of(background(dir, "printf 'the answer' | " .. sh_quote(wfa) .. " result"))
    assert.are.equal(0, r.rc)
    assert.are.equal('{"v":1,"argv":["result"],"stdin":"the answer"}', requests[2].text)
    -- a flag tool, `result <value>`, a JSON tool given flags: stdin is left
    -- alone (here a pipe whose writer stays for 8 s: a read would wait for it)
    for i, args in ipairs { "tool add_finding --line '1'", "result 'x'", "tool label_item --id b2" } do
      local pidfile = ("%s/writer%d"):format(dir, i)
      local res = background(dir, ("{ sleep 8 & echo $! > %s; } | %s %s"):format(pidfile, sh_quote(wfa), args))
      r = result_of(res, 5000)
      os.execute("kill " .. (read_file(pidfile) or ""):gsub("%s", "") .. " 2>/dev/null")
      assert.are.equal(0, r.rc)
      assert.is_nil(requests[2 + i].text:find("stdin", 1, true))
    end
    assert.are.equal('{"v":1,"argv":["tool","add_finding","--line","1"]}', requests[3].text)
    assert.are.equal('{"v":1,"argv":["result","x"]}', requests[4].text)
    assert.are.equal('{"v":1,"argv":["tool","label_item","--id","b2"]}', requests[5].text)
  end)

  it("refuses standard input over 1 MiB, sending nothing", function()
    listen()
    local r = result_of(background(dir, "head -c 1048577 /dev/zero | tr '\\0' x | " .. sh_quote(wfa) .. " result"))
    assert.are.equal(8, r.rc)
    assert.are.equal("bad-request: standard input is over 1 MiB; nothing was done\n", r.err)
    assert.are.equal(0, #requests)
  end)

  it("refuses arguments and standard input that are not UTF-8, sending nothing", function()
    listen()
    local r = result_of(background(dir, sh_quote(wfa) .. " tool add_finding --file \"$(printf 'a\\377')\""))
    assert.are.equal(8, r.rc)
    assert.matches("^bad%-request: argument 4 is not UTF%-8", r.err)
    r = result_of(background(dir, "printf '\\300' | " .. sh_quote(wfa) .. " result"))
    assert.are.equal(8, r.rc)
    assert.matches("^bad%-request: standard input is not UTF%-8", r.err)
    core.wait(50)
    assert.are.equal(0, #requests)
  end)

  it("answers the 65th open connection full_response and never drops it", function()
    listen() -- the default limit (64); the handler holds every request unanswered
    local held = {}
    for i = 1, 64 do held[i] = background(dir, sh_quote(wfa) .. " tool list_findings") end
    assert(wait_until(function() return #requests == 64 end, 30000), "64 requests did not arrive: " .. #requests)
    assert.are.equal(64, server:count())
    local r = result_of(background(dir, sh_quote(wfa) .. " tool list_findings"))
    assert.are.equal(7, r.rc)
    assert.are.equal("too-many-connections: call again\n", r.err)
    assert.are.equal(64, #requests) -- the 65th never reached on_request
    assert.are.equal(64, server:count())
    -- one answered frees a place
    assert.is_true(core.unix_reply(requests[1].id, '{"v":1,"code":"ok","exit":0,"stdout":"one"}'))
    local answered = result_of(function()
      for i, h in ipairs(held) do
        local res = h()
        if res then
          table.remove(held, i)
          return res
        end
      end
    end)
    assert.are.equal("one", answered.out)
    assert.are.equal(0, answered.rc)
    local again = background(dir, sh_quote(wfa) .. " tool list_findings")
    assert(wait_until(function() return #requests == 65 end), "the call after a place was freed did not arrive")
    assert.is_true(core.unix_reply(requests[65].id, '{"v":1,"code":"ok","exit":0}'))
    assert.are.equal(0, result_of(again).rc)
    -- close: every held connection ends unanswered (the launcher: timed-out, exit 6)
    server:close()
    server = nil
    assert.are.equal(63, #held)
    for _, poll in ipairs(held) do
      local h = result_of(poll)
      assert.are.equal(6, h.rc)
      assert.are.equal("timed-out: the workflow did not answer in time; the call may have run\n", h.err)
    end
  end)

  it("answers an over-size request and an empty one bad-request", function()
    listen { max_request = 100 }
    local r = result_of(background(dir, sh_quote(wfa) .. " result " .. string.rep("v", 200)))
    assert.are.equal(8, r.rc)
    assert.are.equal("bad-request: the request is over 100 bytes\n", r.err)
    -- raw: over-size without a newline, empty, and a line within the limit
    local send = sh_quote(UNIX_SEND) .. " " .. sh_quote(sock)
    r = result_of(background(dir, "head -c 5000 /dev/zero | tr '\\0' x | " .. send))
    assert.are.equal('{"v":1,"code":"bad-request","exit":8,"stderr":"bad-request: the request is over 100 bytes\\n"}\n',
      r.out)
    r = result_of(background(dir, sh_quote(UNIX_SEND) .. " " .. sh_quote(sock)))
    assert.are.equal('{"v":1,"code":"bad-request","exit":8,"stderr":"bad-request: empty request\\n"}\n', r.out)
    assert.are.equal(0, #requests)
    r = background(dir, "printf 'no newline' | " .. sh_quote(UNIX_SEND) .. " " .. sh_quote(sock))
    assert(wait_until(function() return #requests == 1 end))
    assert.are.equal("no newline", requests[1].text) -- EOF ends a request too
    assert.is_true(core.unix_reply(requests[1].id, "raw"))
    assert.are.equal("raw\n", result_of(r).out)
  end)

  it("bad_response(reason) makes the bad-request line", function()
    listen { max_request = 10, bad_response = function(reason)
      return '{"v":1,"code":"bad-request","exit":8,"stderr":"custom: ' .. reason .. '\\n"}'
    end }
    local r = result_of(background(dir, sh_quote(wfa) .. " result 0123456789abc"))
    assert.are.equal(8, r.rc)
    assert.are.equal("custom: the request is over 10 bytes\n", r.err)
  end)

  it("closes a connection unanswered when its lifetime is over, unless held", function()
    listen { lifetime_ms = 300 }
    local t0 = core.mono()
    local r = result_of(background(dir, sh_quote(wfa) .. " tool list_findings"))
    assert.are.equal(6, r.rc)
    assert.matches("^timed%-out: ", r.err)
    assert.is_true(core.mono() - t0 >= 250000)
    assert.are.equal(1, #requests)
    assert.are.equal(0, server:count())
    assert.is_false(core.unix_reply(requests[1].id, '{"v":1,"code":"ok","exit":0}')) -- gone
    assert.is_false(core.unix_hold(requests[1].id, 1000))
    -- held: lives past the lifetime, then answered
    local res = background(dir, sh_quote(wfa) .. " tool list_findings")
    assert(wait_until(function() return #requests == 2 end))
    assert.is_true(core.unix_hold(requests[2].id, 3000))
    core.wait(600)
    assert.is_nil(res())
    assert.are.equal(1, server:count())
    assert.is_true(core.unix_reply(requests[2].id, '{"v":1,"code":"ok","exit":0,"stdout":"late"}'))
    r = result_of(res)
    assert.are.equal(0, r.rc)
    assert.are.equal("late", r.out)
  end)

  it("a reply to a connection whose client went away is false", function()
    listen()
    local r = result_of(background(dir, "printf '{\"v\":1}\\n' | " .. sh_quote(UNIX_SEND) .. " " .. sh_quote(sock)
      .. " --vanish"))
    assert.are.equal(0, r.rc)
    assert(wait_until(function() return #requests == 1 end))
    assert.is_false(core.unix_reply(requests[1].id, '{"v":1,"code":"ok","exit":0}'))
    assert.is_false(core.unix_reply(987654321, "x")) -- never was
    assert.are.equal(0, server:count())
  end)

  it("the launcher: a response it cannot read exits 8, no socket exits 9", function()
    listen { on_request = function(id, text)
      requests[#requests + 1] = { id = id, text = text }
      core.unix_reply(id, #requests == 1 and '{"v":2,"exit":0}' or "not json")
    end }
    local r = result_of(background(dir, sh_quote(wfa) .. " tool"))
    assert.are.equal(8, r.rc)
    assert.matches("^bad%-request: ", r.err)
    r = result_of(background(dir, sh_quote(wfa) .. " tool"))
    assert.are.equal(8, r.rc)
    server:close()
    server = nil
    local out = capture(sh_quote(wfa) .. " tool 2>&1; echo \"rc=$?\"")
    assert.matches("^unreachable: the workflow's socket " .. sock:gsub("%p", "%%%0") .. " is not there: ", out)
    assert.matches("rc=9\n$", out)
  end)

  it("a sandbox that refuses connect() with EPERM gets exit 9 naming the setting", function()
    assert(EPERM_EXEC, "MOOR_EPERM_EXEC is not set (tests/CMakeLists.txt)")
    listen()
    local out = capture(sh_quote(EPERM_EXEC) .. " " .. sh_quote(wfa) .. " tool list_findings 2>&1; echo \"rc=$?\"")
    assert.matches("^unreachable: ", out)
    assert.truthy(out:find("sandbox_workspace_write.network_access = true", 1, true), out)
    assert.truthy(out:find("codex -c sandbox_workspace_write.network_access=true", 1, true), out)
    assert.truthy(out:find("sandbox.network.allowUnixSockets", 1, true), out)
    assert.truthy(out:find(dir, 1, true), out)
    assert.matches("rc=9\n$", out)
    core.wait(50)
    assert.are.equal(0, #requests)
  end)

  it("refuses a socket path that does not fit", function()
    local s, err = core.unix_listen { path = "/tmp/" .. string.rep("x", 200), full_response = FULL,
      on_request = function() end }
    assert.is_nil(s)
    assert.matches("over 107 bytes", err)
  end)
end)

describe("core.wfa_path", function()
  it("is $MOOR_WFA, an executable", function()
    local p = core.wfa_path()
    assert.are.equal(os.getenv("MOOR_WFA"), p)
    assert.is_true(os.execute("test -x " .. sh_quote(p)))
  end)
end)
