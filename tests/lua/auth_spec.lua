-- Sign-in inside a step (issue 12): ctx.getToken / ctx.requireAuth in a step
-- that receives ctx directly; the run parks on its own callback and the whole
-- interrupted step runs again after it. Completed with t.authorize /
-- t.decline here; the real OAuth exchange against tests/fake/fake_oauth.c is
-- auth_oauth_spec.lua and tests/e2e/test_auth_*.sh.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local connection = require "moor.auth.connection"
local tokens = require "moor.auth.tokens"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local function workflow(fn) return support.workflow("auth_spec", fn) end

local function pending_auth(id)
  for _, q in ipairs(t.inputs(id)) do
    if type(q.request) == "table" and q.request.kind == "authorization" then return q end
  end
end

describe("ctx.getToken in a step", function()
  local sign_in = support.sign_in("fake", { scopes = { "repo" } })
  before_each(sign_in.setup)
  after_each(sign_in.teardown)

  connection.registry.fake = moor.defineConnection { description = "The fake provider",
    authorizationUrl = "http://127.0.0.1:9/authorize", tokenUrl = "http://127.0.0.1:9/token", clientId = "moor-test" }
  local fake = moor.connection("fake")
  local counts = {}
  local before = moor.step("auth_spec_before", function(k)
    counts[k] = (counts[k] or 0) + 1
    return true
  end)
  local read = moor.step("auth_spec_read", function(ctx, what)
    counts.read = (counts.read or 0) + 1
    local tok = ctx.getToken(fake)
    return { what = what, token_len = #tok.token, callId = ctx.callId,
      keys = ctx.ask == nil and "restricted" or "full" }
  end)

  it("parks the run on a sign-in; after the callback the whole step runs again and the body goes on", function()
    local name = workflow(function(_, ctx)
      before("a")
      return read(ctx, "repo")
    end)
    counts = {}
    local id = t.start(name, {})
    t.drive(id)
    assert.are.equal("running", engine.run_status(id))
    local q = pending_auth(id)
    assert.is_table(q, "an authorization input")
    local url = q.request.authorization.url
    assert.is_truthy(url:find("^http://127.0.0.1:9/authorize%?"), url)
    for _, part in ipairs { "response_type=code", "client_id=moor-test", "code_challenge_method=S256", "scope=repo",
                            "redirect_uri=http%3A%2F%2F127.0.0.1%3A7373%2Fv1%2Fauth%2Fcallback", "state=" } do
      assert.is_truthy(url:find(part, 1, true), part .. " in " .. url)
    end
    assert.are.equal("fake", q.request.name)
    assert.is_number(q.request.authorization.expiresAt)
    local kinds = support.kinds(t.events(id), "authorization.required")
    assert.are.equal(1, #kinds)
    assert(t.authorize(q.requestId, { token = "secret-token-1234" }))
    t.drive(id)
    local v, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.same({ what = "repo", token_len = 17, callId = v.callId, keys = "restricted" }, v)
    assert.are.equal(1, counts.a) -- the step before was not run again
    assert.are.equal(2, counts.read) -- the interrupted step ran again from its start
    -- the token is in no event
    for _, e in ipairs(engine.events(id)) do
      assert.is_nil(e.payload:find("secret-token-1234", 1, true), e.kind)
    end
    -- a later run finds the token stored: no sign-in
    counts = {}
    local v2 = t.call(name, {})
    assert.are.equal(17, v2.token_len)
    assert.are.equal(1, counts.read)
  end)

  it("raises in a workflow body, clearly and without retries", function()
    local name = workflow(function(_, ctx) return ctx.getToken(fake) end)
    local _, err = t.call(name, {})
    assert.are.equal("FatalError", err.code)
    assert.is_truthy(err.message:find("ctx.getToken belongs in a step", 1, true), err.message)
  end)

  it("refuses ctx nested in an argument or captured by the step's function", function()
    local nested = moor.step("auth_spec_nested", function(args) return args.ctx.getToken(fake) end)
    local name = workflow(function(_, ctx) return nested({ ctx = ctx }) end)
    local _, err = t.call(name, {})
    assert.is_truthy(err.message:find("pass the call's ctx directly as the step's first argument", 1, true),
      err.message)
    name = workflow(function(_, ctx)
      local captured = moor.step("auth_spec_captured", function() return ctx.getToken(fake) end)
      return captured()
    end)
    _, err = t.call(name, {})
    assert.is_truthy(err.message:find("captured in the step's function", 1, true), err.message)
  end)

  it("a declined sign-in fails the step with the provider's word", function()
    local name = workflow(function(_, ctx)
      local ok, e = pcall(read, ctx, "x")
      return { ok = ok, message = not ok and e.message or nil }
    end)
    local id = t.start(name, {})
    t.drive(id)
    local q = pending_auth(id)
    assert(t.decline(q.requestId))
    t.drive(id)
    local v = t.outcome(id)
    assert.is_false(v.ok)
    assert.is_truthy(v.message:find("declined", 1, true), v.message)
    local done = support.kinds(t.events(id), "authorization.completed")
    assert.are.equal("declined", done[1].outcome)
  end)

  it("a cancelled wait withdraws its callback: a late one gets not_found and changes nothing", function()
    local name = workflow(function(_, ctx) return read(ctx, "x") end)
    local id = t.start(name, {})
    t.drive(id)
    local q = pending_auth(id)
    local state = engine.auth_state(q.requestId)
    assert.is_string(state)
    assert(t.cancel(id))
    t.drive(id)
    assert.are.equal("cancelled", engine.run_status(id))
    local ok, err = engine.auth_callback(state, { code = "late" })
    assert.is_nil(ok)
    assert.are.equal("not_found", err.code)
  end)

  it("a sign-in nobody completes in time fails the step, and its callback is withdrawn", function()
    local saved = conf.AUTH_TTL
    conf.AUTH_TTL = 150
    local name = workflow(function(_, ctx)
      local ok, e = pcall(read, ctx, "x")
      return { ok = ok, message = not ok and e.message or nil }
    end)
    local id = t.start(name, {})
    t.drive(id, 20) -- (not as far as the link's expiry)
    local q = pending_auth(id)
    local state = engine.auth_state(q.requestId)
    conf.AUTH_TTL = saved
    t.drive(id)
    local v = t.outcome(id)
    assert.is_false(v.ok)
    assert.is_truthy(v.message:find("not completed in time", 1, true), v.message)
    assert.are.equal("timed-out", support.kinds(t.events(id), "authorization.completed")[1].outcome)
    local ok, err = engine.auth_callback(state, { code = "late" })
    assert.is_nil(ok)
    assert.are.equal("not_found", err.code)
  end)

  it("with no callback address, a sign-in fails with a message saying so", function()
    conf.callback_url = false
    local name = workflow(function(_, ctx) return read(ctx, "x") end)
    local _, err = t.call(name, {})
    assert.is_truthy(err.message:find("no callback address", 1, true), err.message)
  end)

  it("requireAuth drops the token and asks again; right after a sign-in it fails instead", function()
    local reject = moor.step("auth_spec_reject", function(ctx)
      local tok = ctx.getToken(fake).token
      if tok == "bad" then ctx.requireAuth(fake) end
      return tok
    end)
    local name = workflow(function(_, ctx) return reject(ctx) end)
    tokens.put("fake", "local", { access_token = "bad" })
    local id = t.start(name, {})
    t.drive(id)
    local q = pending_auth(id)
    assert.is_table(q, "requireAuth asked for a sign-in")
    assert.is_nil(tokens.get("fake", "local"), "the rejected token was dropped")
    assert(t.authorize(q.requestId, { token = "good" }))
    t.drive(id)
    assert.are.equal("good", (t.outcome(id)))
    -- the loop guard: the token the sign-in gave is rejected at once
    tokens.drop("fake", "local")
    id = t.start(name, {})
    t.drive(id)
    q = pending_auth(id)
    assert(t.authorize(q.requestId, { token = "bad" }))
    t.drive(id)
    local _, err = t.outcome(id)
    assert.is_truthy(err.message:find("right after the sign-in", 1, true), err.message)
  end)

  it("user-scoped tokens are kept apart by principal", function()
    local name = workflow(function(_, ctx) return read(ctx, "x") end)
    tokens.put("fake", "alice", { access_token = "alice-token" })
    local v = t.call(name, {}, { session = { id = "s1", principal = "alice" } })
    assert.are.equal(#"alice-token", v.token_len)
    local id = t.start(name, {}, { session = { id = "s2", principal = "bob" } })
    t.drive(id)
    assert.is_table(pending_auth(id), "bob signs in for himself")
    assert.is_nil(tokens.get("fake", "bob"))
    t.cancel(id)
    t.drive(id)
    assert.are.equal("cancelled", engine.run_status(id))
  end)

  it("a plain tool in a session: the turn parks on the sign-in and the call runs again after it", function()
    local runs = 0
    support.register("auth_spec_plain", moor.defineTool {
      description = "Read the repo.", inputSchema = s.object {},
      execute = function(_, ctx)
        runs = runs + 1
        return { len = #ctx.getToken(fake).token, principal = ctx.session.principal }
      end,
    })
    local seen = {}
    local agent = moor.defineAgent {
      instructions = "x", tools = { "auth_spec_plain" },
      model = t.script(function(turn)
        if turn.n == 1 then return { toolCalls = { { name = "auth_spec_plain", input = {} } } } end
        seen.result = turn.messages[#turn.messages].content
        return "done"
      end),
    }
    local c = t.converse(agent, { { message = "read it", principal = "carol" } })
    local q = pending_auth(c.sessionId)
    assert.is_table(q, "the session's turn waits on a sign-in")
    assert.are.equal(1, #support.kinds(c.events, "authorization.required"))
    assert(t.authorize(q.requestId, { token = "carols-token" }))
    local saved = engine.agent
    engine.agent = agent
    t.drive(c.sessionId)
    engine.agent = saved
    assert.are.equal('{"len":12,"principal":"carol"}', seen.result)
    assert.are.equal(2, runs)
    assert.is_table(tokens.get("fake", "carol"))
  end)

  it("the token file is mode 0600", function()
    tokens.put("fake", "local", { access_token = "x" })
    local p = io.popen("stat -c %a " .. conf.tokens_path)
    local mode = p:read("l")
    p:close()
    assert.are.equal("600", mode)
  end)
end)

describe("the callback address", function()
  local host = require "moor.host"
  local http = require "moor.http"
  local saved_public, saved_cb
  before_each(function() saved_public, saved_cb = conf.public_url, conf.callback_url end)
  after_each(function()
    conf.public_url, conf.callback_url = saved_public, saved_cb
    http.configure {} -- (as before: this process serves nothing)
  end)

  it("is the listen address's; none for a wildcard listen address without MOOR_PUBLIC_URL", function()
    if os.getenv("MOOR_PUBLIC_URL") then return end
    assert.is_nil(host.serving("http://127.0.0.1:7373"))
    assert.are.equal("http://127.0.0.1:7373/v1/auth/callback", conf.callback_url)
    for _, url in ipairs { "http://0.0.0.0:7373", "http://[::]:7373" } do
      assert.is_nil(host.serving(url))
      assert.is_false(conf.callback_url, url .. " is no address a browser can return to")
    end
  end)
end)
