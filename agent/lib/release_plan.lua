-- The example's release planner: a plan is a list of steps, revised by
-- plain-language requests ("add a canary", "drop step 2"). Pure functions:
-- the release-plan tool calls them from a step.
local M = {}

local DEFAULT = { "freeze main", "tag the release", "deploy to staging", "deploy to production" }

--- plan (or nil for a new one) revised by request: a new plan table.
function M.revise(plan, request)
  local steps = {}
  for i, v in ipairs(plan and plan.steps or DEFAULT) do steps[i] = v end
  local drop = request:match("drop step (%d+)")
  if drop and steps[tonumber(drop)] then
    table.remove(steps, tonumber(drop))
  elseif request:match("^add ") then
    table.insert(steps, #steps, request:sub(5))
  end
  return { revision = (plan and plan.revision or 0) + 1, steps = steps, lastRequest = request }
end

return M
