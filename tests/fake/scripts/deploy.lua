-- First request: a call to the `deploy` tool with {service = "api"}. Once the
-- conversation carries that call's result: the final text "Deployed: <result>".
-- Works for both APIs (OpenAI role "tool" messages, Anthropic tool_result blocks).
local CALL_ID = "call_deploy_1"

return function(req)
  for _, r in ipairs(fake.tool_results(req)) do
    if r.name == "deploy" or r.id == CALL_ID then
      return fake.text("Deployed: " .. r.content)
    end
  end
  return fake.tool_calls({ { id = CALL_ID, name = "deploy", arguments = { service = "api" } } })
end
