--- subagent: makes the tool that exposes a declared subagent
-- (agent/subagents/<name>/agent.lua) to the root agent's model, unless the
-- subagent says tool = false or agent/tools/<name>.lua returns
-- moor.disableTool(). Not a tool itself: this file returns a function
-- (name, agent) -> tool, which the loader calls once per subagent. The tool
-- sends the model's message to the subagent's session through ctx.agent and
-- returns its reply. Written only on the public API.
local moor = require "moor"
local s = moor.schema

return function(name, agent)
  return moor.defineWorkflowTool {
    description = agent.description or ("Delegate a task to the %s agent."):format(name),
    inputSchema = s.object { message = s.string { minLength = 1, description = "what to ask the agent" } },
    execute = function(input, ctx)
      local r = ctx.agent(name):send(input.message):result()
      if r.status == "failed" then error(moor.FatalError(r.error and r.error.message or "the agent failed")) end
      return r.message or r.data
    end,
  }
end
