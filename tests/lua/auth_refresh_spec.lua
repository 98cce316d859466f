-- A refresh that does not get through (issue 12 item 1: "refresh tokens used
-- when present"): when the provider's token endpoint cannot be reached, the
-- stored token and its refresh token are kept; a token not yet expired is
-- still used, and an expired one fails the attempt so that the step retries,
-- instead of dropping both and asking the person to sign in again.
local moor = require "moor"
local core = require "moor.core"
local engine = require "moor.engine"
local tokens = require "moor.auth.tokens"
local t = moor.testing
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

describe("a refresh that does not get through", function()
  -- (nothing listens on 127.0.0.1:9: the token endpoint does not answer)
  local sign_in = support.sign_in("fakerf")
  before_each(sign_in.setup)
  after_each(sign_in.teardown)
  local fake = moor.connection("fakerf")
  local read = moor.step("rf_read", function(ctx) return #ctx.getToken(fake).token end, { retries = 0 })

  it("uses a token that has not expired yet, and keeps its refresh token", function()
    tokens.put("fakerf", "local", { access_token = "still-good", refresh_token = "rt-keep",
      expires_at = core.now() + 20000 })
    local name = support.workflow("rf", function(_, ctx) return read(ctx) end)
    local id = t.start(name, {})
    t.drive(id)
    assert.are.equal("completed", engine.run_status(id))
    assert.are.equal(#"still-good", (t.outcome(id)))
    local rec = tokens.get("fakerf", "local")
    assert.is_table(rec)
    assert.are.equal("rt-keep", rec.refresh_token)
  end)

  it("an expired token: the attempt fails and is retried; the refresh token is kept, no sign-in", function()
    tokens.put("fakerf", "local", { access_token = "expired", refresh_token = "rt-keep",
      expires_at = core.now() - 1000 })
    local name = support.workflow("rf", function(_, ctx)
      local ok, e = pcall(read, ctx)
      return { ok = ok, code = not ok and e.code or nil, message = not ok and e.message or nil }
    end)
    local id = t.start(name, {})
    t.drive(id)
    local v = t.outcome(id)
    assert.is_false(v.ok)
    assert.are_not.equal("FatalError", v.code)
    assert.is_truthy(v.message:find("did not answer", 1, true), v.message)
    assert.is_nil(next(support.kinds(t.events(id), "authorization.required")), "no sign-in was asked for")
    local rec = tokens.get("fakerf", "local")
    assert.is_table(rec, "the stored token was dropped")
    assert.are.equal("rt-keep", rec.refresh_token)
  end)
end)

describe("a code exchange that does not get through", function()
  local sign_in = support.sign_in("fakerx")
  before_each(sign_in.setup)
  after_each(sign_in.teardown)
  local fake = moor.connection("fakerx")
  local read = moor.step("rx_read", function(ctx) return #ctx.getToken(fake).token end,
    { retries = 2, backoff = "10ms" }) -- (attempt 1 parks; 2 and 3 exchange)

  it("is retried with the same code, not failed at once as a refused sign-in", function()
    local name = support.workflow("rx", function(_, ctx)
      local ok, e = pcall(read, ctx)
      return { ok = ok, message = not ok and e.message or nil }
    end)
    local id = t.start(name, {})
    t.drive(id)
    local q
    for _, x in ipairs(t.inputs(id)) do if x.request.kind == "authorization" then q = x end end
    assert.is_table(q)
    local state = engine.auth_state(q.requestId)
    assert(engine.auth_callback(state, { code = "ac_1" }))
    t.drive(id)
    local v = t.outcome(id)
    assert.is_false(v.ok)
    assert.is_truthy(v.message:find("did not answer", 1, true), v.message)
    local retries = support.kinds(t.events(id), "step.retry")
    assert.are.equal(1, #retries, "the attempt after the callback was not retried")
    -- the last attempt's failure is the sign-in's
    assert.are.same({ { connection = "fakerx", outcome = "failed" } },
      support.kinds(t.events(id), "authorization.completed"))
  end)
end)
