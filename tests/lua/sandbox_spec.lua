-- The sandbox for model-written programs (host/sandbox.c, core.sandbox_new),
-- attacked: escapes, CPU, memory and yields. Every program here ends with a
-- clear error or a bounded result, and the host (this state) goes on.
-- Runs inside the host (`moor test`).

local core = require "moor.core"

local SMALL = { memory = 8 * 2 ^ 20, instructions = 2000000, seconds = 5 }

local function new(opts)
  local sb, err = core.sandbox_new(opts)
  assert(sb, err and err.message)
  return sb
end

-- Load and run src; answer every call with reply(call) while it returns one.
-- Returns status, value, sandbox.
local function run(src, opts, reply)
  local sb = new(opts or SMALL)
  local ok, err = sb:load(src, "prog")
  if not ok then return "load", err, sb end
  local status, v = sb:run()
  local rounds = 0
  while status == "calls" and reply and rounds < 20000 do
    rounds = rounds + 1
    local replies = {}
    for _, c in ipairs(v) do replies[c.id] = reply(c) end
    status, v = sb:resume(replies)
  end
  return status, v, sb
end

local function msg(v) return type(v) == "table" and v.message or nil end

local function ok_reply(value) return function() return { ok = true, value = value } end end

local function expect_error(src, code, pattern, opts)
  local status, v, sb = run(src, opts)
  assert.are.equal("error", status, "expected an error, got " .. tostring(status))
  assert.are.equal(code, v.code, v.message)
  if pattern then assert.matches(pattern, v.message) end
  return v, sb
end

local function elapsed(f)
  local t0 = core.mono()
  local a, b, c = f()
  return (core.mono() - t0) / 1e6, a, b, c
end

