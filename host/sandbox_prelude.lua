-- The sandbox's own Lua: the program's environment and the scheduler of
-- its tasks. Runs once in each fresh sandbox state, under the count hook,
-- with `raw` holding the original libraries and the C helpers; nothing it
-- keeps is reachable from the program except through the functions it puts
-- in the environment, which capture what they use as upvalues.
local raw = ...
local C = raw.c
local B, S, T, M, U, CO = raw.base, raw.string, raw.table, raw.math, raw.utf8, raw.coroutine
local type, error, select = B.type, B.error, B.select
local rawget, rawset, rawlen = B.rawget, B.rawset, B.rawlen
local setmetatable, getmetatable, pcall = B.setmetatable, B.getmetatable, B.pcall
local pack, unpack, tsort = T.pack, T.unpack, T.sort
local format = S.format
local co_create, co_resume, co_yield, co_status = CO.create, CO.resume, CO.yield, CO.status
local co_close, co_running, co_isyieldable = CO.close, CO.running, CO.isyieldable
local rawmeta, force_setmetatable = C.rawmeta, C.force_setmetatable

-- Yield tags: OP marks a request to the scheduler (ctx.agent, ctx.all,
-- ctx.race), USER a program's own coroutine.yield; REPLY marks the
-- scheduler's answer. The program can reach none of them.
local OP, USER, REPLY = {}, {}, {}
-- PAUSED: a coroutine the count hook stopped at the end of a slice, passed
-- up to the scheduler, which returns "slice" (C.paused() tells the hook's
-- yield, which carries no value, from a program's own).
local PAUSED = {}
local paused, unpause = C.paused, C.unpause

local tasks = {}         -- thread -> task (the scheduler's coroutines)
local live = 0           -- coroutines not yet dead: tasks and the program's own
local max_live = C.coroutines
local function count_new()
  live = live + 1
  if live > max_live then C.kill_coroutines() end
end

local function check_fn(f, what, level)
  if type(f) ~= "function" then
    error(format("%s: a function expected, got %s", what, type(f)), level + 1)
  end
end

-- The program's coroutine library. A program's yield goes to the program's
-- own resume; a request made inside one of its coroutines passes up
-- through every resume to the task and the scheduler, and the answer passes
-- back down, so ctx.agent works at any depth.
local function ucreate(f)
  check_fn(f, "coroutine.create", 2)
  count_new()
  return co_create(f)
end

local guard_mt = {
  __close = function(g)
    local c = g.co
    if c then
      g.co = nil
      if co_status(c) == "suspended" then live = live - 1; co_close(c) end
    end
  end,
}

local function ended(co, r)
  if not r[1] then live = live - 1; return false, r[2] end
  if co_status(co) == "dead" then live = live - 1; return true, unpack(r, 2, r.n) end
  return true, unpack(r, 3, r.n) -- a USER yield
end

local function uresume(co, ...)
  if type(co) ~= "thread" then
    error(format("bad argument #1 to 'resume' (coroutine expected, got %s)", type(co)), 2)
  end
  if tasks[co] then return false, "cannot resume a ctx task" end
  if co_status(co) ~= "suspended" then return co_resume(co, ...) end -- Lua's own refusal
  local r = pack(co_resume(co, ...))
  while r[1] and co_status(co) == "suspended" do
    if (r.n == 1 or r[2] == PAUSED) and paused() then
      -- The slice ended inside co: pass the pause up (or, where a C call
      -- stands in between, go on at once); resumed, co goes on.
      if co_isyieldable() then
        local g <close> = setmetatable({ co = co }, guard_mt)
        co_yield(PAUSED)
        g.co = nil
        if co_status(co) ~= "suspended" then return co_resume(co) end -- (closed meanwhile, as above)
      else
        unpause()
      end
      r = pack(co_resume(co))
    elseif r[2] == OP then
      if not co_isyieldable() then
        -- cannot pass the request up from here: the coroutine stays blocked
        error("ctx: a coroutine waiting on ctx.agent was resumed inside a C function " ..
          "(a table.sort comparator, a string.gsub callback, a metamethod); call ctx from plain code", 2)
      end
      local g <close> = setmetatable({ co = co }, guard_mt)
      local reply = pack(co_yield(OP, r[3]))
      g.co = nil
      -- (another task may have closed co meanwhile: it was counted off then)
      if co_status(co) ~= "suspended" then return co_resume(co) end
      r = pack(co_resume(co, unpack(reply, 1, reply.n)))
    else
      break
    end
  end
  return ended(co, r)
end

local function uyield(...)
  if tasks[co_running()] then error("attempt to yield from outside a coroutine", 2) end
  return co_yield(USER, ...)
end

local function uwrap(f)
  check_fn(f, "coroutine.wrap", 2)
  local co = ucreate(f)
  return function(...)
    local r = pack(uresume(co, ...))
    if r[1] then return unpack(r, 2, r.n) end
    error(r[2], 0)
  end
end

local function uclose(co)
  if type(co) == "thread" and tasks[co] then error("cannot close a ctx task", 2) end
  local was = type(co) == "thread" and co_status(co)
  local r = pack(co_close(co))
  if was == "suspended" then live = live - 1 end
  return unpack(r, 1, r.n)
end

local function urunning()
  local co = co_running()
  return co, tasks[co] ~= nil
end

local function uisyieldable(co)
  co = co or co_running()
  return not tasks[co] and co_isyieldable(co)
end

-- The scheduler ------------------------------------------------------------

local queue, qh, qt = {}, 1, 0  -- tasks to resume, with their arguments
local pending = {}       -- call id -> task waiting on it
local batch = {}         -- calls made since the last "calls"
local next_id = 0
local main, program, result

local function push(t, ...)
  qt = qt + 1
  queue[qt] = { t, pack(...) }
end

local function spawn(fn, parent, index)
  count_new()
  local t = { co = co_create(fn), parent = parent, index = index }
  tasks[t.co] = t
  push(t)
  return t
end

local function cancel(t)
  if t.done then return end
  t.done = true
  local kids = t.children
  if kids then for i = 1, #kids do cancel(kids[i]) end end
  if t.call then pending[t.call] = nil; t.call = nil end
  live = live - 1
  co_close(t.co) -- runs its to-be-closed variables (and its coroutines')
  tasks[t.co] = nil
end

local function settle(t, ok, ...)
  t.done = true
  tasks[t.co] = nil
  live = live - 1
  local p = t.parent
  if not p then result = pack(ok, ...); return end
  if p.done then return end
  local w = p.wait
  local kids = p.children
  if ok and w.kind == "all" then
    w.results[t.index] = (...)
    w.got = w.got + 1
    if w.got < w.n then return end
  else
    for i = 1, #kids do if kids[i] ~= t then cancel(kids[i]) end end
  end
  p.children, p.wait = nil, nil
  if not ok then push(p, REPLY, w.op, false, (...))
  elseif w.kind == "all" then push(p, REPLY, w.op, true, w.results)
  else push(p, REPLY, w.op, true, (...), t.index) end
end

local sliced = false -- the slice ended: loop() gives the host its loop back

local function step(t, args)
  local r = pack(co_resume(t.co, unpack(args, 1, args.n)))
  if t.done then return end
  -- (a hook's yield carries no value, a pause passed up carries PAUSED: only
  -- then is the C flag asked)
  if r[1] and (r.n == 1 or r[2] == PAUSED) and paused() and co_status(t.co) == "suspended" then
    unpause()
    -- resumed with nothing, it goes on where the hook stopped it, first: at
    -- the head of the queue, so where a slice ends changes no order (a
    -- race's winner, the ids of the calls), and a replay does what live did
    qh = qh - 1
    queue[qh] = { t, pack() }
    sliced = true
    return
  end
  if not r[1] then return settle(t, false, r[2]) end
  if co_status(t.co) == "dead" then return settle(t, true, unpack(r, 2, r.n)) end
  local op = r[3]
  if r[2] ~= OP or type(op) ~= "table" then
    co_close(t.co)
    return settle(t, false, "ctx: a task yielded something other than a ctx request")
  end
  t.op = op
  if op.kind == "agent" then
    next_id = next_id + 1
    t.call = next_id
    pending[next_id] = t
    batch[#batch + 1] = { id = next_id, name = op.name, message = op.message, outputSchema = op.schema }
  elseif op.n == 0 then
    if op.kind == "all" then push(t, REPLY, op, true, {}) end
  else
    t.wait = { kind = op.kind, n = op.n, got = 0, results = {}, op = op }
    t.children = {}
    for i = 1, op.n do t.children[i] = spawn(op.fns[i], t, i) end
  end
end

local function loop()
  while qh <= qt do
    local item = queue[qh]
    queue[qh] = nil
    qh = qh + 1
    if not item[1].done then step(item[1], item[2]) end
    if sliced then
      sliced = false
      return "slice"
    end
  end
  if result then
    if result[1] then return "done", result[2] end
    return "error", result[2]
  end
  local b = batch
  batch = {}
  return "calls", b
end

-- ctx ---------------------------------------------------------------------

local function wait_op(op, what)
  if not co_isyieldable() then
    error(what .. " cannot wait here: it was called inside a C function (a table.sort comparator, " ..
      "a string.gsub callback, a metamethod or a __close handler being closed); call it from plain code", 3)
  end
  local r = pack(co_yield(OP, op))
  if r[1] ~= REPLY or r[2] ~= op then error(what .. ": resumed by the program, not by the host", 3) end
  if r[3] then return unpack(r, 4, r.n) end
  error(r[4], 0)
end

local name_max, message_max = C.name_max, C.message_max
local function agent(name, opts)
  if type(name) ~= "string" then error("ctx.agent: the first argument must be the subagent's name (a string)", 2) end
  if #name == 0 or #name > name_max then
    error(format("ctx.agent: a subagent's name has 1 to %d bytes", name_max), 2)
  end
  if type(opts) ~= "table" then
    error("ctx.agent: the second argument must be a table { message = string, outputSchema = table? }", 2)
  end
  local message, schema = rawget(opts, "message"), rawget(opts, "outputSchema")
  if type(message) ~= "string" then error("ctx.agent: message must be a string", 2) end
  if #message > message_max then error(format("ctx.agent: message limit of %s reached", C.message_limit), 2) end
  if schema ~= nil then
    if type(schema) ~= "table" then error("ctx.agent: outputSchema must be a table (a JSON Schema)", 2) end
    schema = C.clone(schema, "outputSchema", message_max)
  end
  return wait_op({ kind = "agent", name = name, message = message, schema = schema }, "ctx.agent")
end

local function fan(kind)
  local what = "ctx." .. kind
  return function(fns)
    if type(fns) ~= "table" then error(what .. ": a table of functions expected, got " .. type(fns), 2) end
    local n = rawlen(fns)
    if kind == "race" and n == 0 then error("ctx.race: at least one function expected", 2) end
    local list = {}
    for i = 1, n do
      local f = rawget(fns, i)
      if type(f) ~= "function" then error(format("%s: item %d is a %s, not a function", what, i, type(f)), 2) end
      list[i] = f
    end
    return wait_op({ kind = kind, fns = list, n = n }, what)
  end
end

local ctx = C.make_ctx({ agent = agent, all = fan("all"), race = fan("race") })

-- The program's environment -------------------------------------------------

local env = C.newtable(32)
for _, k in B.ipairs { "assert", "error", "ipairs", "pcall", "rawequal", "rawget", "rawlen", "select",
  "tonumber", "type" } do
  env[k] = B[k]
end
env._G = env
env._VERSION = B._VERSION
env.tostring, env.print, env.next = C.tostring, C.print, C.next

local sorted_pairs = C.pairs
env.pairs = function(t)
  local mt = rawmeta(t)
  local h = mt and rawget(mt, "__pairs")
  if h ~= nil then
    local f, s, c = h(t)
    return f, s, c
  end
  return sorted_pairs(t)
end

env.xpcall = function(f, h, ...)
  check_fn(h, "xpcall (handler)", 2)
  local r = pack(pcall(f, ...))
  if r[1] then return unpack(r, 1, r.n) end
  -- the handler runs after the error unwound, in its own protected call
  local hr = pack(pcall(h, r[2]))
  if hr[1] then return false, unpack(hr, 2, hr.n) end
  return false, hr[2]
end

local function forbidden_key(k) return k == "__gc" or k == "__mode" end

env.rawset = function(t, k, v)
  if forbidden_key(k) then error("rawset: '__gc' and '__mode' are not allowed in the sandbox", 2) end
  return rawset(t, k, v)
end

-- A metatable in use without a metatable of its own gets SEAL, so that a
-- __gc or __mode added after setmetatable is refused with a clear error.
-- (A program that removes the __newindex it was given can add one to its
-- table, but its objects' real metatables are copies: below.)
local SEAL = {
  __newindex = function(m, k, v)
    if forbidden_key(k) then error("'__gc' and '__mode' are not allowed in the sandbox", 2) end
    rawset(m, k, v)
  end,
  __metatable = false,
}

-- A metatable in use that has a metatable of its own without __newindex:
-- that one gets SEAL's __newindex (the same behaviour for every other key).
local function guard(m)
  if m ~= SEAL and rawget(m, "__newindex") == nil then rawset(m, "__newindex", SEAL.__newindex) end
end

-- What an object really gets as its metatable is a copy of the program's,
-- made when setmetatable is called and never reachable by the program
-- (getmetatable answers with the program's table, kept under OWN): so no
-- __gc or __mode can reach a metatable the VM uses, whatever the program
-- does to its own tables afterwards (SEAL and guard only make the error
-- clear). A metamethod added to the program's table later is not seen
-- (lookups through __index = that table are). Copies are shared while the
-- program's table keeps the same fields.
local OWN = {}
local copies = {} -- the program's metatable -> its current copy

local function same_fields(mt, real)
  local n = 0
  for k, v in B.next, mt do
    if forbidden_key(k) or rawget(real, k) ~= v then return false end
    n = n + 1
  end
  for k in B.next, real do if k ~= OWN then n = n - 1 end end
  return n == 0
end

local function real_of(mt)
  local real = copies[mt]
  if real and same_fields(mt, real) then return real end
  real = {}
  for k, v in B.next, mt do if not forbidden_key(k) then rawset(real, k, v) end end
  rawset(real, OWN, mt)
  copies[mt] = real
  return real
end

env.setmetatable = function(t, mt)
  if type(mt) == "table" and (rawget(mt, "__gc") ~= nil or rawget(mt, "__mode") ~= nil) then
    error("setmetatable: metatables with __gc or __mode are not allowed in the sandbox", 2)
  end
  local real = type(mt) == "table" and real_of(mt) or mt
  if type(t) == "table" and rawmeta(t) == SEAL then -- t is a metatable in use
    force_setmetatable(t, real)
    if type(real) == "table" then guard(real) end -- (the copy, which the program cannot reach)
  else
    setmetatable(t, real)
  end
  if type(mt) == "table" then
    local m2 = rawmeta(mt)
    if m2 == nil then force_setmetatable(mt, SEAL) elseif type(m2) == "table" then guard(m2) end
  end
  return t
end

env.getmetatable = function(v)
  local m = rawmeta(v)
  if m == SEAL then return nil end
  if type(m) == "table" then
    local own = rawget(m, OWN)
    if own ~= nil then
      local protected = rawget(m, "__metatable")
      if protected ~= nil then return protected end
      return own
    end
  end
  return getmetatable(v)
end

local copy = C.copy -- copy(lib, extra?): a new table of lib's fields, then extra's

local str = copy(S, C.string)
str.dump = nil
env.string = str
env.table = copy(T)
env.table.sort = C.sort -- stable and deterministic (Lua's picks random pivots)
-- table.move in Lua, so that the count hook runs between elements: Lua's
-- own is one C loop the hook cannot stop, and moving nils costs no memory
-- (table.move({}, 1, 2^50, 1) ran past every limit).
local maxint, tointeger, tonumber = M.maxinteger, M.tointeger, B.tonumber
local function int_arg(v, i, fname)
  local n = tointeger(tonumber(v) or v)
  if n == nil then
    error(format("bad argument #%d to '%s' (number has no integer representation)", i, fname or "move"), 3)
  end
  return n
end
-- table.insert and table.remove shift #t elements in one C loop, and #t is
-- what __len says (2^50: a hang): for a table with a metatable, Lua here.
local tinsert, tremove, ult = T.insert, T.remove, M.ult
env.table.insert = function(t, ...)
  if type(t) ~= "table" or rawmeta(t) == nil then tinsert(t, ...) return end
  local nargs = select("#", ...)
  local e = #t + 1
  local pos, v = e, ...
  if nargs == 2 then
    pos, v = int_arg(..., 2, "insert"), select(2, ...)
    if not ult(pos - 1, e) then error("bad argument #2 to 'insert' (position out of bounds)", 2) end
    for i = e, pos + 1, -1 do t[i] = t[i - 1] end
  elseif nargs ~= 1 then
    error("wrong number of arguments to 'insert'", 2)
  end
  t[pos] = v
end
env.table.remove = function(t, ...)
  if type(t) ~= "table" or rawmeta(t) == nil then return (tremove(t, ...)) end
  local size = #t
  local pos = size
  if select("#", ...) > 0 and (...) ~= nil then pos = int_arg(..., 2, "remove") end
  if pos ~= size and ult(size, pos - 1) then error("bad argument #2 to 'remove' (position out of bounds)", 2) end
  local v = t[pos]
  for i = pos, size - 1 do t[i] = t[i + 1] end
  if pos < size then pos = size end
  t[pos] = nil
  return v
end
env.table.move = function(a1, f, e, t, a2)
  if type(a1) ~= "table" then error(format("bad argument #1 to 'move' (table expected, got %s)", type(a1)), 2) end
  f, e, t = int_arg(f, 2), int_arg(e, 3), int_arg(t, 4)
  if a2 == nil then a2 = a1 end
  if type(a2) ~= "table" then error(format("bad argument #5 to 'move' (table expected, got %s)", type(a2)), 2) end
  if e >= f then
    if not (f > 0 or e < maxint + f) then error("bad argument #3 to 'move' (too many elements to move)", 2) end
    local n = e - f
    if t > maxint - n then error("bad argument #4 to 'move' (destination wrap around)", 2) end
    if t > e or t <= f or a1 ~= a2 then
      for i = 0, n do a2[t + i] = a1[f + i] end
    else
      for i = n, 0, -1 do a2[t + i] = a1[f + i] end
    end
  end
  return a2
end
local math = copy(M)
local randomseed, seed = M.randomseed, C.seed
randomseed(seed)
math.randomseed = function(...)
  if select("#", ...) == 0 then return randomseed(seed) end
  return randomseed(...)
end
env.math = math
env.utf8 = copy(U)
env.coroutine = { create = ucreate, resume = uresume, yield = uyield, status = co_status, wrap = uwrap,
  isyieldable = uisyieldable, running = urunning, close = uclose }

-- The string metatable: methods from the program's string table, protected.
local smt = getmetatable("")
smt.__index = str
smt.__metatable = false

-- Entry points for the host (host/sandbox.c) ---------------------------------

local E = {}
E.env = env

function E.set_program(f) program = f end

function E.start()
  main = spawn(function() return program(ctx) end, nil, 0)
  return loop()
end

function E.resume(replies)
  local ids = {}
  for id in B.next, replies do ids[#ids + 1] = id end
  tsort(ids)
  for i = 1, #ids do
    local id = ids[i]
    local t = pending[id]
    if t then
      pending[id] = nil
      t.call = nil
      local r = replies[id]
      push(t, REPLY, t.op, r[1], r[2])
    end
  end
  return loop()
end

function E.pending()
  local ids = {}
  for id in B.next, pending do ids[#ids + 1] = id end
  tsort(ids)
  return ids
end

function E.close()
  if main then cancel(main) end
end

return E
