-- The shipped example agent (loaded with `moor test --agent agent`): its
-- subagents and the agent-router tool, with scripted models in place of the
-- hosted ones.
local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing

describe("the example agent", function()
  it("loads the root agent, hidden subagents and their tools", function()
    assert.is_table(engine.agent)
    assert.is_table(engine.agents.researcher)
    assert.is_false(engine.agents.researcher.tool)
    assert.is_nil(engine.tools.researcher) -- tool = false: not a tool of the root model
    assert.is_table(engine.tools["agent-router"])
    assert.are.same({ lifetime = "step", suspend = "workflow" }, engine.tools.deploy.shape)
  end)

  it("routes research to the researcher and operations to the operator", function()
    engine.agents.researcher.model = t.script(function(turn)
      return "research says: " .. turn.messages[#turn.messages].content
    end)
    engine.agents.operator.model = t.script(function() return "operator did it" end)
    local res, err = t.call("agent-router", { task = "explain the analysis of our findings" })
    assert.is_nil(err)
    assert.are.same({ agent = "researcher", answer = "research says: explain the analysis of our findings" }, res)
    res = t.call("agent-router", { task = "deploy the services" })
    assert.are.same({ agent = "operator", answer = "operator did it" }, res)
  end)
end)
