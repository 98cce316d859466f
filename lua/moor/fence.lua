--- Fences around workflow bodies. A body is replayed after a restart, so it
-- must not read the clock, draw random numbers or touch the world directly:
-- the clock and math.random give replayed values inside a body, and I/O raises
-- an error saying the call belongs in a step. Steps and plain code are not
-- affected (the fences check whether a body is executing).
local errors = require "moor.errors"

local M = {}

-- Replacing fields of the standard library is this module's job.
-- luacheck: ignore 122

function M.install(engine)
  if M.installed then return end
  M.installed = true
  local in_body, current = engine.in_body, engine.current

  local function refuse(what)
    local info = debug.getinfo(3, "Sl")
    local where = info and info.currentline and info.currentline > 0
      and (info.short_src .. ":" .. info.currentline .. ": ") or ""
    error(errors.new("Fenced", where .. what .. " belongs in a step: a workflow body is replayed after a "
      .. "restart, so side effects and reads of the outside world must go in a moor.step function"), 3)
  end

  local function fence(lib, libname, fname)
    local orig = lib[fname]
    if not orig then return end
    lib[fname] = function(...)
      if in_body() then refuse(libname .. "." .. fname) end
      return orig(...)
    end
  end

  for _, f in ipairs { "open", "read", "write", "lines", "popen", "input", "output", "close", "tmpfile" } do
    fence(io, "io", f)
  end
  for _, f in ipairs { "execute", "remove", "rename", "exit", "tmpname", "getenv" } do
    fence(os, "os", f)
  end
  -- Methods on file handles (io.stdout:write, f:read) go through the FILE* metatable.
  local fmt = getmetatable(io.stdout)
  if fmt and type(fmt.__index) == "table" then
    for _, f in ipairs { "read", "write", "lines", "seek", "close", "flush", "setvbuf" } do
      fence(fmt.__index, "file", f)
    end
  end

  -- The clock inside a body is the time of the latest result the run has
  -- seen (the run's start before any), the same on every replay.
  local os_time, os_date, os_clock = os.time, os.date, os.clock
  os.time = function(t)
    if t == nil and in_body() then return current().now // 1000 end
    return os_time(t)
  end
  os.date = function(format, t)
    if t == nil and in_body() then t = current().now // 1000 end
    return os_date(format, t)
  end
  os.clock = function()
    if in_body() then
      local r = current()
      return (r.now - r.started) / 1000
    end
    return os_clock()
  end

  -- math.random inside a body draws from the run's own seeded generator.
  local m_random, m_randomseed = math.random, math.randomseed
  math.random = function(m, n)
    if not in_body() then return m_random(m, n) end
    local x = engine.random(current())
    if m == nil then return (x >> 11) * (1.0 / 9007199254740992.0) end
    if n == nil then m, n = 1, m end
    if m > n then error("bad argument to 'random' (interval is empty)", 2) end
    return m + ((x >> 1) % (n - m + 1))
  end
  math.randomseed = function(...)
    if in_body() then
      local s = ...
      current().rng = (math.tointeger(s) or 1) | 1
      return
    end
    return m_randomseed(...)
  end

  -- An author's own coroutines inside a body: their plain yields go to their
  -- own resume, as Lua says; op yields pass through to the engine.
  local OP = engine.OP
  local raw_resume, status, yield = coroutine.resume, coroutine.status, coroutine.yield
  local pack, unpack = table.pack, table.unpack
  local function forward(co, r)
    while r[1] and r[2] == OP and status(co) == "suspended" do
      r = pack(raw_resume(co, yield(unpack(r, 2, r.n))))
    end
    return r
  end
  coroutine.resume = function(co, ...)
    if not in_body() then return raw_resume(co, ...) end
    local r = forward(co, pack(raw_resume(co, ...)))
    return unpack(r, 1, r.n)
  end
  coroutine.wrap = function(fn)
    local co = coroutine.create(fn)
    return function(...)
      local r = forward(co, pack(raw_resume(co, ...)))
      if not r[1] then error(r[2], 0) end
      return unpack(r, 2, r.n)
    end
  end
end

return M
