-- The runtime-generated workflow tool (issue 10): a model-written Lua
-- program run in a sandbox as a task, fanning out to subagents.
local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local factory = require "moor.tools.workflow"

local register = support.register

register("wf", factory { maxSubagents = 3 })
register("wf4", factory { maxSubagents = 4 })

local function helper(prefix, opts)
  return moor.defineAgent { instructions = prefix, description = prefix, tool = false,
    model = t.script(function(turn)
      local last = turn.messages[#turn.messages].content
      if opts and opts.fail then return { error = { code = "model_error", message = "broken model" } } end
      if opts and opts.json then return '{"score": 7}' end
      return prefix .. ": " .. last
    end) }
end

local SUBS = { researcher = helper("research"), operator = helper("ops"), broken = helper("x", { fail = true }),
               scorer = helper("s", { json = true }) }

-- Run program through a session whose model calls wf once; the result block.
local function through_session(program)
  local seen
  local boss = moor.defineAgent { instructions = "x", model = t.script(function(turn)
    if turn.n == 1 then return { toolCalls = { { name = "wf", input = { lua = program } } } } end
    for _, m in ipairs(turn.messages) do
      if m.role == "user" and m.content:find("<task_result", 1, true) then seen = m.content end
    end
    return "done"
  end) }
  local c
  support.with_agents(boss, SUBS, function() c = t.converse(boss, { "go" }, { maxWait = 3000 }) end)
  return seen, c
end

describe("the workflow tool", function()
  it("fans out to two subagents with ctx.all and combines their replies, in a session", function()
    local block, c = through_session([[
      local r = ctx.all {
        function() return ctx.agent("researcher", { message = "find facts" }) end,
        function() return ctx.agent("operator", { message = "check ops" }) end,
      }
      print("two replies")
      return r[1] .. " | " .. r[2]
    ]])
    assert.is_string(block)
    assert.matches('status="completed"', block, 1, true)
    assert.matches("research: find facts | ops: check ops", block, 1, true)
    assert.matches("two replies", block, 1, true)
    -- Each child announced on the task's run, with the task's id.
    local task
    for _, e in ipairs(c.events) do if e.kind == "task.started" then task = e.payload end end
    local started = {}
    for _, e in ipairs(t.events(task.runId)) do
      if e.kind == "agent.started" then
        assert.are.equal(task.taskId, e.payload.taskId)
        started[#started + 1] = e.payload.name
      end
    end
    table.sort(started)
    assert.are.same({ "operator", "researcher" }, started)
  end)

  it("ctx.race returns the first reply; limits, the allowlist, failures, structured output", function()
    local out, err
    support.with_agents(engine.agent, SUBS, function()
      out, err = t.call("wf4", { lua = [[
        local v, i = ctx.race { function() return ctx.agent("researcher", { message = "a" }) end,
                                function() return ctx.agent("operator", { message = "b" }) end }
        local ok, e = pcall(ctx.agent, "nobody", { message = "x" })
        local ok2, e2 = pcall(ctx.agent, "broken", { message = "x" })
        local data = ctx.agent("scorer", { message = "rate", outputSchema = { type = "object" } })
        local ok3, e3 = pcall(ctx.agent, "researcher", { message = "one too many" })
        return { first = i, value = v, notAllowed = e.code, failed = e2.code, score = data.score,
                 limit = e3.code, ok = { ok, ok2, ok3 } }
      ]] })
    end)
    assert.is_table(out, err and err.message)
    local r = out.result
    assert.is_true(r.first == 1 or r.first == 2)
    assert.are.equal("AGENT_NOT_ALLOWED", r.notAllowed)
    assert.are.equal("AGENT_FAILED", r.failed)
    assert.are.equal(7, r.score)
    assert.are.equal("SUBAGENT_LIMIT_REACHED", r.limit)
  end)

  it("gives a syntax error with its line and a non-JSON result as failures, not retried", function()
    local _, err = t.call("wf", { lua = "local x = 1\nreturn (" })
    assert.is_table(err)
    assert.matches("^program:2:", err.message)
    local _, rerr = t.call("wf", { lua = "local x = nil\nreturn x.y" })
    assert.is_table(rerr)
    assert.matches("^program:2: attempt to index a nil value", rerr.message)
    local _, err2 = t.call("wf", { lua = "return function() end" })
    assert.is_table(err2)
    assert.matches("JSON", err2.message)
  end)

  it("refuses a bad maxSubagents at load, with the caller's line", function()
    local ok, e = pcall(function() return factory { maxSubagents = 129 } end)
    assert.is_false(ok)
    assert.are.equal("DefinitionError", e.code)
    assert.are.equal("maxSubagents must be an integer from 1 through 128, not 129", e.message)
    assert.is_false((pcall(factory, { maxSubagents = 0 })))
    assert.is_false((pcall(factory, { maxSubagents = 2.5 })))
    assert.is_true((pcall(factory, {})))
  end)
end)

describe("the workflow tool's host failures", function()
  it("retries a sandbox that cannot open (recorded, so a replay waits the same), then runs", function()
    local real_sandbox, real_sleep = moor.sandbox, moor.sleep
    local fails = 2
    moor.sandbox = function(...)
      if fails > 0 then
        fails = fails - 1
        return nil, { code = "internal", message = "no memory for a new state" }
      end
      return real_sandbox(...)
    end
    moor.sleep = function() return real_sleep("1ms") end
    local ok, out, err, id = pcall(t.call, "wf", { lua = "return 'opened'" })
    moor.sandbox, moor.sleep = real_sandbox, real_sleep
    assert.is_true(ok, tostring(out))
    assert.is_nil(err, err and err.message)
    assert.are.equal("opened", out.result)
    local opens = {}
    for _, e in ipairs(t.events(id)) do
      if e.kind == "step.result" and e.name == "workflow.open" then opens[#opens + 1] = e.payload.ok end
    end
    assert.are.same({ false, false, true }, opens)
  end)
end)
