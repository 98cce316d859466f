--- subagent: makes the tool that exposes an agent to the root agent's model:
-- each declared subagent (agent/subagents/<name>/agent.lua, unless it says
-- tool = false or agent/tools/<name>.lua returns moor.disableTool()), and
-- `agent`, a copy of the root. Not a tool itself: this file returns a
-- function (name, agent) -> tool, which the loader calls once per agent.
-- Every agent tool is a serve tool (seed 000 "Resumable tasks"): each task
-- opens one session with ctx.agent, sends each call's message with that
-- call's abortSignal, and replies with each turn's final response, so the
-- model can continue the conversation by taskId. Written only on the public API.
local moor = require "moor"
local s = moor.schema

return function(name, agent)
  local description = agent.description
  if description == nil or description == "" then
    description = name == "agent" and "Delegate a task to a copy of yourself, with your tools."
      or ("Delegate a task to the %s agent."):format(name)
  end
  return moor.defineWorkflowTool {
    description = description,
    inputSchema = s.object { message = s.string { minLength = 1, description = "what to ask the agent" } },
    serve = function(receive, ctx)
      local session = ctx.agent(name)
      while true do
        local call = receive()
        local r = session:send(call.input.message, { signal = call.abortSignal }):result()
        if r.status == "failed" then
          ctx.reply({ error = r.error and r.error.message or "the agent's turn failed" })
        elseif r.message ~= nil or r.data ~= nil then
          ctx.reply(r.message or r.data)
        else
          ctx.reply({ cancelled = true }) -- (a cancelled turn: the reply is dropped)
        end
      end
    end,
  }
end
