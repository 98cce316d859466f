-- Seed 000's approve-with-deadline-and-escalation, as a task: the model gets
-- a receipt at once and the conversation goes on while the one question
-- stays open (4 h, then on-call is paged, then 20 h more: 24 h in all). A
-- steering message never withdraws it; the result arrives later as a
-- <task_result> message. `deploy` is the same flow as an execute tool.
local moor = require "moor"
local deploy = require "lib.deploy"
local s = moor.schema

local planDeploy = moor.step("planDeploy", function(service) return deploy.plan(service) end)
local applyDeploy = moor.step("applyDeploy", function(plan) return deploy.apply(plan) end)
local pageOnCall = moor.step("pageOnCall", function(service) return deploy.page_on_call(service) end)

local APPROVE = {
  { id = "approve", label = "Deploy", style = "primary" },
  { id = "cancel", label = "Cancel" },
}

return moor.defineWorkflowTool {
  description = "Deploy a service to production in the background: a person approves the plan (the question "
    .. "stays open up to 24 hours) while the conversation continues.",
  inputSchema = s.object {
    service = s.string { minLength = 1, pattern = "^[a-z0-9-]+$" },
    escalateAfter = s.optional(s.string { description = "page on-call when unanswered this long (default 4h)" }),
    giveUpAfter = s.optional(s.string { description = "then give up after this long (default 20h)" }),
  },
  task = function(input, ctx)
    local plan = planDeploy(input.service)
    local pending = moor.async(ctx.ask, {
      prompt = ("Deploy %s?\n\n%s"):format(input.service, plan.summary),
      display = "confirmation",
      options = APPROVE,
    })
    local answer = moor.race { pending, moor.timer(input.escalateAfter or "4h") }
    if answer == nil then
      pageOnCall(input.service)
      answer = moor.race { pending, moor.timer(input.giveUpAfter or "20h") }
    end
    if answer == nil then return { deployed = false, reason = "timed out" } end
    if answer.status ~= "answered" or answer.optionId ~= "approve" then
      return { deployed = false, reason = "rejected" }
    end
    return { deployed = true, url = applyDeploy(plan) }
  end,
}
