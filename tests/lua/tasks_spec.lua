-- Tasks (issue 9): task, serve and background tools in a session with a
-- scripted model; receipts, results at step boundaries, the turn rule,
-- moor__task_wait / moor__task_cancel, limits, postMessage, restarts.
local moor = require "moor"
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local t = moor.testing
local s = moor.schema

local register = support.register

local kinds = support.kinds

register("deploy", moor.defineWorkflowTool {
  description = "Deploy a service.",
  inputSchema = s.object { service = s.string() },
  task = function(input)
    moor.sleep("30ms")
    return { deployed = input.service }
  end,
})

describe("tasks", function()
  it("gives a receipt at once, holds the turn while the task works, then shows the result", function()
    local seen = {}
    local agent = moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        seen[turn.n] = { messages = { table.unpack(turn.messages) } } -- (the transcript grows on)
        if turn.n == 1 then return { toolCalls = { { name = "deploy", input = { service = "api" } } } } end
        if turn.n == 2 then return "Deploying." end
        return "Deployed."
      end),
    }
    local c = t.converse(agent, { "deploy api" })
    local tool_msg
    for _, m in ipairs(seen[2].messages) do if m.role == "tool" then tool_msg = m end end
    assert.are.equal("tool", tool_msg.role)
    assert.matches("^Started task deploy%-[0-9a-hjkmnp-tv-z]+%. Its result will arrive in a <task_result> message%.$",
      tool_msg.content)
    local id = tool_msg.content:match("task (deploy%-%w+)")
    local result
    for _, m in ipairs(seen[3].messages) do
      if m.role == "user" and m.content:find("<task_result", 1, true) then result = m.content end
    end
    assert.is_string(result)
    assert.matches('<task_result id="' .. id .. '" tool="deploy" status="completed">', result, 1, true)
    assert.matches('{"deployed":"api"}', result, 1, true)
    assert.are.equal(1, #kinds(c.events, "task.started"))
    local settled = kinds(c.events, "task.settled")
    assert.are.equal(1, #settled)
    assert.are.equal("completed", settled[1].status)
    assert.are.equal(1, #kinds(c.events, "turn.held"))
    assert.are.equal(1, #kinds(c.events, "turn.completed"))
  end)
end)
