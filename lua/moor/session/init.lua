--- Sessions: a conversation with the agent, as a durable run whose body is
-- the turn loop. It waits for messages on its inbox (a hook), calls the model
-- (each call a step, recorded with its usage, so a restart never calls the
-- model again for a finished step), runs the model's tool calls by shape (a
-- plain tool in a step; a workflow tool as a child run the turn parks on),
-- feeds the results back, and ends the turn on a final answer or maxSteps.
-- This file only assembles `require "moor.session"` from its parts:
--   tool.lua   the built-in session tool: the body that holds the conversation
--   loop.lua   one turn: model steps and tool calls, until an answer or maxSteps
--   calls.lua  one tool call by the tool's shape, approvals, what the model reads
--   api.lua    the API's side: create, send, line, details (http.lua, host.lua)
-- How a session is addressed (its tool name, its inbox) and ctx.agent live
-- below, in the authoring API (lua/moor/authoring/agent.lua).
local conf = require "moor.conf"
local agent = require "moor.authoring.agent"
local tool = require "moor.session.tool"
local api = require "moor.session.api"

return {
  TOOL = agent.TOOL,
  DEFAULT_MAX_STEPS = conf.MAX_STEPS,
  CONTENT_WARN_BYTES = conf.CONTENT_WARN_BYTES,
  inbox_token = agent.inbox_token,
  inbox_setup = agent.inbox_setup,
  deliver_step = agent.deliver_step,
  agent_named = agent.agent_named,
  agent_handle = agent.agent_handle,
  agents_snapshot = agent.agents_snapshot,
  tool = tool.tool,
  create = api.create,
  send = api.send,
  line = api.line,
  details = api.details,
  tasks = api.tasks,
}
