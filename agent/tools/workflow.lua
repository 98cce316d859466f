-- The runtime-generated workflow tool (seed 000): the model writes a short
-- Lua program that fans work out to the researcher and operator subagents
-- (ctx.agent, ctx.all, ctx.race) and combines their replies; moor runs it
-- in a sandbox, as a task. At most 20 subagent sessions per program.
return require("moor.tools.workflow") { maxSubagents = 20 }
