-- Benchmark agent for tasks (issue 9): a scripted model (no model time). A
-- session's one message says what its turn does: "run K" calls the task
-- tool `job` K times in one model step (the bodies have no waits), "park K"
-- the same with each body parked on an hour's sleep; every later step
-- answers "ok", and the turn holds until its tasks' results are in. "run 0"
-- is a turn with no tasks.
local moor = require "moor"

return moor.defineAgent {
  instructions = "bench",
  maxSteps = 100, -- results may arrive over several boundaries
  model = moor.testing.script(function(turn)
    local msgs = turn.messages
    if #msgs > 1 then return "ok" end
    local mode, k = msgs[1].content:match("^(%a+) (%d+)$")
    if k == "0" then return "ok" end -- (an idle session, for the sessions' own share)
    local calls = {}
    for i = 1, tonumber(k) do
      calls[i] = { name = "job", input = mode == "park" and { n = i, park = "1h" } or { n = i } }
    end
    return { toolCalls = calls }
  end),
}
