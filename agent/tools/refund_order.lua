-- Seed 000's refund_order: ask now, act when answered.
local moor = require "moor"
local refunds = require "lib.refunds"
local s = moor.schema

local issueRefund = moor.step("issueRefund", function(orderId, amount)
  -- steps are at-least-once: the idempotency key makes the refund exactly-once
  return refunds.issue(orderId, amount, moor.stepInfo().idempotencyKey)
end)

return moor.defineWorkflowTool {
  description = "Request approval to refund an order, then issue the refund once approved.",
  inputSchema = s.object { orderId = s.string { minLength = 1 }, amount = s.number { minimum = 0 } },
  execute = function(input, ctx)
    local decision = ctx.ask {
      prompt = ("Refund $%.2f on order %s?"):format(input.amount, input.orderId),
      display = "confirmation",
      options = {
        { id = "approve", label = "Refund", style = "primary" },
        { id = "deny", label = "Deny" },
      },
    }
    if decision.status ~= "answered" or decision.optionId ~= "approve" then
      return { refunded = false, status = decision.status }
    end
    return { refunded = true, refundId = issueRefund(input.orderId, input.amount) }
  end,
}
