-- The workflow tool (issue 10), more: ctx.race cancelling the loser's turn,
-- resumed in place and after a restart (each child session opened once),
-- non-determinism, cancellation closing the program, children's questions at
-- the root session, captured output, program failures without retry.
local moor = require "moor"
local engine = require "moor.engine"
local store = require "moor.store"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local factory = require "moor.tools.workflow"

local register = support.register

local kinds = support.kinds

register("wfm", factory { maxSubagents = 4 })
register("wfm_out", factory { output = 100 })
register("wfm_close", factory { instructions = 200000 })
register("wfm_one", factory { maxSubagents = 1 })
register("wfm_evict", factory { parkedMemory = 1 }) -- (every other parked program is evicted)

-- A slow tool for a subagent: parked until its abortSignal aborts (or an hour).
local slow_reasons = {}
register("wfm_slow", moor.defineWorkflowTool {
  description = "Work slowly.",
  inputSchema = s.object {},
  execute = function(_, ctx)
    local _, idx = moor.race { moor.timer("1h"), ctx.abortSignal }
    local reason = idx == 2 and tostring(ctx.abortSignal.reason) or "timeout"
    slow_reasons[ctx.runId] = reason
    return { reason = reason }
  end,
})

-- A tool that asks a question (a subagent's: the program's child is parked on it).
register("wfm_ask", moor.defineWorkflowTool {
  description = "Ask the person.",
  inputSchema = s.object { q = s.string() },
  execute = function(input, ctx)
    local a = ctx.ask { prompt = input.q, allowFreeform = true }
    return a.text or a.status
  end,
})

