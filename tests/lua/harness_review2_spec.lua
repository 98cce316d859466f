-- Harness agents (issue 11) through scripted turns: call ids and what a
-- handler may wait on, as a review found them.
local moor = require "moor"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local n = 0
local function workflow(fn)
  n = n + 1
  local name = "harness_review2_spec_" .. n
  support.register(name, moor.defineWorkflowTool { description = "A spec's workflow.", inputSchema = s.object {},
    execute = fn })
  return name
end

describe("harness agents", function()
  it("give each call an id unique in the run, an agent closed and opened again under its key included", function()
    local name = workflow(function()
      local ids = {}
      local function open()
        return moor.harness.open { key = "a", runtime = { command = { "true" } }, tools = {
          note = moor.harness.tool { description = "Note the call.", handler = function(_, call)
            ids[#ids + 1] = call.id
          end },
        } }
      end
      local a = open()
      a:run { prompt = "one" }
      a:close()
      open():run { prompt = "two" }
      return moor.json.array(ids)
    end)
    local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
      turn.tool("note")
      return "ok"
    end) } })
    assert.is_nil(run.error)
    assert.are.equal(2, #run.value)
    assert.are_not.equal(run.value[1], run.value[2])
  end)

  it("refuse a wait on a signal in a handler, as every other wait", function()
    local name = workflow(function()
      local seen
      local a = moor.harness.open { key = "a", runtime = { command = { "true" } }, tools = {
        wait = moor.harness.tool { description = "Wait for the call's end.", handler = function(_, call)
          local ok, err = pcall(call.signal.wait, call.signal)
          seen = ok and "waited" or tostring(err)
        end },
      } }
      a:run { prompt = "go" }
      return seen
    end)
    local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
      turn.tool("wait")
      return "ok"
    end) } })
    assert.is_nil(run.error)
    assert.is_truthy(tostring(run.value):find("can't wait in the handler of a's tool wait", 1, true),
      tostring(run.value))
  end)

  it("t.workflow runs no real harness: an agent it has no script for fails its turn, naming the key", function()
    local name = workflow(function()
      local a = moor.harness.open { key = "unscripted", runtime = { command = { "sh", "-c",
        "echo started > /dev/stderr; exit 0" } } }
      local r = a:run { prompt = "go" }
      return r.outcome
    end)
    local run = t.workflow(name, {}, { agents = {} })
    assert.is_nil(run.error)
    assert.are.equal("failed", run.value.reason)
    assert.is_truthy(tostring(run.value.error):find("no script for agent 'unscripted'", 1, true),
      tostring(run.value.error))
  end)

  it("a scripted turn's answer is refused while its call runs, as a launcher's result is", function()
    local slow = moor.step("harness_review2_slow", function()
      require("moor.engine").io(function(resume) require("moor.core").after(200, resume) end)
      return true
    end, { retries = 0 })
    local name = workflow(function()
      local a = moor.harness.open { key = "a", runtime = { command = { "true" } }, tools = {
        slow = moor.harness.tool { description = "Slow.", handler = function() slow() return "done" end },
      } }
      return a:run { prompt = "go" }.outcome
    end)
    local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
      turn.send("slow") -- not awaited
      return "answered while the call ran"
    end) } })
    assert.is_nil(run.error)
    assert.is_false(run.value.answered)
    assert.are.equal("failed", run.value.reason)
    assert.is_truthy(tostring(run.value.error):find("while its call of slow was running", 1, true),
      tostring(run.value.error))
  end)

  it("a call whose input is over a delivery's size once recorded is refused as bad-request; the turn goes on",
    function()
    local ran = false
    local name = workflow(function()
      local a = moor.harness.open { key = "a", runtime = { command = { "true" } }, tools = {
        echo = moor.harness.tool { description = "Echo.", input = s.object { text = s.string() },
          handler = function(x) ran = true return #x.text end },
      } }
      return a:run { prompt = "go" }.outcome
    end)
    local seen
    local run = t.workflow(name, {}, { agents = { a = t.answer(function(turn)
      -- 700,000 newlines: 1.4 MB as JSON, over the 1 MiB + 64 KiB a delivery holds
      seen = turn.tool("echo", { text = ("\n"):rep(700000) })
      local again = turn.tool("echo", { text = "short" })
      return again.kind == "result" and "went on" or again.code
    end) } })
    assert.is_nil(run.error)
    assert.are.equal("refused", seen.kind)
    assert.are.equal("bad-request", seen.code)
    assert.is_truthy(seen.error:find("too large", 1, true), seen.error)
    assert.are.equal("went on", run.value.value)
    assert.is_true(ran)
  end)
end)
