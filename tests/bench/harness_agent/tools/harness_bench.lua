-- Benchmark tool (tests/bench/harness.lua): one harness agent, run by the
-- fake harness (tests/fake/fake_harness.lua), with one tool whose handler
-- does nothing; the agent's script calls it through the launcher, one call
-- after another, and times each call from the shell.
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Time launcher round trips of a tool that does nothing.",
  inputSchema = s.object { fake = s.string(), script = s.string(), log = s.string() },
  execute = function(input)
    local agent = moor.harness.open {
      key = "bench",
      runtime = { command = { "lua5.4", input.fake, "--script", input.script, "--log", input.log } },
      tools = { noop = moor.harness.tool { description = "Do nothing.", handler = function() end } },
    }
    local r = agent:run { prompt = "Call noop as fast as you can, then answer.", timeout = "30m" }
    return { answered = r.outcome.answered, reason = r.outcome.reason }
  end,
}
