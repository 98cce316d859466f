-- A connection (issue 12): an OAuth 2.0 provider the example's tools sign in
-- to. It points at tests/fake/fake_oauth (a small provider on loopback that
-- `make demo-auth`-style tests start); set FAKEHUB_URL to where it listens.
-- A real one names the provider's endpoints, e.g. GitHub's
-- https://github.com/login/oauth/authorize and .../access_token.
local moor = require "moor"

local base = os.getenv("FAKEHUB_URL") or "http://127.0.0.1:7399"

return moor.defineConnection {
  description = "FakeHub, the repository host of the fake OAuth provider",
  authorizationUrl = base .. "/authorize",
  tokenUrl = base .. "/token",
  clientId = "moor-test",
  scopes = { "repo" },
  userScoped = true, -- each person signs in as themselves
}
