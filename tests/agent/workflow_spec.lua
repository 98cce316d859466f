-- The example agent's workflow tool (agent/tools/workflow.lua): a scripted
-- root model writes a fan-out program to the researcher and the operator
-- (scripted too) and reads their combined replies as the task's result.
local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing

describe("the example agent's workflow tool", function()
  it("names the subagents a program may call in the agent's instructions", function()
    assert.is_table(engine.tools.workflow)
    assert.are.equal("task", engine.tools.workflow.shape.lifetime)
    for _, name in ipairs { "workflow", "researcher", "operator", "ctx.agent" } do
      assert.is_truthy(engine.agent.instructions:find(name, 1, true), name)
    end
  end)

  it("fans out to the researcher and the operator and combines their replies", function()
    local saved = { engine.agent.model, engine.agents.researcher.model, engine.agents.operator.model }
    local asked, block = {}, nil
    engine.agents.researcher.model = t.script(function(turn)
      asked.researcher = turn.messages[#turn.messages].content
      return "the changelog has 3 fixes"
    end)
    engine.agents.operator.model = t.script(function(turn)
      asked.operator = turn.messages[#turn.messages].content
      return "staging is green"
    end)
    engine.agent.model = t.script(function(turn)
      if turn.n == 1 then
        return { toolCalls = { { name = "workflow", input = { lua = [[
          local r = ctx.all {
            function() return ctx.agent("researcher", { message = "what changed in 1.2?" }) end,
            function() return ctx.agent("operator", { message = "is staging healthy?" }) end,
          }
          print("asked both")
          return { research = r[1], operations = r[2] }
        ]] } } } }
      end
      for _, m in ipairs(turn.messages) do
        if m.role == "user" and m.content:find("<task_result", 1, true) then block = m.content end
      end
      return block and "Ready to ship." or "Asking the specialists."
    end)
    local ok, c = pcall(t.converse, engine.agent, { "can we ship 1.2?" })
    engine.agent.model, engine.agents.researcher.model, engine.agents.operator.model = saved[1], saved[2], saved[3]
    assert.is_true(ok, c)
    assert.are.same({ researcher = "what changed in 1.2?", operator = "is staging healthy?" }, asked)
    assert.is_string(block)
    assert.matches('tool="workflow" status="completed"', block, 1, true)
    assert.matches('"research":"the changelog has 3 fixes"', block, 1, true)
    assert.matches('"operations":"staging is green"', block, 1, true)
    assert.matches("asked both", block, 1, true)
    local last = c.transcript[#c.transcript]
    assert.are.same({ "assistant", "Ready to ship." }, { last.role, last.text })
  end)
end)
