-- Seed 000's release-plan, a resumable task (serve): the first call drafts a
-- plan, and the model sends more calls to the same task by its taskId to
-- revise it ("add a canary before production", "drop step 2"). Each call is
-- answered with ctx.reply; the plan lives in a local variable of the body,
-- kept across calls and restarts by replay. A cancel aborts the current
-- stretch's signal; the body goes back to receive() and stays available.
local moor = require "moor"
local release_plan = require "lib.release_plan"
local s = moor.schema

local revise = moor.step("revise", function(plan, request) return release_plan.revise(plan, request) end)

return moor.defineWorkflowTool {
  description = "Draft a release plan and revise it on request.",
  inputSchema = s.object { request = s.string { minLength = 1, description = "what to draft or change" } },
  serve = function(receive, ctx)
    local plan
    while true do
      local call = receive() -- the first call, then each by taskId
      local ok, err = pcall(function()
        plan = revise(plan, call.input.request)
        ctx.reply(plan) -- a result; the task stays available
      end)
      if not ok and not call.abortSignal.aborted then error(err, 0) end -- cancelled: wait for the next call
    end
  end,
}
