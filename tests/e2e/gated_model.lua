-- Fake model for test_approval_channels.sh: call the gated `charge` tool with
-- {amount = 5}; once the conversation carries its result, say so.
return function(req)
  for _, r in ipairs(fake.tool_results(req)) do
    if r.name == "charge" then return fake.text("Charged: " .. r.content) end
  end
  return fake.tool_calls({ { id = "call_charge_" .. req.n, name = "charge", arguments = { amount = 5 } } })
end
