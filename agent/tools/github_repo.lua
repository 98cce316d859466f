-- Reads a repository from FakeHub (agent/connections/fakehub.lua) as the
-- person who asked (issue 12, seed 000 "Authorize inside a step"): the step
-- gets the call's ctx directly, so ctx.getToken works there. With no token the
-- run parks on a sign-in (authorization.required); after it the whole step
-- runs again. A 401 drops the token and asks for a sign-in again. The token
-- stays inside the step: the step returns the repository, never the token.
local moor = require "moor"
local s = moor.schema

local fakehub = moor.connection("fakehub")

local readRepository = moor.step("readRepository", function(ctx, repository)
  local base = os.getenv("FAKEHUB_URL") or "http://127.0.0.1:7399"
  local token = ctx.getToken(fakehub).token
  local res, err = moor.fetch(base .. "/resource/repos/" .. repository, {
    headers = { authorization = "Bearer " .. token, accept = "application/json" },
  })
  if not res then error("FakeHub did not answer: " .. tostring(err)) end
  if res.status == 401 then ctx.requireAuth(fakehub) end
  if res.status ~= 200 then error(("FakeHub returned %d"):format(res.status)) end
  return moor.json.decode(res.body)
end)

return moor.defineWorkflowTool {
  description = "Read a repository's details from FakeHub, as the person who asks (signs them in when needed).",
  inputSchema = s.object { repository = s.string { minLength = 1, pattern = "^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$" } },
  execute = function(input, ctx)
    return readRepository(ctx, input.repository)
  end,
}
