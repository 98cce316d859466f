-- ctx.agent, ctx.agents and subagents, with scripted models.
local moor = require "moor"
local engine = require "moor.engine"
local loader = require "moor.loader"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec", inputSchema = s.object {}, execute = execute }
end

local root = moor.defineAgent { model = t.script { "root" }, instructions = "root", description = "The root." }

describe("ctx.agent", function()
  it("sends a message to a subagent and returns its final message", function()
    local researcher = moor.defineAgent {
      instructions = "research", description = "Finds things.", tool = false,
      model = t.script(function(turn) return "found: " .. turn.messages[#turn.messages].content end),
    }
    support.with_agents(root, { researcher = researcher }, function()
      local res, err, id = t.call(workflow(function(_, ctx)
        local r = ctx.agent("researcher"):send("the answer"):result()
        return { r = r, agents = ctx.agents }
      end), {})
      assert.is_nil(err)
      assert.are.same({ status = "waiting", message = "found: the answer" }, res.r)
      assert.are.same({ agent = { name = "agent", description = "The root.", hidden = false },
                        researcher = { name = "researcher", description = "Finds things.", hidden = true } },
        res.agents)
      local started
      for _, e in ipairs(t.events(id)) do
        if e.kind == "agent.started" then started = e.payload end
      end
      assert.are.equal("researcher", started.name)
    end)
  end)

  it("returns structured data that fits outputSchema, and fails output that does not", function()
    local n = 0
    local analyst = moor.defineAgent {
      instructions = "x",
      model = t.script(function()
        n = n + 1
        if n == 1 then return { data = { findings = { "a", "b" } } } end
        return "not json"
      end),
    }
    support.with_agents(root, { analyst = analyst }, function()
      local res = t.call(workflow(function(_, ctx)
        local a = ctx.agent("analyst")
        local schema = s.object { findings = s.array(s.string()) }
        local good = a:send("review", { outputSchema = schema }):result()
        local bad = a:send("again", { outputSchema = schema }):result()
        return { good = good, bad = bad }
      end), {})
      assert.are.equal("waiting", res.good.status)
      assert.are.same({ "a", "b" }, res.good.data.findings)
      assert.is_nil(res.good.message) -- data, not message, when the turn asked for outputSchema
      assert.are.equal("failed", res.bad.status)
      assert.are.equal("InvalidOutput", res.bad.error.code)
    end)
  end)

  it("fails the first send to an unknown agent", function()
    support.with_agents(root, {}, function()
      local _, err = t.call(workflow(function(_, ctx) return ctx.agent("nobody"):send("hi"):result() end), {})
      assert.are.equal("UnknownAgent", err.code)
      assert.truthy(err.message:find("unknown agent 'nobody'", 1, true))
    end)
  end)

  it("exposes a subagent to the root model as a tool named after it", function()
    local helper = moor.defineAgent { instructions = "help", description = "Helps.",
      model = t.script(function(turn) return "helped with " .. turn.messages[#turn.messages].content end) }
    local tool = loader.subagent_tool("helper", helper)
    engine.register("helper", tool)
    local boss = moor.defineAgent { instructions = "boss", model = t.script(function(turn)
      if turn.n == 1 then return { toolCalls = { { name = "helper", input = { message = "taxes" } } } } end
      -- A subagent tool is a serve tool: its reply comes as a task result.
      for _, m in ipairs(turn.messages) do
        local body = m.role == "user" and m.content:match('<task_result id="helper%-%w+" tool="helper" '
          .. 'status="completed">\n(.-)\n</task_result>')
        if body then return "done: " .. body end
      end
      return "waiting"
    end) }
    support.with_agents(boss, { helper = helper }, function()
      local c = t.converse(boss, { "delegate" })
      assert.are.equal("done: helped with taxes", c.transcript[#c.transcript].text)
    end)
    engine.tools.helper = nil
  end)

  it("gives { status = 'waiting' } for a turn cancelled while the caller waits", function()
    local slow = moor.defineWorkflowTool { description = "sleeps", inputSchema = s.object {},
      execute = function() moor.sleep("1h") end }
    moor._bind(slow, "slow_tool", "spec")
    engine.register("slow_tool", slow)
    local sleeper = moor.defineAgent { instructions = "x",
      model = t.script(function() return { toolCalls = { { name = "slow_tool", input = {} } } } end) }
    support.with_agents(root, { sleeper = sleeper }, function()
      local id = assert(t.start(workflow(function(_, ctx)
        local resp = ctx.agent("sleeper"):send("go")
        coroutine.yield { sessionId = resp.sessionId }
        return resp:result()
      end), {}))
      t.drive(id)
      local sid
      for _, e in ipairs(t.events(id)) do
        if e.kind == "progress" then sid = e.payload.sessionId end
      end
      assert.is_true(t.cancel(sid))
      t.drive(id)
      assert.are.same({ status = "waiting" }, (t.outcome(id)))
    end)
    engine.tools.slow_tool = nil
  end)

  it("joins a message sent while the child's turn runs to that turn", function()
    local slow = moor.defineWorkflowTool { description = "sleeps briefly", inputSchema = s.object {},
      execute = function() moor.sleep("30ms"); return "slept" end }
    moor._bind(slow, "brief_tool", "spec")
    engine.register("brief_tool", slow)
    local seen
    local worker = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      if turn.n == 1 then return { toolCalls = { { name = "brief_tool", input = {} } } } end
      seen = {}
      for _, m in ipairs(turn.messages) do if m.role == "user" then seen[#seen + 1] = m.content end end
      return "both handled"
    end) }
    support.with_agents(root, { worker = worker }, function()
      local res = t.call(workflow(function(_, ctx)
        local a = ctx.agent("worker")
        local first = a:send("first")
        local second = a:send("second") -- sent while the first turn runs
        return { first = first:result(), second = second:result() }
      end), {})
      assert.are.same({ "first", "second" }, seen)
      assert.are.equal("both handled", res.first.message)
      assert.are.same(res.first, res.second)
    end)
    engine.tools.brief_tool = nil
  end)

  it("cancels the turn when the send's signal aborts; the response says waiting", function()
    local slow = moor.defineWorkflowTool { description = "waits for a signal", inputSchema = s.object {},
      execute = function(_, ctx)
        local a = ctx.ask { prompt = "continue?", options = { { id = "y", label = "Y" } } }
        return { asked = a.status }
      end }
    moor._bind(slow, "asking_tool", "spec")
    engine.register("asking_tool", slow)
    local calls = 0
    local asker = moor.defineAgent { instructions = "x", model = t.script(function()
      calls = calls + 1
      return { toolCalls = { { name = "asking_tool", input = {} } } }
    end) }
    support.with_agents(root, { asker = asker }, function()
      local res = t.call(workflow(function(_, ctx)
        local c = moor.AbortController()
        local resp = ctx.agent("asker"):send("go", { signal = c.signal })
        moor.sleep("30ms")
        c:abort("enough")
        return resp:result()
      end), {})
      assert.are.same({ status = "waiting" }, res)
      assert.are.equal(1, calls) -- the model was not asked again after the cancel
    end)
    engine.tools.asking_tool = nil
  end)
end)
