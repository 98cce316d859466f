-- The example's github_repo tool (agent/tools/github_repo.lua) and its
-- connection (agent/connections/fakehub.lua): with no token its step parks the
-- run on a sign-in whose URL is the connection's; the whole flow against the
-- fake provider is tests/e2e/test_auth_session.sh.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local connection = require "moor.auth.connection"
local t = moor.testing

describe("github_repo", function()
  it("is loaded with its connection, and parks on a sign-in to FakeHub", function()
    assert.is_table(connection.registry.fakehub)
    local saved = conf.callback_url
    conf.callback_url = "http://127.0.0.1:7373/v1/auth/callback"
    local id = t.start("github_repo", { repository = "octo/hello" })
    t.drive(id)
    conf.callback_url = saved
    local q
    for _, x in ipairs(t.inputs(id)) do if x.request.kind == "authorization" then q = x end end
    assert.is_table(q)
    assert.are.equal("fakehub", q.request.name)
    local base = connection.registry.fakehub.authorizationUrl
    assert.are.equal(base, q.request.authorization.url:sub(1, #base))
    t.cancel(id)
    t.drive(id)
    assert.are.equal("cancelled", engine.run_status(id))
  end)
end)
