-- The seed's agent-router: the root model decides to delegate, and this tool
-- picks the specialist (hidden subagents, tool = false) by matching the task
-- against their descriptions in a step, then hands the task to it.
local moor = require "moor"
local s = moor.schema

local function words(text)
  local set = {}
  for w in text:lower():gmatch("%a+") do
    if #w > 3 then set[w:gsub("s$", "")] = true end
  end
  return set
end

-- A step: the choice is recorded, so a replay routes the same way.
local chooseTarget = moor.step("chooseTarget", function(task, criteria)
  local want = words(task)
  local best, best_score = nil, -1
  for _, name in ipairs(criteria.names) do
    local score = 0
    for w in pairs(words(criteria.descriptions[name])) do
      if want[w] then score = score + 1 end
    end
    if score > best_score then best, best_score = name, score end
  end
  return { target = best, score = best_score }
end)

return moor.defineWorkflowTool {
  description = "Hand a task to the right specialist agent (research or operations) and return its answer.",
  inputSchema = s.object { task = s.string { minLength = 1 } },
  execute = function(input, ctx)
    local names, descriptions = {}, {}
    for name, a in moor.sortedPairs(ctx.agents) do
      if name ~= "agent" and a.description ~= "" then
        names[#names + 1] = name
        descriptions[name] = a.description
      end
    end
    if #names == 0 then error(moor.FatalError("no specialist agents to route to")) end
    local choice = chooseTarget(input.task, { names = names, descriptions = descriptions })
    coroutine.yield { routedTo = choice.target }
    local r = ctx.agent(choice.target):send(input.task, { signal = ctx.abortSignal }):result()
    if r.status == "failed" then error(moor.FatalError(r.error and r.error.message or "the specialist failed")) end
    return { agent = choice.target, answer = r.message }
  end,
}
