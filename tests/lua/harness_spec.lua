-- Harness agents (issue 11, seed 001) through scripted turns: the rules of
-- "Defining one", "Errors", "Time", "What a handler can't do", "Limits" and
-- "Forks, reopening and messages", on the real engine (moor.testing.workflow).
-- The launcher, the socket and real processes: tests/e2e/test_harness_agent.sh.
local moor = require "moor"
local engine = require "moor.engine"
local core = require "moor.core"
local teach = require "moor.harness.teach"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local function workflow(fn) return support.workflow("harness_spec", fn) end

local function echo_tool(extra)
  local spec = {
    description = "Echo the text.",
    input = s.object { text = s.string { minLength = 1 } },
    handler = function(x) return x.text end,
  }
  for k, v in pairs(extra or {}) do spec[k] = v end
  return moor.harness.tool(spec)
end

local function open(tools, key)
  return moor.harness.open { key = key or "a", runtime = { command = { "true" } }, tools = tools }
end

describe("moor.harness", function()
  describe("opening an agent checks every limit then", function()
    local function refused(tools)
      local name = workflow(function() open(tools) return "opened" end)
      local _, err = t.call(name, {})
      assert.is_table(err, "opened")
      return err.message
    end

    it("at most 16 tools", function()
      local tools = {}
      for i = 1, 17 do tools["t" .. i] = echo_tool() end
      assert.is_truthy(refused(tools):find("at most 16 tools; this one is given 17", 1, true))
      tools.t17 = nil
      local name = workflow(function() open(tools) return "opened" end)
      assert.are.equal("opened", (t.call(name, {})))
    end)

    it("names of lowercase letters, digits and _", function()
      for _, bad in ipairs { "Add", "add-finding", "add finding", "" } do
        assert.is_truthy(refused({ [bad] = echo_tool() }):find("lowercase letters, digits and _", 1, true), bad)
      end
    end)

    it("tools made with moor.harness.tool, with a description and an object input", function()
      assert.is_truthy(refused({ x = { handler = print } }):find("moor.harness.tool", 1, true))
      assert.has_error(function() moor.harness.tool { description = "", handler = print } end)
      assert.has_error(function() moor.harness.tool { description = "x", input = s.string(), handler = print } end)
      assert.has_error(function() moor.harness.tool { description = "x", handler = print, timeout = "soon" } end)
      assert.has_error(function() moor.harness.tool { description = "x", handler = print, retries = 2 } end)
    end)

    it("the runtime and the key", function()
      local name = workflow(function()
        moor.harness.open { key = "a", runtime = "gpt" }
      end)
      local _, err = t.call(name, {})
      assert.is_truthy(err.message:find('runtime must be "claude", "codex" or { command', 1, true), err.message)
      name = workflow(function() moor.harness.open { key = "a b", runtime = "codex" } end)
      _, err = t.call(name, {})
      assert.is_truthy(err.message:find("key must be", 1, true), err.message)
    end)
  end)

  describe("reopening a key", function()
    it("must give the same names, descriptions and schemas; new handlers replace the old", function()
      local name = workflow(function()
        local a = open({ echo = echo_tool() })
        local again = open({ echo = echo_tool { handler = function(x) return "again: " .. x.text end } })
        assert(again == a, "the same agent")
        local kept = moor.harness.open { key = "a" } -- tools left out: it keeps what it has
        assert(kept == a)
        local r = a:run { prompt = "echo" }
        local ok, err = pcall(open, { echo = echo_tool { description = "Echo it." } })
        return { r = r.outcome.value, refused = not ok and tostring(err) or "" }
      end)
      local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
        return turn.tool("echo", { text = "hi" }).output
      end) } })
      assert.is_nil(run.error)
      assert.are.equal("again: hi", run.value.r)
      assert.is_truthy(run.value.refused:find("echo's description differs", 1, true), run.value.refused)
    end)
  end)

  describe("errors", function()
    local function one(tool, input, script_fn)
      local name = workflow(function()
        local a = open({ x = tool })
        return a:run { prompt = "go" }.outcome
      end)
      local seen
      local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
        seen = script_fn and script_fn(turn) or turn.tool("x", input)
        return "done"
      end) } })
      assert.is_nil(run.error)
      return seen
    end

    it("a throw fails the call with exactly its message; an error object gives its message", function()
      local seen = one(echo_tool { handler = function() error("src/a.ts:3 is already recorded") end }, { text = "a" })
      assert.are.same({ kind = "failed", outcome = "failed", error = "src/a.ts:3 is already recorded" }, seen)
      seen = one(echo_tool { handler = function() error(moor.FatalError("no token for GitHub")) end }, { text = "a" })
      assert.are.equal("no token for GitHub", seen.error)
    end)

    it("a result that isn't JSON, or is over 64 KiB as JSON, fails the call", function()
      local seen = one(echo_tool { handler = function() return { f = print } end }, { text = "a" })
      assert.are.equal("failed", seen.kind)
      assert.is_truthy(seen.error:find("isn't JSON", 1, true), seen.error)
      seen = one(echo_tool { handler = function() return ("x"):rep(64 * 1024) end }, { text = "a" })
      assert.are.equal("failed", seen.kind)
      assert.is_truthy(seen.error:find("over 64 KiB", 1, true), seen.error)
      seen = one(echo_tool { handler = function() return ("x"):rep(60 * 1024) end }, { text = "a" })
      assert.are.equal("result", seen.kind)
    end)

    it("nothing returned is nothing; any other JSON value is given as it is", function()
      assert.are.same({ kind = "result" }, one(echo_tool { handler = function() end }, { text = "a" }))
      assert.are.same({ kind = "result", output = { n = 1, ok = true } },
        one(echo_tool { handler = function() return { n = 1, ok = true } end }, { text = "a" }))
    end)

    it("input that doesn't fit is refused before the handler runs", function()
      local ran = false
      local tool = echo_tool { handler = function() ran = true end }
      for _, bad in ipairs { { text = "" }, { text = 3 }, {} } do
        local seen = one(tool, bad)
        assert.are.equal("refused", seen.kind)
        assert.are.equal("invalid-input", seen.code)
      end
      assert.is_false(ran)
    end)

    it("a tool without input is given {}", function()
      local got
      local tool = moor.harness.tool { description = "List.", handler = function(x) got = x return "ok" end }
      assert.are.same({ kind = "result", output = "ok" }, one(tool, nil))
      assert.are.same({}, got)
      assert.are.equal("invalid-input", one(tool, { x = 1 }).code)
    end)
  end)

  describe("time and one call at a time", function()
    local slow = moor.step("harness_spec_slow", function(ms)
      engine.io(function(resume) core.after(ms, resume) end)
      return true
    end, { retries = 0 })

    it("a second call while one runs is refused as busy; the same input again gets the first's answer", function()
      local runs = 0
      local name = workflow(function()
        local a = open({ x = echo_tool { handler = function(x)
          runs = runs + 1
          slow(100)
          return "done " .. x.text
        end } })
        return a:run { prompt = "go" }.outcome
      end)
      local seen = {}
      t.workflow(name, {}, { agents = { a = t.answer(function(turn)
        local first = turn.send("x", { text = "1" })
        local same = turn.send("x", { text = "1" })
        seen.other = turn.tool("x", { text = "2" })
        seen.first, seen.same = first(), same()
        seen.after = turn.tool("x", { text = "2" }) -- after the first answered: runs again
        return "ok"
      end) } })
      assert.are.equal("busy", seen.other.code)
      assert.are.same({ kind = "result", output = "done 1" }, seen.first)
      assert.are.same({ kind = "result", output = "done 1" }, seen.same)
      assert.are.same({ kind = "result", output = "done 2" }, seen.after)
      assert.are.equal(2, runs)
    end)

    it("a handler's time up aborts call.signal, then after the grace the agent is told it may have run", function()
      local saved = { teach.LIMITS.handler_seconds, teach.LIMITS.grace_seconds }
      teach.LIMITS.handler_seconds, teach.LIMITS.grace_seconds = 0.1, 0.1
      local aborted
      local name = workflow(function()
        local a = open({ x = echo_tool { handler = function(_, call)
          slow(600)
          aborted = call.signal.aborted
          return "late"
        end } })
        local r = a:run { prompt = "go" }
        moor.sleep("800ms") -- (the handler goes on after its call ended)
        return r.outcome
      end)
      local seen
      local ok, err = pcall(function()
        local started = core.mono()
        t.workflow(name, {}, { agents = { a = t.answer(function(turn)
          seen = turn.tool("x", { text = "1" })
          seen.ms = (core.mono() - started) // 1000
          return "ok"
        end) } })
      end)
      teach.LIMITS.handler_seconds, teach.LIMITS.grace_seconds = saved[1], saved[2]
      assert(ok, err)
      assert.are.equal("refused", seen.kind)
      assert.are.equal("timed-out", seen.code)
      assert.is_truthy(seen.error:find("may have run", 1, true))
      assert.is_true(seen.ms >= 200 and seen.ms < 600, tostring(seen.ms))
      assert.is_true(aborted)
    end)

    it("timeout = false leaves the turn's deadline; a tool's own timeout sets when its signal aborts", function()
      local name = workflow(function()
        local a = open({
          none = echo_tool { handler = function() slow(300) return "in time" end, timeout = false },
          short = echo_tool { handler = function(_, call)
            slow(300)
            return call.signal.aborted and "aborted" or "not aborted"
          end, timeout = "100ms" },
        })
        return a:run { prompt = "go" }.outcome
      end)
      local seen = {}
      t.workflow(name, {}, { agents = { a = t.answer(function(turn)
        seen.none = turn.tool("none", { text = "1" })
        seen.short = turn.tool("short", { text = "1" })
        return "ok"
      end) } })
      assert.are.same({ kind = "result", output = "in time" }, seen.none)
      -- (its signal aborted at 100 ms; it answered within the 5 s grace)
      assert.are.same({ kind = "result", output = "aborted" }, seen.short)
    end)
  end)

  describe("a handler still running when its turn ends", function()
    local slow = moor.step("harness_spec_slow_end", function(ms)
      engine.io(function(resume) core.after(ms, resume) end)
      return true
    end, { retries = 0 })

    it("gets the grace to finish: what it recorded is kept", function()
      local name = workflow(function()
        local found = {}
        local a = open({ x = echo_tool { handler = function(x)
          slow(200)
          found[#found + 1] = x.text
          return "kept"
        end } })
        local r = a:run { prompt = "go" }
        return { found = moor.json.array(found), reason = r.outcome.reason }
      end)
      local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
        turn.send("x", { text = "late" })
        return t.reply.timedOut()
      end) } })
      assert.is_nil(run.error)
      assert.are.same({ found = { "late" }, reason = "timed-out" }, run.value)
    end)
  end)

  describe("what a handler can't do", function()
    it("wait on the world, or give work to the agent that called it; it may run another agent", function()
      local name = workflow(function()
        local a, b
        local seen = {}
        a = open({
          waits = echo_tool { handler = function()
            for what, fn in pairs {
              sleep = function() moor.sleep("1s") end,
              hook = function() moor.createHook() end,
              race = function() moor.race { moor.timer("1s") } end,
              run = function() a:run { prompt = "again" } end,
              fork = function() a:fork { key = "a2" } end,
              close = function() a:close() end,
            } do
              local ok, err = pcall(fn)
              seen[what] = not ok and tostring(err) or "allowed"
            end
            return "checked"
          end },
          ask_b = echo_tool { handler = function(x)
            return b:run { prompt = x.text }.outcome.value
          end },
        })
        b = moor.harness.open { key = "b", runtime = { command = { "true" } }, tools = {} }
        a:run { prompt = "go" }
        return seen
      end)
      local got
      local run = t.workflow(name, {}, { agents = {
        a = t.answer(function(turn)
          turn.tool("waits", { text = "x" })
          got = turn.tool("ask_b", { text = "what is 6 x 7?" })
          return "ok"
        end),
        b = t.answer(function(turn) return turn.prompt:match("^what is 6 x 7%?") and "42" or "?" end),
      } })
      assert.is_nil(run.error)
      for _, what in ipairs { "sleep", "hook", "race" } do
        assert.is_truthy(run.value[what]:find("can't wait in the handler of a's tool waits", 1, true),
          what .. ": " .. run.value[what])
      end
      for _, what in ipairs { "run", "fork", "close" } do
        assert.is_truthy(run.value[what]:find("a is working on a turn", 1, true), what .. ": " .. run.value[what])
      end
      assert.are.same({ kind = "result", output = "42" }, got)
    end)
  end)

  describe("the log", function()
    it("records each call's input and its result or error, and a replay rebuilds what handlers built", function()
      local name = workflow(function()
        local findings = {}
        local a = open({ add = moor.harness.tool {
          description = "Add one.",
          input = s.object { what = s.string() },
          handler = function(x)
            if x.what == "dup" then error("dup is already recorded") end
            findings[#findings + 1] = x.what
            return #findings
          end,
        } })
        local r = a:run { prompt = "go" }
        moor.createHook { token = "harness-spec-after" }:await()
        return { findings = moor.json.array(findings), ended = r.outcome.answered and "answered" or r.outcome.reason }
      end)
      local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
        turn.tool("add", { what = "one" })
        turn.tool("add", { what = "dup" })
        turn.tool("add", { what = "two" })
        return "ok"
      end) } })
      assert.are.equal("running", run.status)
      local calls, replies = {}, {}
      for _, e in ipairs(t.events(run.runId)) do
        if e.kind == "hook.received" and e.payload.call then calls[#calls + 1] = e.payload.call end
        if e.kind == "step.result" and e.name == "harness.reply" then replies[#replies + 1] = e.payload end
      end
      assert.are.equal(3, #calls)
      assert.are.same({ what = "dup" }, calls[2].input)
      assert.are.equal("add", calls[2].tool)
      assert.are.same({ id = calls[1].id, output = 1 }, replies[1])
      assert.are.same({ id = calls[2].id, error = "dup is already recorded" }, replies[2])
      -- Replayed from the log: the handlers are given the same calls again.
      local result = select(1, t.restart(run.runId))
      assert.is_nil(result)
      assert.is_truthy(t.deliver("harness-spec-after", { go = true }))
      t.drive(run.runId)
      local v = t.outcome(run.runId)
      assert.are.same({ findings = { "one", "two" }, ended = "answered" }, v)
    end)
  end)

  describe("forks", function()
    it("need a conversation; continue it with the parent's tools unless given their own", function()
      local name = workflow(function()
        local a = open({ echo = echo_tool() })
        local ok, err = pcall(a.fork, a, { key = "early" })
        local r1 = a:run { prompt = "first" }
        local r2 = a:run { prompt = "second" }
        local f = a:fork { key = "f" }
        local g = a:fork { key = "g", tools = {} }
        return { early = not ok and tostring(err) or "", r1 = r1.outcome.value, r2 = r2.outcome.value,
          f = f:run { prompt = "f" }.outcome.value, g = g:run { prompt = "g" }.outcome.value }
      end)
      local run = t.workflow(name, {}, { agents = {
        a = t.answer(function(turn)
          turn.session("conv-1")
          return (turn.resume or "new") .. "/" .. (turn.fork or "-")
        end),
        f = t.answer(function(turn)
          return turn.fork .. " " .. turn.tool("echo", { text = "from f" }).output
        end),
        g = t.answer(function(turn) return turn.fork .. " " .. turn.tool("echo", { text = "from g" }).code end),
      } })
      assert.is_nil(run.error)
      assert.is_truthy(run.value.early:find("no conversation to fork yet", 1, true), run.value.early)
      assert.are.equal("new/-", run.value.r1)
      assert.are.equal("conv-1/-", run.value.r2)
      assert.are.equal("conv-1 from f", run.value.f)
      assert.are.equal("conv-1 unknown-tool", run.value.g)
    end)
  end)
end)