describe("sandbox: the program's world", function()
  it("returns a JSON value and captures print", function()
    local status, v, sb = run("print('hi', 1, nil, true) return { a = 1, b = { 'x', 2.5 } }")
    assert.are.equal("done", status)
    assert.are.same({ a = 1, b = { "x", 2.5 } }, v)
    assert.are.equal("hi\t1\tnil\ttrue\n", sb:output())
  end)

  it("has no load, loadfile, dofile, require, package, io, os, debug, collectgarbage, warn, string.dump", function()
    local status, v = run([[
      local out = {}
      for _, k in ipairs { "load", "loadfile", "dofile", "require", "package", "io", "os", "debug",
                           "collectgarbage", "warn", "module", "setfenv", "getfenv", "newproxy" } do
        out[k] = type(_G[k])
      end
      out.dump = type(string.dump)
      out.method_dump = type(("x").dump)
      return out
    ]])
    assert.are.equal("done", status)
    for k, t in pairs(v) do assert.are.equal("nil", t, k) end
  end)

  it("refuses a binary chunk and reports syntax errors with the line", function()
    local status, err = run(string.dump(function() return 1 end))
    assert.are.equal("load", status)
    assert.are.equal("syntax", err.code)
    assert.matches("binary chunks are refused", err.message)
    status, err = run("local a = 1\nlocal b = = 2\n")
    assert.are.equal("load", status)
    assert.are.equal("syntax", err.code)
    assert.matches("^prog:2:", err.message)
  end)

  it("reports runtime errors with the line", function()
    local err = expect_error("local x = 1\nlocal y = nil\nreturn y.z", "runtime", "^prog:3:")
    assert.matches("attempt to index", err.message)
  end)

  it("refuses a source over its limit", function()
    local status, err = run(string.rep("x = 1\n", 50000), { source = 256 * 1024 })
    assert.are.equal("load", status)
    assert.are.same({ code = "limit", message = "source limit of 256 KiB reached" }, err)
    status = run(string.rep("x = 1\n", 40000), { source = 256 * 1024 })
    assert.are.equal("done", status)
  end)

  it("protects the string metatable", function()
    local status, v = run([[
      local mt = getmetatable("")
      local ok = pcall(setmetatable, "", {})
      return { mt = mt, set = ok, upper = ("a"):upper() }
    ]])
    assert.are.equal("done", status)
    assert.are.same({ mt = false, set = false, upper = "A" }, v)
  end)

  it("ctx cannot be rawset or assigned, and _ENV swaps stay inside the program", function()
    expect_error("rawset(ctx, 'agent', print)", "runtime", "table expected")
    expect_error("ctx.agent = print", "runtime", "ctx is read%-only")
    local status, v = run([[
      local real = _ENV
      local inner
      do local _ENV = { x = 1 }; y = x; inner = _ENV end
      _ENV = setmetatable({}, { __index = real })
      return { y = real.y, inner = inner.y, t = type(os) }
    ]])
    assert.are.equal("done", status)
    assert.are.same({ inner = 1, t = "nil" }, v)
    expect_error("_ENV = nil; return print", "runtime", "attempt to index")
  end)

  it("one program's globals are not another's", function()
    local a = new(SMALL)
    assert(a:load("shared = 42; return ctx.agent('x', { message = 'm' })", "a"))
    assert.are.equal("calls", (a:run()))
    local status, v = run("return { shared = shared, string_x = string.x }")
    assert.are.equal("done", status)
    assert.are.same({}, v)
    a:close()
  end)

  it("refuses __gc and __mode, also when added after setmetatable", function()
    expect_error("setmetatable({}, { __gc = function() while true do end end })", "runtime", "__gc or __mode")
    expect_error("setmetatable({}, { __mode = 'k' })", "runtime", "__gc or __mode")
    expect_error("local mt = {}; setmetatable({}, mt); mt.__gc = function() while true do end end",
      "runtime", "not allowed")
    expect_error("local mt = {}; setmetatable({}, mt); mt.__mode = 'k'", "runtime", "not allowed")
    expect_error("local mt = {}; setmetatable({}, mt); rawset(mt, '__mode', 'k')", "runtime", "not allowed")
    expect_error("local M = {}; local C = setmetatable({}, M); setmetatable({}, C); C.__mode = 'k'", "runtime",
      "not allowed")
    expect_error("local C = {}; setmetatable({}, C); setmetatable(C, { __index = {} }); C.__gc = print", "runtime",
      "not allowed")
    -- removing the guard from the program's own metatable of a metatable does not help:
    -- what the VM uses is a copy the program cannot reach
    local status0, v0 = run([[
      local mm = {}
      local mt = setmetatable({}, mm)
      local o = setmetatable({}, mt)
      rawset(mm, "__newindex", nil); mm.__newindex = nil
      local ok = pcall(function() mt.__mode = "k" end)
      local ok2 = pcall(function() mt.__gc = function() while true do end end end)
      return { ok, ok2, rawget(mt, "__mode") == nil and rawget(mt, "__gc") == nil, getmetatable(o) == mt }
    ]])
    assert.are.equal("done", status0, type(v0) == "table" and v0.message or nil)
    assert.are.same({ false, false, true, true }, v0)
    -- a metatable in use still behaves as a table
    local status, v = run([[
      local C = {}; C.__index = C
      local o = setmetatable({}, C)
      function C.hello() return "hi" end
      local D = setmetatable({}, { __index = C })
      return { o.hello(), D.hello(), getmetatable(C) == nil }
    ]])
    assert.are.equal("done", status)
    assert.are.same({ "hi", "hi", true }, v)
  end)

  it("never runs a returned value's or an error value's metamethods on the host side", function()
    local hostile = [[setmetatable({ k = 1 }, {
      __tostring = function() while true do end end,
      __index = function() error("index") end,
      __pairs = function() while true do end end,
      __len = function() while true do end end,
    })]]
    local t, status, v = elapsed(function() return run("return " .. hostile) end)
    assert.are.equal("done", status)
    assert.are.same({ k = 1 }, v)
    assert.is_true(t < 1)
    local err = expect_error("error(" .. hostile .. ")", "runtime")
    assert.are.equal("(error object is a table value)", err.message)
    err = expect_error("error(setmetatable({ code = 'E', message = 'boom' }, { __index = error }))", "runtime")
    assert.are.same({ code = "E", message = "boom" }, err.cause)
  end)

  it("leaks no address through tostring, print, string.format or %p", function()
    local status, v, sb = run([[
      local co = coroutine.create(function() end)
      print({}, print, co, ctx)
      local ok, e = pcall(string.format, "%p", {})
      return { tostring({}), tostring(print), tostring(co), tostring(ctx),
               string.format("%s|%s|%10s", {}, print, co), ok, e }
    ]])
    assert.are.equal("done", status)
    assert.are.same({ "table", "function", "thread", "ctx", "table|function|    thread", false,
      "string.format: '%p' is not allowed in the sandbox" }, v)
    assert.are.equal("table\tfunction\tthread\tctx\n", sb:output())
    assert.is_nil(sb:output():find("0x", 1, true))
  end)

  it("iterates pairs and next in sorted key order, and seeds math.random", function()
    local src = [[
      local t = {}
      for i = 100, 1, -1 do t["k" .. i] = i; t[i * 3] = i end
      t[true], t[false], t[2.5] = 1, 1, 1
      local a, b = {}, {}
      for k in pairs(t) do a[#a + 1] = tostring(k) end
      local k = next(t)
      while k ~= nil do b[#b + 1] = tostring(k); k = next(t, k) end
      local f, s, c = pairs(t)
      assert(type(f) == "function" and s == t and c == nil)
      return { table.concat(a, ","), table.concat(b, ","), math.random(1, 1000000), math.random() }
    ]]
    local _, v1 = run(src, { seed = 7 })
    local _, v2 = run(src, { seed = 7 })
    local _, v3 = run(src, { seed = 8 })
    assert.are.same(v1, v2)
    assert.are.equal(v1[1], v1[2])
    assert.matches("^2.5,3,6,", v1[1])
    assert.matches(",k1,k10,k100,k11,", v1[1])
    assert.matches("k99,false,true$", v1[1])
    assert.are_not.equal(v1[3], v3[3])
    -- table.sort is stable, so equal keys keep their order on every run
    local status, v = run([[
      local t = {}
      for i = 1, 3000 do t[i] = { k = (i * 7) % 5, i = i } end
      table.sort(t, function(a, b) return a.k < b.k end)
      for i = 2, #t do
        assert(t[i - 1].k < t[i].k or (t[i - 1].k == t[i].k and t[i - 1].i < t[i].i), "unstable at " .. i)
      end
      local u = { 5, 3, 9, 1, 1, 7 }
      table.sort(u)
      local w = { "b", "a", "c" }
      table.sort(w, function(a, b) return a > b end)
      return { t[1].i, t[3000].i, u, w }
    ]])
    assert.are.equal("done", status, msg(v))
    assert.are.same({ 5, 2997, { 1, 1, 3, 5, 7, 9 }, { "c", "b", "a" } }, v)
    expect_error("table.sort({ 1, 'x', 2 })", "runtime", "attempt to compare")
    expect_error("for k in pairs({ [{}] = 1 }) do end", "runtime", "no stable order")
  end)
end)

describe("sandbox: CPU", function()
  it("kills an infinite loop at the instruction limit", function()
    local err = expect_error("while true do end", "limit")
    assert.are.equal("instruction limit of 2000000 reached", err.message)
  end)

  it("kills at the time limit", function()
    local t, err = elapsed(function()
      return expect_error("while true do end", "limit", nil, { instructions = 2 ^ 50, seconds = 0.2 })
    end)
    assert.are.equal("time limit of 0.2 s reached", err.message)
    assert.is_true(t < 2, t)
  end)

  it("stops a library call whose work grows without the VM running: table.move of nils, next over a big table",
    function()
      local t, err = elapsed(function()
        return expect_error("table.move({}, 1, 2^52, 1) return 'moved'", "limit", nil,
          { instructions = 2 ^ 50, seconds = 0.3 })
      end)
      assert.are.equal("time limit of 0.3 s reached", err.message)
      assert.is_true(t < 2, t)
      t, err = elapsed(function()
        return expect_error("local t = {} for i = 1, 2e5 do t['k' .. i] = i end "
          .. "local n = 0 for _ in next, t do n = n + 1 end return n", "limit", nil,
          { instructions = 2 ^ 50, seconds = 0.5 })
      end)
      assert.are.equal("time limit of 0.5 s reached", err.message)
      assert.is_true(t < 3, t)
      for _, call in ipairs { "table.insert(t, 1, 0)", "table.remove(t, 1)" } do
        t, err = elapsed(function()
          return expect_error("local t = setmetatable({}, { __len = function() return 2^50 end }) " .. call
            .. " return 'shifted'", "limit", nil, { instructions = 2 ^ 50, seconds = 0.3 })
        end)
        assert.are.equal("time limit of 0.3 s reached", err.message)
        assert.is_true(t < 2, t)
      end
      -- next's scan is charged as instructions
      expect_error("local t = {} for i = 1, 3000 do t[i] = i end local n = 0 for _ in next, t do n = n + 1 end",
        "limit", "instruction limit")
      -- table.move still moves (overlapping, to another table, with metamethods)
      local status, v = run([[
        local a = table.move({ 1, 2, 3, 4, 5 }, 1, 3, 2)
        local b = table.move({ 1, 2, 3 }, 1, 3, 3, { 9 })
        local seen = {}
        local c = table.move(setmetatable({}, { __index = function(_, k) return k * 10 end }), 1, 2, 1,
          setmetatable({}, { __newindex = function(t, k, x) rawset(t, k, x + 1) end }))
        local ok, e = pcall(table.move, {}, 1, math.maxinteger, 2)
        -- insert and remove on a table with a metatable, as Lua's
        local d = setmetatable({ 1, 2, 3 }, {})
        table.insert(d, 1, 0)
        table.insert(d, 9)
        local r1, r2, r3 = table.remove(d, 1), table.remove(d), table.remove(d, #d + 1)
        local ok2, e2 = pcall(table.insert, d, 7, 1)
        local ok3, e3 = pcall(table.remove, d, 9)
        return { a, b, c, ok, e, d, { r1, r2, r3 }, { ok2, e2, ok3, e3 } }
      ]])
      assert.are.equal("done", status, msg(v))
      assert.are.same({ { 1, 1, 2, 3, 5 }, { 9, nil, 1, 2, 3 }, { 11, 21 }, false,
        "bad argument #4 to 'move' (destination wrap around)", { 1, 2, 3 }, { 0, 9 },
        { false, "bad argument #2 to 'insert' (position out of bounds)", false,
          "bad argument #2 to 'remove' (position out of bounds)" } }, v)
    end)

  it("cannot be swallowed by pcall, xpcall handlers or __close", function()
    expect_error("pcall(function() while true do end end) return 'escaped'", "limit", "instruction limit")
    expect_error("while true do pcall(function() while true do end end) end", "limit", "instruction limit")
    expect_error("xpcall(function() error('x') end, function() while true do end end) return 'escaped'",
      "limit", "instruction limit")
    expect_error([[
      xpcall(function() while true do end end, function() while true do end end)
      for i = 1, 1e9 do pcall(error, i) end
      return 'escaped'
    ]], "limit", "instruction limit")
    expect_error([[
      do local x <close> = setmetatable({}, { __close = function() while true do end end }) end
      return 'escaped'
    ]], "limit", "instruction limit")
    expect_error([[
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      while true do end
    ]], "limit", "instruction limit")
    expect_error([[
      local ok = pcall(function() local s = "x" while true do s = s .. s end end)
      return 'escaped'
    ]], "limit", "memory limit of 8 MiB reached")
  end)

  it("kills loops inside coroutines", function()
    expect_error("coroutine.wrap(function() while true do end end)() return 'escaped'", "limit")
    expect_error("while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
      "limit")
  end)

  it("refuses pattern and gsub bombs before they start, and keeps ordinary patterns", function()
    local t, err = elapsed(function()
      return expect_error([[return string.find(string.rep("a", 200), string.rep("a*", 11) .. "b")]],
        "runtime", "could backtrack too long")
    end)
    assert.is_true(t < 1, t)
    t = elapsed(function()
      expect_error([[return (string.rep("a", 100000)):gsub("a*a*b", "")]], "runtime", "could backtrack")
      expect_error([[return (string.rep("(", 5000)):find(string.rep("%b()", 5))]], "runtime", "could backtrack")
      expect_error([[return string.match("x", string.rep("x?", 600))]], "runtime", "pattern of 1200 bytes")
    end)
    assert.is_true(t < 1, t)
    assert.is_truthy(err)
    local status, v = run([[
      local s = string.rep("key=value\n", 1000)
      local n = 0
      for k, v in s:gmatch("(%w+)=(%w+)") do n = n + 1 end
      return { n, (" trim me  "):match("^%s*(.-)%s*$"), (s:gsub("%s+", " ")):len(), s:find("value", 1, true) }
    ]])
    assert.are.equal("done", status)
    assert.are.same({ 1000, "trim me", 10000, 5, 9 }, v)
  end)

  it("sorts a million items within its limits", function()
    local t, status, v = elapsed(function()
      return run([[
        local t = {}
        for i = 1, 1000000 do t[i] = (i * 7919) % 1000003 end
        table.sort(t)
        return { t[1], t[1000000] }
      ]], { memory = 64 * 2 ^ 20, instructions = 1e9, seconds = 20 })
    end)
    assert.are.equal("done", status, msg(v))
    assert.is_true(v[1] <= v[2])
    assert.is_true(t < 20, t)
    expect_error([[
      local t = {}
      for i = 1, 100000 do t[i] = -i end
      table.sort(t, function(a, b) return a < b end)
    ]], "limit", "instruction limit")
  end)
end)

describe("sandbox: memory", function()
  it("refuses string.rep bombs", function()
    expect_error("return string.rep('x', 2^40)", "runtime", "string.rep: a result of")
    expect_error("return ('x'):rep(2^30, ',')", "runtime", "string.rep")
    expect_error("local t = {} for i = 1, 100 do t[i] = string.rep('x', 1e6) .. i end", "limit",
      "memory limit of 8 MiB reached")
  end)

  it("kills concatenation doubling and huge tables", function()
    expect_error("local s = 'x' while true do s = s .. s end", "limit", "memory limit of 8 MiB reached")
    expect_error("local t = {} for i = 1, 1e8 do t[i] = i end", "limit", "memory limit")
    expect_error("local t = {} for i = 1, 1e8 do t['k' .. i] = {} end", "limit", "memory limit")
  end)

  it("ends deep recursion with and without pcall", function()
    local status, v = run("local function f(n) return 1 + f(n + 1) end return f(1)")
    assert.are.equal("error", status)
    assert.is_truthy(v.message:find("stack overflow") or v.message:find("memory limit of 8 MiB reached"), v.message)
    status, v = run("local function f(n) return 1 + f(n + 1) end return f(1)",
      { memory = 64 * 2 ^ 20, instructions = 1e8 })
    assert.are.equal("error", status)
    assert.matches("stack overflow", v.message)
    status = run("local function f() return pcall(f) end return f()")
    assert.is_true(status == "done" or status == "error")
    status = run("local function f(n) pcall(f, n + 1) return n end return f(1)")
    assert.is_true(status == "done" or status == "error")
    status = run("local function f() local ok, e = pcall(f) error(e, 0) end f()")
    assert.are.equal("error", status)
  end)

  it("ends deep nesting of coroutine.close and of resumes", function()
    local status, v = run([[
      local function mk(n)
        local co = coroutine.create(function()
          local x <close> = setmetatable({}, { __close = function() if n > 0 then coroutine.close(mk(n - 1)) end end })
          coroutine.yield()
        end)
        coroutine.resume(co)
        return co
      end
      return { coroutine.close(mk(250)) }
    ]])
    assert.are.equal("done", status, msg(v))
    assert.are.same({ true }, v)
    expect_error("local function mk(n) return coroutine.wrap(function() if n > 0 then return mk(n - 1)() end end) " ..
      "end return mk(250)()", "runtime", "C stack overflow")
  end)

  it("caps live coroutines, and frees finished ones", function()
    expect_error("local t = {} for i = 1, 1e5 do t[i] = coroutine.create(function() end) end", "limit",
      "coroutine limit of 256 reached")
    local fns = {}
    for i = 1, 300 do fns[i] = "function() return " .. i .. " end" end
    expect_error("return ctx.all{" .. table.concat(fns, ",") .. "}", "limit", "coroutine limit")
    local status, v = run([[
      local n = 0
      for i = 1, 5000 do n = n + coroutine.wrap(function() coroutine.yield(1) end)() end
      for i = 1, 5000 do
        local co = coroutine.create(function() coroutine.yield() end)
        coroutine.resume(co)
        coroutine.close(co)
      end
      return n
    ]])
    -- abandoned suspended coroutines count as live: the first loop breaches the cap
    assert.are.equal("error", status)
    assert.matches("coroutine limit", v.message)
    status, v = run([[
      local n = 0
      for i = 1, 5000 do local f = coroutine.wrap(function() coroutine.yield(1) end); n = n + f(); f() end
      for i = 1, 5000 do
        local co = coroutine.create(function() coroutine.yield() end)
        coroutine.resume(co)
        coroutine.close(co)
      end
      return n
    ]])
    assert.are.equal("done", status, msg(v))
    assert.are.equal(5000, v)
  end)

  it("counts a coroutine off once when another task closes it while a task waits in it (no way past the cap)",
    function()
      -- task 1 waits on ctx.agent inside C; task 2 closes C; task 1's reply
      -- then finds C dead: counted off twice, 20 rounds made room for 20 more
      local status, v = run([[
        local C
        for i = 1, 20 do
          C = coroutine.create(function() ctx.agent("x", { message = "m" }) end)
          ctx.all{ function() coroutine.resume(C) end, function() coroutine.close(C) end }
        end
        local keep = {}
        for i = 1, 20 do keep[i] = coroutine.create(function() end) end
        return #keep
      ]], { coroutines = 8, seconds = 5 }, ok_reply("r"))
      assert.are.equal("error", status, msg(v))
      assert.are.equal("limit", v.code)
      assert.matches("coroutine limit of 8 reached", v.message)
    end)

  it("returns its memory: 1,000 programs leave the allocator and the host at their baseline", function()
    collectgarbage()
    collectgarbage()
    local base_host = collectgarbage("count")
    local base = core.sandbox_stats()
    local kinds = {
      function() return run("return 1") end,
      function() return run("while true do end", { instructions = 20000 }) end,
      function() return run("local s = 'x' while true do s = s .. s end", { memory = 256 * 1024 }) end,
      function()
        local status, v, sb = run("local x <close> = setmetatable({}, { __close = function() end }) " ..
          "return ctx.agent('a', { message = string.rep('m', 1000) })")
        assert.are.equal("calls", status, msg(v))
        sb:close()
        return status
      end,
      function() return run("error({ code = 'x', message = 'y' })") end,
      function() return run("return function() end") end,
    }
    for i = 1, 1000 do kinds[i % #kinds + 1]() end
    collectgarbage()
    collectgarbage()
    local after = core.sandbox_stats()
    assert.are.equal(base.states, after.states)
    assert.are.equal(base.bytes, after.bytes)
    assert.is_true(collectgarbage("count") - base_host < 512, collectgarbage("count") - base_host)
  end)

  it("frees the state when the program ends and on close", function()
    local sb = new(SMALL)
    assert(sb:load("return ctx.agent('a', { message = 'x' })", "p"))
    assert.are.equal("calls", (sb:run()))
    assert.is_true(sb:memory() > 0)
    local before = core.sandbox_stats().bytes
    sb:close()
    sb:close()
    assert.are.equal(0, sb:memory())
    assert.is_true(core.sandbox_stats().bytes < before)
    local status, _, sb2 = run("return 1")
    assert.are.equal("done", status)
    assert.are.equal(0, sb2:memory())
  end)
end)

describe("sandbox: yields and calls", function()
  it("batches the calls of ctx.all branches and resumes in place", function()
    local sb = new(SMALL)
    assert(sb:load([[
      local seen = 0
      local r = ctx.all {
        function() seen = seen + 1; return ctx.agent("writer", { message = "draft" }) end,
        function() seen = seen + 1
          return ctx.agent("critic", { message = "review", outputSchema = { type = "object" } }) end,
      }
      return { r[1], r[2].score, seen }
    ]], "p"))
    local status, calls = sb:run()
    assert.are.equal("calls", status)
    assert.are.same({
      { id = 1, name = "writer", message = "draft" },
      { id = 2, name = "critic", message = "review", outputSchema = { type = "object" } },
    }, calls)
    assert.are.same({ 1, 2 }, sb:pending())
    status, calls = sb:resume { [2] = { ok = true, value = { score = 9 } } }
    assert.are.same({ "calls", {} }, { status, calls })
    assert.are.same({ 1 }, sb:pending())
    local v
    status, v = sb:resume { [1] = { ok = true, value = "text" } }
    assert.are.equal("done", status)
    assert.are.same({ "text", 9, 2 }, v)
  end)

  it("raises a failed call's error at ctx.agent, catchable with pcall", function()
    local status, v = run([[
      local ok, e = pcall(ctx.agent, "a", { message = "x" })
      return { ok, e.code, e.message }
    ]], nil, function() return { ok = false, error = { code = "CHILD_FAILED", message = "no" } } end)
    assert.are.equal("done", status)
    assert.are.same({ false, "CHILD_FAILED", "no" }, v)
    status, v = run("return ctx.agent('a', { message = 'x' })", nil,
      function() return { ok = false, error = { code = "CHILD_FAILED", message = "no" } } end)
    assert.are.equal("error", status)
    assert.are.same({ code = "runtime", message = "no", cause = { code = "CHILD_FAILED", message = "no" } }, v)
  end)

  it("ctx.race returns the first result and its index and closes the others", function()
    local sb = new(SMALL)
    assert(sb:load([[
      local v, i = ctx.race {
        function() local g <close> = setmetatable({}, { __close = function() print("closed 1") end })
          return ctx.agent("slow", { message = "a" }) end,
        function() return ctx.agent("fast", { message = "b" }) end,
      }
      return { v, i }
    ]], "p"))
    local status, calls = sb:run()
    assert.are.equal("calls", status)
    assert.are.equal(2, #calls)
    local v
    status, v = sb:resume { [2] = { ok = true, value = "B" } }
    assert.are.equal("done", status)
    assert.are.same({ "B", 2 }, v)
    assert.are.equal("closed 1\n", sb:output())
  end)

  it("ctx.all raises the first error and closes the other branches", function()
    local status, v, sb = run([[
      local ok, e = pcall(ctx.all, {
        function() local g <close> = setmetatable({}, { __close = function() print("closed") end })
          return ctx.agent("a", { message = "a" }) end,
        function() error("branch 2 failed") end,
      })
      return { ok, e }
    ]])
    assert.are.equal("done", status)
    assert.are.equal(false, v[1])
    assert.matches("^prog:4: branch 2 failed", v[2])
    assert.are.equal("closed\n", sb:output())
  end)

  it("a bare coroutine.yield cannot reach the host", function()
    expect_error("coroutine.yield({ id = 1, name = 'a', message = 'x' })", "runtime",
      "attempt to yield from outside a coroutine")
    expect_error("ctx.all { function() coroutine.yield('agent') end }", "runtime", "outside a coroutine")
    local err = expect_error("local co = coroutine.running(); coroutine.resume(co); " ..
      "assert(coroutine.resume(co)); return 1", "runtime")
    assert.matches("cannot resume a ctx task", err.message)
    expect_error("coroutine.close(coroutine.running())", "runtime", "cannot close a ctx task")
    local status, v = run([[
      local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end return "end" end)
      return { gen(), gen(), gen(), gen(), coroutine.isyieldable() }
    ]])
    assert.are.equal("done", status)
    assert.are.same({ 1, 2, 3, "end", false }, v)
  end)

  it("ctx.agent inside a table.sort comparator or a gsub callback is a clear error", function()
    expect_error("table.sort({ 3, 1, 2 }, function(a, b) ctx.agent('a', { message = 'x' }) return a < b end)",
      "runtime", "cannot wait here")
    expect_error("('abc'):gsub('%w', function(c) return ctx.agent('a', { message = c }) end)", "runtime",
      "cannot wait here")
    expect_error([[
      table.sort({ 3, 1, 2 }, function(a, b)
        coroutine.wrap(function() ctx.agent('a', { message = 'x' }) end)()
        return a < b
      end)
    ]], "runtime", "resumed inside a C function")
    local status, v = run([[
      return select(2, pcall(string.gsub, 'a', 'a', function() return ctx.agent('a', { message = 'x' }) end))
    ]])
    assert.are.equal("done", status)
    assert.matches("cannot wait here", v)
  end)

  it("ctx.agent works inside the program's own coroutines, at any depth", function()
    local status, v = run([[
      local outer = coroutine.wrap(function()
        local inner = coroutine.wrap(function()
          coroutine.yield("inner first")
          return ctx.agent("deep", { message = "hello" })
        end)
        coroutine.yield(inner())
        coroutine.yield(inner())
      end)
      return { outer(), outer() }
    ]], nil, function(c) return { ok = true, value = c.name .. ":" .. c.message } end)
    assert.are.equal("done", status)
    assert.are.same({ "inner first", "deep:hello" }, v)
  end)

  it("a coroutine waiting on ctx.agent resumed by the program gets an error, not a fake reply", function()
    local status, v = run([[
      local co
      local r = ctx.all {
        function()
          co = coroutine.create(function() return ctx.agent("a", { message = "x" }) end)
          return { coroutine.resume(co) }
        end,
        function() return { coroutine.resume(co, "fake") } end,
      }
      return r
    ]], nil, ok_reply("real"))
    assert.are.equal("done", status)
    assert.are.equal(false, v[2][1])
    assert.matches("resumed by the program", v[2][2])
    assert.are.equal(false, v[1][1])
    assert.matches("dead coroutine", v[1][2])
  end)

  it("makes 10,000 calls one after another", function()
    local t, status, v = elapsed(function()
      return run([[
        local n = 0
        for i = 1, 10000 do n = n + ctx.agent("count", { message = tostring(i) }) end
        return n
      ]], { memory = 8 * 2 ^ 20, instructions = 4000000, seconds = 5 }, ok_reply(1))
    end)
    assert.are.equal("done", status, type(v) == "table" and v.message or tostring(v))
    assert.are.equal(10000, v)
    assert.is_true(t < 30, t)
  end)

  it("refuses hostile ctx arguments with the program's own error", function()
    local cases = {
      { "ctx.agent(nil, { message = 'x' })", "subagent's name" },
      { "ctx.agent(string.rep('n', 300), { message = 'x' })", "1 to 256 bytes" },
      { "ctx.agent('a', 'x')", "second argument must be a table" },
      { "ctx.agent('a', { message = {} })", "message must be a string" },
      { "ctx.agent('a', setmetatable({}, { __index = function() return 'x' end }))", "message must be a string" },
      { "ctx.agent('a', { message = string.rep('m', 2000) })", "message limit of 1 KiB reached" },
      { "ctx.agent('a', { message = 'x', outputSchema = { f = print } })", "outputSchema.f is a function" },
      { "local s = {}; s.self = s; ctx.agent('a', { message = 'x', outputSchema = s })", "cycle" },
      { "ctx.agent('a', { message = 'x', outputSchema = { n = 0/0 } })", "NaN" },
      { "ctx.agent('a', { message = 'x', outputSchema = { [1.5] = 1 } })", "key of type float" },
      { "ctx.agent('a', { message = 'x', outputSchema = { d = string.rep('d', 2000) } })", "message limit" },
      { "ctx.all(5)", "table of functions" },
      { "ctx.all{ 1 }", "item 1 is a number" },
      { "ctx.race{}", "at least one function" },
    }
    for _, c in ipairs(cases) do
      expect_error(c[1], "runtime", c[2], { memory = 8 * 2 ^ 20, instructions = 2e6, message = 1024 })
    end
  end)

  it("refuses a reply that is not a JSON value as the host's error, and the program waits on", function()
    local sb = new(SMALL)
    assert(sb:load("return ctx.agent('a', { message = 'x' })", "p"))
    assert.are.equal("calls", (sb:run()))
    local ok, err = pcall(sb.resume, sb, { [1] = { ok = true, value = { f = print } } })
    assert.is_false(ok)
    assert.matches("the reply to call 1: value.f is a function", err)
    ok, err = pcall(sb.resume, sb, { x = { ok = true } })
    assert.is_false(ok)
    assert.matches("keyed by call id", err)
    local status, v = sb:resume { [1] = { ok = true, value = { fine = true } } }
    assert.are.equal("done", status)
    assert.are.same({ fine = true }, v)
  end)

  it("time parked on ctx.agent does not count", function()
    local sb = new { seconds = 0.3, instructions = 2 ^ 50 }
    assert(sb:load("local x = ctx.agent('a', { message = 'x' }) return x", "p"))
    assert.are.equal("calls", (sb:run()))
    local t0 = core.mono()
    while core.mono() - t0 < 500000 do core.wait(20) end
    local status, v = sb:resume { [1] = { ok = true, value = "late" } }
    assert.are.equal("done", status, msg(v))
    assert.are.equal("late", v)
  end)

  it("close runs pending to-be-closed variables under the same budget", function()
    local sb = new(SMALL)
    assert(sb:load([[
      local x <close> = setmetatable({}, { __close = function() print("cleaned") end })
      return ctx.agent("a", { message = "x" })
    ]], "p"))
    assert.are.equal("calls", (sb:run()))
    sb:close()
    assert.are.equal("cleaned\n", sb:output())
    sb = new(SMALL)
    assert(sb:load([[
      local x <close> = setmetatable({}, { __close = function() while true do end end })
      return ctx.agent("a", { message = "x" })
    ]], "p"))
    assert.are.equal("calls", (sb:run()))
    local t = elapsed(function() sb:close() end)
    assert.is_true(t < 5, t)
    -- evict frees a parked program and runs none of its code
    sb = new(SMALL)
    assert(sb:load([[
      local x <close> = setmetatable({}, { __close = function() print("must not run") end })
      return ctx.agent("a", { message = "x" })
    ]], "p"))
    assert.are.equal("calls", (sb:run()))
    sb:evict()
    sb:close()
    assert.are.equal("", sb:output())
    assert.are.equal(0, sb:memory())
    local before = core.sandbox_stats().states
    do
      local sb3 <close> = new(SMALL) -- __close on the host side frees the state
      assert.are.equal(before + 1, core.sandbox_stats().states)
      assert.is_truthy(sb3)
    end
    assert.are.equal(before, core.sandbox_stats().states)
  end)

  it("refuses results that are not JSON, with the path", function()
    local cases = {
      { "return { f = print }", "result.f is a function" },
      { "return { n = 0/0 }", "NaN" },
      { "return { 1/0 }", "infinite" },
      { "local t = {}; t.t = t; return t", "cycle" },
      { "local t = {} for i = 1, 200 do t = { t } end return t", "nested deeper than 100" },
      { "return { [2.5] = 1 }", "key of type float" },
      { "return { [true] = 1 }", "key of type boolean" },
      { "return coroutine.create(print)", "result is a thread" },
      { "return ctx", "result is a userdata" },
      { "return string.rep('x', 2000)", "result limit of 1 KiB" },
    }
    for _, c in ipairs(cases) do
      expect_error(c[1], "result", c[2], { memory = 8 * 2 ^ 20, instructions = 2e6, result = 1024 })
    end
    local status, v = run("return nil")
    assert.are.equal("done", status)
    assert.is_nil(v)
  end)

  it("caps captured output", function()
    local _, _, sb = run("for i = 1, 100 do print(string.rep('x', 50)) end", { output = 100 })
    assert.are.equal(string.rep("x", 50) .. "\n" .. string.rep("x", 49) .. "[output truncated]\n", sb:output())
  end)

  it("the host keeps going after all of this", function()
    local status, v = run("return 'still here'")
    assert.are.equal("done", status)
    assert.are.equal("still here", v)
  end)
end)
