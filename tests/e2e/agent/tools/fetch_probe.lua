-- Test tool: one moor.fetch POST with an x-api-key and a custom header, in
-- a step; returns the status and the body it got (e.g. after a redirect).
local moor = require "moor"
local s = moor.schema

local send = moor.step("send", function(url, key)
  local resp, err = moor.fetch { url = url, method = "POST", body = "{}",
    headers = { ["x-api-key"] = key, ["x-custom"] = "mine", ["content-type"] = "application/json" } }
  if not resp then return { error = err } end
  return { status = resp.status, body = resp.body }
end)

return moor.defineWorkflowTool {
  description = "Test tool: POST with an x-api-key through moor.fetch.",
  inputSchema = s.object { url = s.string { minLength = 1 }, key = s.string() },
  execute = function(input) return send(input.url, input.key) end,
}