-- A subagent whose model calls `tool` on a new message, then answers with
-- the tool's output.
local function caller(tool, prefix)
  return moor.defineAgent { instructions = "x", description = prefix, tool = false,
    model = t.script(function(turn)
      local last = turn.messages[#turn.messages]
      if last.role == "tool" then return prefix .. ": " .. tostring(last.content) end
      return { toolCalls = { { name = tool, input = tool == "wfm_ask" and { q = prefix .. "?" } or {} } } }
    end) }
end

local function echo(prefix)
  return moor.defineAgent { instructions = "x", description = prefix, tool = false,
    model = t.script(function(turn) return prefix .. ": " .. turn.messages[#turn.messages].content end) }
end

local SUBS = { fast = echo("fast"), slow = caller("wfm_slow", "slow"), slow2 = caller("wfm_slow", "slow2"),
               asker1 = caller("wfm_ask", "a1"), asker2 = caller("wfm_ask", "a2") }

-- Every run under id, with its row.
local function tree(id)
  local out = {}
  for _, row in ipairs(store.run_tree(id) or {}) do out[#out + 1] = store.run(row.id) end
  return out
end

local function children(parent, tool)
  local out = {}
  for _, row in ipairs(tree(parent)) do
    if row.parent_id == parent and (tool == nil or row.tool == tool) then out[#out + 1] = row end
  end
  return out
end

-- The sandboxes the workflow tool opens while fn runs (moor.sandbox is
-- looked up at each call).
local function capturing(fn, opened)
  opened = opened or {}
  local real = moor.sandbox
  moor.sandbox = function(...)
    local sb, err = real(...)
    opened[#opened + 1] = sb
    return sb, err
  end
  local ok, err = pcall(fn)
  moor.sandbox = real
  if not ok then error(err, 0) end
  return opened
end

-- A root agent whose model calls tool with program once and then reports
-- the <task_result> block it read (into box.block).
local function boss(tool, program, box)
  return moor.defineAgent { instructions = "x", model = t.script(function(turn)
    if turn.n == 1 then return { toolCalls = { { name = tool, input = { lua = program } } } } end
    for _, m in ipairs(turn.messages) do
      if m.role == "user" and m.content:find("<task_result", 1, true) then box.block = m.content end
    end
    return "ok"
  end) }
end

local function task_run(c)
  local started = kinds(c.events, "task.started")
  assert.are.equal(1, #started)
  return started[1].runId, started[1].taskId
end

describe("the workflow tool, more", function()
  it("ctx.race returns the first reply and cancels the loser's turn while the program goes on", function()
    local out, err, id
    support.with_agents(engine.agent, SUBS, function()
      out, err, id = t.call("wfm", { lua = [[
        local v, i = ctx.race { function() return ctx.agent("slow", { message = "take your time" }) end,
                                function() return ctx.agent("fast", { message = "quick" }) end }
        local after = ctx.agent("fast", { message = "after" })
        return { value = v, index = i, after = after }
      ]] })
    end)
    assert.is_table(out, err and err.message)
    assert.are.same({ value = "fast: quick", index = 2, after = "fast: after" }, out.result)
    -- The loser's session: its turn ended cancelled by the program (a
    -- cancelTurn steers its tool), not by the task's end cancelling it.
    local slow
    for _, e in ipairs(kinds(t.events(id), "agent.started")) do
      if e.name == "slow" then slow = e.sessionId end
    end
    assert.is_string(slow)
    local turns = kinds(t.events(slow), "turn.completed")
    assert.are.equal(1, #turns)
    assert.is_true(turns[1].cancelled)
    local tools = children(slow, "wfm_slow")
    assert.are.equal(1, #tools)
    assert.are.equal("steered", slow_reasons[tools[1].id])
  end)

  it("cancels the loser's turn when the program returns the race's result at once", function()
    local out, err, id
    support.with_agents(engine.agent, SUBS, function()
      out, err, id = t.call("wfm", { lua = [[
        return { ctx.race { function() return ctx.agent("slow", { message = "slowly" }) end,
                            function() return ctx.agent("fast", { message = "now" }) end } }
      ]] })
    end)
    assert.is_table(out, err and err.message)
    assert.are.same({ "fast: now", 2 }, out.result)
    local slow
    for _, e in ipairs(kinds(t.events(id), "agent.started")) do
      if e.name == "slow" then slow = e.sessionId end
    end
    local tools = children(slow, "wfm_slow")
    assert.are.equal(1, #tools)
    -- The program stopped waiting for it (a cancelTurn steers its tool),
    -- then the task's end took the session with it.
    assert.are.equal("steered", slow_reasons[tools[1].id])
    assert.are.equal("cancelled", engine.run_status(slow))
  end)

  it("surfaces the children's questions at the root session, resumes after a restart, opens each child once",
    function()
      local box = {}
      local program = [[
        print("start")
        local r = ctx.all {
          function() return ctx.agent("asker1", { message = "first" }) end,
          function() return ctx.agent("asker2", { message = "second" }) end,
        }
        print("between")
        return { r[1], r[2], ctx.agent("fast", { message = "last" }) }
      ]]
      local root = boss("wfm", program, box)
      local opened = {}
      support.with_agents(root, SUBS, function()
        capturing(function()
          local c = t.converse(root, { "go" }, { maxWait = 3000 })
          local sid = c.sessionId
          local run, task_id = task_run(c)
          -- Both children parked on their questions, which the root session shows.
          local qs = {}
          for _, q in ipairs(engine.inputs()) do
            if q.sessionId == sid then qs[#qs + 1] = q end
          end
          assert.are.equal(2, #qs)
          assert.are.equal(2, #t.inputs(sid))
          -- Each child announced on the task's run, with its task id.
          local announced = kinds(t.events(run), "agent.started")
          assert.are.equal(2, #announced)
          for _, a in ipairs(announced) do
            assert.are.equal(task_id, a.taskId)
            assert.are.equal("moor__session", store.run(a.sessionId).tool)
          end
          assert.are.equal(1, #opened) -- one sandbox so far: nothing re-executed

          -- A restart of every run in the tree (a kill -9 in miniature).
          for _, row in ipairs(tree(sid)) do
            if row.status == "running" then assert(engine.reload(row.id)) end
          end
          t.drive(sid, 3000)
          assert.are.equal("running", engine.run_status(run))
          local again = t.inputs(sid)
          assert.are.equal(2, #again)
          table.sort(again, function(a, b) return a.request.prompt < b.request.prompt end)
          assert.is_true(t.answer(again[1].requestId, { text = "yes1" }))
          assert.is_true(t.answer(again[2].requestId, { text = "yes2" }))
          t.drive(sid, 3000)
          assert.are.equal("completed", engine.run_status(run))
          local res = moor.json.decode(store.run(run).result)
          assert.are.same({ "a1: yes1", "a2: yes2", "fast: last" }, res.result)
          -- The program replayed once after the restart: its log has each line once.
          assert.are.equal("start\nbetween\n", res.output)
          -- Each child session opened exactly once (two before the restart, one after).
          assert.are.equal(3, #children(run, "moor__session"))
          assert.are.equal(3, #kinds(t.events(run), "child.started"))
          assert.is_string(box.block)
          assert.matches('status="completed"', box.block, 1, true)
          assert.matches("fast: last", box.block, 1, true)
        end, opened)
      end)
      assert.are.equal(2, #opened) -- before the restart, and the one replay
    end)

  it("replays a settled reply and goes live for the parked one after a restart", function()
    local id
    support.with_agents(engine.agent, SUBS, function()
      id = t.start("wfm", { lua = [[
        local r = ctx.all {
          function() return ctx.agent("asker1", { message = "wait for me" }) end,
          function() return ctx.agent("fast", { message = "done already" }) end,
        }
        return r[1] .. " / " .. r[2]
      ]] })
      t.drive(id)
      assert.are.equal("running", engine.run_status(id))
      for _, row in ipairs(tree(id)) do
        if row.status == "running" then assert(engine.reload(row.id)) end
      end
      t.drive(id)
      local q = t.inputs(id)
      assert.are.equal(1, #q)
      assert.is_true(t.answer(q[1].requestId, { text = "here" }))
      t.drive(id)
    end)
    local out, err = t.outcome(id)
    assert.is_table(out, err and err.message)
    assert.are.equal("a1: here / fast: done already", out.result)
    assert.are.equal(2, #children(id, "moor__session"))
  end)

  it("settles a ctx.race after a restart and cancels the loser's turn then", function()
    local id
    support.with_agents(engine.agent, SUBS, function()
      id = t.start("wfm", { lua = [[
        local keys = {}
        for k in pairs { zeta = 1, alpha = 2, mid = 3, [10] = 4, [2] = 5 } do keys[#keys + 1] = tostring(k) end
        local tag = table.concat(keys, ",") .. " " .. math.random(1, 1000000000) .. " " .. tostring({})
        local v, i = ctx.race { function() return ctx.agent("slow", { message = tag }) end,
                                function() return ctx.agent("asker1", { message = tag }) end }
        return { value = v, index = i, keys = keys }
      ]] })
      t.drive(id)
      assert.are.equal("running", engine.run_status(id))
      for _, row in ipairs(tree(id)) do
        if row.status == "running" then assert(engine.reload(row.id)) end
      end
      t.drive(id)
      assert.are.equal("running", engine.run_status(id)) -- (the same program: no NonDeterminism)
      local q = t.inputs(id)
      assert.are.equal(1, #q)
      assert.is_true(t.answer(q[1].requestId, { text = "won" }))
      t.drive(id)
    end)
    local out, err = t.outcome(id)
    assert.is_table(out, err and err.message)
    assert.are.same({ value = "a1: won", index = 2, keys = { "2", "10", "alpha", "mid", "zeta" } }, out.result)
    local slow = children(id, "moor__session")
    local tools
    for _, row in ipairs(slow) do
      tools = tools or (#children(row.id, "wfm_slow") > 0 and children(row.id, "wfm_slow"))
    end
    assert.are.equal(2, #slow)
    assert.are.equal(1, #tools)
    assert.are.equal("steered", slow_reasons[tools[1].id])
  end)

  it("resumes after a restart of only the task's and the session's runs (the children live on)", function()
    local box = {}
    local root = boss("wfm", [[
      local r = ctx.all {
        function() return ctx.agent("asker1", { message = "first" }) end,
        function() return ctx.agent("asker2", { message = "second" }) end,
      }
      return r[1] .. " + " .. r[2]
    ]], box)
    local opened = {}
    support.with_agents(root, SUBS, function()
      capturing(function()
        local c = t.converse(root, { "go" })
        local sid = c.sessionId
        local run = task_run(c)
        assert(engine.reload(run))
        assert(engine.reload(sid))
        t.drive(sid)
        local qs = t.inputs(sid)
        assert.are.equal(2, #qs)
        for _, q in ipairs(qs) do assert.is_true(t.answer(q.requestId, { text = "ok" })) end
        t.drive(sid)
        assert.are.equal("completed", engine.run_status(run))
        assert.are.equal(2, #children(run, "moor__session"))
        assert.are.equal(2, #kinds(t.events(run), "child.started"))
        assert.are.equal(2, #kinds(t.events(run), "agent.started"))
      end, opened)
    end)
    assert.are.equal(2, #opened)
    assert.is_string(box.block)
    assert.matches("a1: ok + a2: ok", box.block, 1, true)
  end)

  it("re-executes an evicted program from its replies when its next reply comes", function()
    local program = [[
      print("start %s")
      local a = ctx.agent("fast", { message = "%s " .. math.random(1, 1000) })
      local keys = {}
      for k in pairs { z = 1, y = 2, [3] = 3 } do keys[#keys + 1] = tostring(k) end
      local b = ctx.agent("%s", { message = table.concat(keys) })
      print("after %s")
      local closing <close> = setmetatable({}, { __close = function() print("closed %s") end })
      return { a, b }
    ]]
    local opened = {}
    local a, b, c
    support.with_agents(engine.agent, SUBS, function()
      capturing(function()
        a = t.start("wfm_evict", { lua = program:format("A", "A", "asker1", "A", "A") })
        t.drive(a)
        assert.are.equal(1, #t.inputs(a))
        local before = opened[1]:memory()
        assert.is_true(before > 0)
        b = t.start("wfm_evict", { lua = program:format("B", "B", "asker2", "B", "B") })
        t.drive(b)
        assert.are.equal(0, opened[1]:memory()) -- A evicted when B parked
        assert.is_true(opened[2]:memory() > 0)
        c = t.start("wfm_evict", { lua = program:format("C", "C", "asker1", "C", "C") })
        t.drive(c)
        assert.are.equal(0, opened[2]:memory()) -- then B
        -- A's reply: run again from its replies (a fresh sandbox), then on.
        assert.is_true(t.answer(t.inputs(a)[1].requestId, { text = "for A" }))
        t.drive(a)
        assert.are.equal(4, #opened)
        -- B the same; C (evicted by A's park) is cancelled.
        assert.is_true(t.answer(t.inputs(b)[1].requestId, { text = "for B" }))
        t.drive(b)
        assert.is_true(t.cancel(c))
        t.drive(c)
      end, opened)
    end)
    local out, err = t.outcome(a)
    assert.is_table(out, err and err.message)
    assert.are.equal("fast: A", out.result[1]:match("^fast: A"))
    assert.are.equal("a1: for A", out.result[2])
    assert.are.equal("start A\nafter A\nclosed A\n", out.output) -- (each once: the evicted state's output is gone)
    out, err = t.outcome(b)
    assert.is_table(out, err and err.message)
    assert.are.equal("a2: for B", out.result[2])
    assert.are.equal("start B\nafter B\nclosed B\n", out.output)
    assert.are.equal("cancelled", engine.run_status(c))
    for _, sb in ipairs(opened) do assert.are.equal(0, sb:memory()) end
  end)

  it("brings an evicted program back to run its to-be-closed variables when it is cancelled", function()
    local program = [[
      local closing <close> = setmetatable({}, { __close = function() print("closed %s") end })
      return ctx.agent("asker1", { message = "%s" })
    ]]
    local opened = {}
    local a, b
    support.with_agents(engine.agent, SUBS, function()
      capturing(function()
        a = t.start("wfm_evict", { lua = program:format("A", "A") })
        t.drive(a)
        b = t.start("wfm_evict", { lua = program:format("B", "B") })
        t.drive(b)
        assert.are.equal(0, opened[1]:memory()) -- A evicted
        assert.is_true(t.cancel(a))
        t.drive(a)
        assert.is_true(t.cancel(b))
        t.drive(b)
      end, opened)
    end)
    assert.are.equal("cancelled", engine.run_status(a))
    assert.are.equal(3, #opened) -- A, B, and A brought back to close
    assert.are.equal("closed A\n", opened[3]:output())
    assert.are.equal("closed B\n", opened[2]:output())
    for _, sb in ipairs(opened) do assert.are.equal(0, sb:memory()) end
  end)

  it("runs the code between calls once while the host lives", function()
    local out, err, opened
    support.with_agents(engine.agent, SUBS, function()
      opened = capturing(function()
        out, err = t.call("wfm", { lua = [[
          print("one")
          local a = ctx.agent("fast", { message = "1" })
          print("two")
          local b = ctx.agent("fast", { message = "2" })
          print("three")
          return a .. "," .. b
        ]] })
      end)
    end)
    assert.is_table(out, err and err.message)
    assert.are.equal("fast: 1,fast: 2", out.result)
    assert.are.equal("one\ntwo\nthree\n", out.output)
    assert.are.equal(1, #opened)
  end)

  it("fails a replay whose program asks another call than the log recorded, naming the call", function()
    local inner = factory {}
    local body = inner.task -- (before _bind replaces it)
    register("wfm_nd", inner)
    local id
    support.with_agents(engine.agent, SUBS, function()
      id = t.start("wfm_nd", { lua = [[
        local a = ctx.agent("asker1", { message = "hello" })
        return a
      ]] })
      t.drive(id)
      assert.are.equal("running", engine.run_status(id))
      -- The same tool name, now running another program than was recorded.
      register("wfm_nd", moor.defineWorkflowTool {
        description = inner.description, inputSchema = inner.inputSchema,
        task = function(input, ctx, task)
          input.lua = input.lua:gsub("asker1", "asker2")
          return body(input, ctx, task)
        end })
      t.restart(id)
    end)
    local _, err = t.outcome(id)
    assert.is_table(err)
    assert.are.equal("NonDeterminism", err.code)
    assert.matches("call 1 asks asker2 now, but the log recorded a call to asker1", err.message, 1, true)
  end)

  it("cancelling the task cancels every child turn in flight and closes the program", function()
    local id, opened
    support.with_agents(engine.agent, SUBS, function()
      opened = capturing(function()
        id = t.start("wfm_close", { lua = [[
          local spin <close> = setmetatable({}, { __close = function() while true do end end })
          local x <close> = setmetatable({}, { __close = function() print("closed") end })
          return ctx.all {
            function() return ctx.agent("slow", { message = "a" }) end,
            function() return ctx.agent("slow2", { message = "b" }) end,
          }
        ]] })
        t.drive(id)
        assert.are.equal("running", engine.run_status(id))
        local sessions = children(id, "moor__session")
        assert.are.equal(2, #sessions)
        assert.is_true(t.cancel(id))
        t.drive(id)
        assert.are.equal("cancelled", engine.run_status(id))
        for _, row in ipairs(sessions) do
          assert.are.equal("cancelled", engine.run_status(row.id))
          local tools = children(row.id, "wfm_slow")
          assert.are.equal(1, #tools)
          assert.are.equal("cancelled", engine.run_status(tools[1].id))
          assert.is_string(slow_reasons[tools[1].id]) -- its abortSignal aborted
        end
      end)
    end)
    assert.are.equal(1, #opened)
    -- The to-be-closed variables ran, in reverse order (the looping one, last,
    -- stopped by the instruction budget).
    assert.matches("closed", opened[1]:output(), 1, true)
    assert.are.equal(0, opened[1]:memory())
  end)

  it("stops the program and its children when the session's model cancels the task", function()
    local receipt
    local root = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local last = turn.messages[#turn.messages]
      if turn.n == 1 then
        return { toolCalls = { { name = "wfm", input = { lua = [[
          return ctx.all { function() return ctx.agent("slow", { message = "a" }) end,
                           function() return ctx.agent("slow2", { message = "b" }) end }
        ]] } } } }
      end
      for _, m in ipairs(turn.messages) do
        if m.role == "tool" and not receipt then receipt = tostring(m.content):match("task (wfm%-%w+)") end
      end
      if last.role == "user" and last.content == "stop it" then
        return { toolCalls = { { name = "moor__task_cancel", input = { taskId = receipt } } } }
      end
      return "ok"
    end) }
    local c
    support.with_agents(root, SUBS, function() c = t.converse(root, { "go", "stop it" }) end)
    local run = task_run(c)
    assert.are.equal("cancelled", engine.run_status(run))
    local sessions = children(run, "moor__session")
    assert.are.equal(2, #sessions)
    for _, row in ipairs(sessions) do
      assert.are.equal("cancelled", engine.run_status(row.id))
      local tools = children(row.id, "wfm_slow")
      assert.are.equal(1, #tools)
      assert.are.equal("cancelled", engine.run_status(tools[1].id))
    end
    local stopped
    for _, r in ipairs(c.results) do
      if type(r.output) == "string" and r.output:find("^Stopped wfm%-") then stopped = r.output end
    end
    assert.is_string(stopped)
  end)

  it("refuses an empty message or a bad outputSchema without starting a child, and names the code", function()
    local out, err, id
    support.with_agents(engine.agent, SUBS, function()
      out, err, id = t.call("wfm_one", { lua = [[
        local ok1, e1 = pcall(ctx.agent, "fast", { message = "" })
        local ok2, e2 = pcall(ctx.agent, "fast", { message = "x", outputSchema = { type = "bogus" } })
        local r = ctx.agent("fast", { message = "the one" })
        local ok3, e3 = pcall(ctx.agent, "fast", { message = "one too many" })
        return { ok = { ok1, ok2, ok3 }, codes = { e1.code, e2.code, e3.code }, m1 = e1.message, m2 = e2.message,
                 r = r }
      ]] })
    end)
    assert.is_table(out, err and err.message)
    local r = out.result
    assert.are.same({ false, false, false }, r.ok)
    assert.are.same({ "INVALID_ARGUMENT", "INVALID_ARGUMENT", "SUBAGENT_LIMIT_REACHED" }, r.codes)
    assert.are.equal('ctx.agent("fast"): message must be a non-empty string', r.m1)
    assert.matches('outputSchema is not a JSON Schema moor understands: .*unknown type "bogus"', r.m2)
    assert.are.equal("fast: the one", r.r)
    assert.are.equal(1, #children(id, "moor__session"))
    -- Not caught: the program fails with the error's code and message.
    support.with_agents(engine.agent, SUBS, function()
      out, err = t.call("wfm_one", { lua = 'return ctx.agent("nobody", { message = "x" })' })
    end)
    assert.is_nil(out)
    assert.matches("^AGENT_NOT_ALLOWED: 'nobody' is not a subagent this program may call", err.message)
  end)

  it("caps the captured output and returns it with the result", function()
    local out, err = t.call("wfm_out", { lua = [[
      for i = 1, 100 do print("line " .. i) end
      return "fine"
    ]] })
    assert.is_table(out, err and err.message)
    assert.are.equal("fine", out.result)
    assert.is_true(#out.output <= 200, #out.output)
    assert.matches("^line 1\nline 2\n", out.output)
    assert.is_nil(out.output:find("line 100", 1, true))
    assert.is_true(#out.output <= 100 + #"[output truncated]\n", #out.output) -- (the cap, then the mark)
    assert.matches("%[output truncated%]\n$", out.output)
  end)

  it("gives a non-JSON return and a runtime error with its line to the model as failures, not retried", function()
    for _, case in ipairs {
      { "return function() end", "JSON" },
      { "return { 1, 2, x = 3 }", "the program's result: table mixes array and object keys" },
      { "local a = 1\nlocal b = nil\nreturn a + b.c", "program:3:" },
      { "print('so far')\nerror('it broke')", "it broke" },
    } do
      local box = {}
      local root = boss("wfm", case[1], box)
      local c
      support.with_agents(root, SUBS, function() c = t.converse(root, { "go" }) end)
      assert.is_string(box.block, case[1])
      assert.matches('status="failed"', box.block, 1, true)
      assert.matches(case[2], box.block, 1, true)
      assert.is_nil(box.block:find("=program", 1, true), box.block) -- (the chunk's name as Lua shows it)
      local run = task_run(c)
      assert.are.equal("failed", engine.run_status(run))
      assert.are.equal(0, #kinds(t.events(run), "step.retry"))
      assert.are.equal(0, #kinds(c.events, "step.retry"))
    end
  end)
end)
