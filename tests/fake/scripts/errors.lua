-- Error cases, picked by a word in the last user message:
--   500      500 with an error body
--   slow     a text answer 3 s late (for client timeouts)
--   garbage  200 with a body that is not JSON
--   401      401 {"error":{"message":"invalid api key"}}
--   drop     the connection closed with no response
-- Anything else: a text answer echoing the message.
local function has(text, word)
  return text:find("%f[%w]" .. word .. "%f[%W]") ~= nil
end

return function(req)
  local text = fake.last_user_text(req) or ""
  if has(text, "500") then
    return fake.error(500, "the fake model failed on purpose")
  elseif has(text, "slow") then
    local r = fake.text("sorry, I was slow")
    r.delay = 3000
    return r
  elseif has(text, "garbage") then
    return { status = 200, body = "this is not JSON {" }
  elseif has(text, "401") then
    return { status = 401, json = { error = { message = "invalid api key" } } }
  elseif has(text, "drop") then
    return { close = true }
  end
  return fake.text("you said: " .. text)
end
