-- Sign-in inside a step against the real fake provider (tests/fake/fake_oauth,
-- $FAKE_OAUTH): the OAuth exchange, refresh and rejection as moor.auth.oauth
-- does them over moor.fetch. The spec plays the browser: it fetches the
-- sign-in URL itself (following no redirect), reads the code and state off
-- the 302's Location, and hands them to engine.auth_callback as
-- GET /v1/auth/callback would. The provider's /stats count what it saw.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local core = require "moor.core"
local json = require "moor.json"
local connection = require "moor.auth.connection"
local tokens = require "moor.auth.tokens"
local oauth = require "moor.auth.oauth"
local t = moor.testing
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local FAKE = os.getenv("FAKE_OAUTH")
local CALLBACK = "http://127.0.0.1:9/v1/auth/callback" -- never fetched: the spec takes the code off the 302

-- start(args) -> base URL, pid: fake_oauth in the background on a free port.
local function start(args)
  local out = os.tmpname()
  local p = assert(io.popen(("%s --listen 127.0.0.1:0 %s >%s 2>&1 & echo $!"):format(FAKE, args, out)))
  local pid = tonumber(p:read("l"))
  p:close()
  assert(pid, "fake_oauth did not start")
  local url
  for _ = 1, 200 do -- at most 10 s
    local f = io.open(out)
    local line = f and f:read("l")
    if f then f:close() end
    if line and line:match("^http://127%.0%.0%.1:%d+$") then url = line; break end
    core.wait(50)
  end
  os.remove(out)
  if not url then os.execute("kill " .. pid); error("fake_oauth printed no URL") end
  return url, pid
end

local function get_json(url, opts)
  local res, err = moor.fetch(url, opts)
  assert(res, err)
  return json.decode(res.body), res
end

local function stats(base) return (get_json(base .. "/stats")) end
local function control(base, what)
  local v = get_json(base .. "/control", { method = "POST", body = json.encode(what),
    headers = { ["content-type"] = "application/json" } })
  assert(v and v.ok, "POST /control")
end

local function pending_auth(id)
  for _, q in ipairs(t.inputs(id)) do
    if type(q.request) == "table" and q.request.kind == "authorization" then return q end
  end
end

-- Play the browser: open the run's sign-in URL (as login, when given) and
-- bring the provider's answer to the callback. Returns the callback's
-- parameters.
local function sign_in(id, login)
  local q = pending_auth(id)
  assert(q, "the run waits on a sign-in")
  local url = q.request.authorization.url .. (login and ("&login=" .. login) or "")
  local res = assert(moor.fetch(url, { redirects = 0 }))
  assert.are.equal(302, res.status)
  local loc = res.headers.location
  assert.are.equal(CALLBACK .. "?", loc:sub(1, #CALLBACK + 1))
  local params = { code = loc:match("[?&]code=([^&]+)"), error = loc:match("[?&]error=([^&]+)") }
  local state = loc:match("[?&]state=([^&]+)")
  assert.is_string(state)
  assert(engine.auth_callback(state, params))
  return params
end

local function workflow(fn) return support.workflow("auth_oauth_spec", fn) end

local function count(kind, events)
  return #support.kinds(events, kind)
end

describe("sign-in against fake_oauth", function()
  local base, pid, short, short_pid
  local saved_url, saved_path
  local dir = os.tmpname()
  local hub, hub_short = moor.connection("oauth_spec"), moor.connection("oauth_spec_short")
  local reads = 0
  local flaky = {}

  -- The step: a token, the resource, requireAuth on a 401; `flake` makes
  -- its first attempt that got past the resource fail once.
  local read = moor.step("auth_oauth_read", function(ctx, which, flake)
    reads = reads + 1
    local c = which == "short" and hub_short or hub
    local tok = ctx.getToken(c).token
    local res = assert(moor.fetch((which == "short" and short or base) .. "/resource/repos/octo/hello",
      { headers = { authorization = "Bearer " .. tok } }))
    if res.status == 401 then ctx.requireAuth(c) end
    if flake and not flaky[flake] then
      flaky[flake] = true
      error("the step broke after the exchange")
    end
    assert(res.status == 200, "resource: " .. res.status)
    local v = json.decode(res.body)
    return { user = v.user, path = v.path }
  end, { retries = 2, backoff = "10ms" })

  local function tool(which, flake)
    return workflow(function(_, ctx) return read(ctx, which or "default", flake) end)
  end

  setup(function()
    assert(FAKE, "FAKE_OAUTH names the fake provider")
    base, pid = start("")
    short, short_pid = start("--expires-in 30")
    saved_url, saved_path = conf.callback_url, conf.tokens_path
    conf.callback_url = CALLBACK
    conf.tokens_path = dir .. ".tokens.json"
    tokens.reset()
    os.remove(conf.tokens_path)
    for name, b in pairs { oauth_spec = base, oauth_spec_short = short } do
      connection.registry[name] = moor.defineConnection {
        description = "fake_oauth at " .. b, authorizationUrl = b .. "/authorize", tokenUrl = b .. "/token",
        clientId = "moor-test", scopes = { "repo" },
      }
    end
  end)

  teardown(function()
    if pid then os.execute("kill " .. pid) end
    if short_pid then os.execute("kill " .. short_pid) end
    connection.registry.oauth_spec, connection.registry.oauth_spec_short = nil, nil
    conf.callback_url, conf.tokens_path = saved_url, saved_path
    os.remove(dir .. ".tokens.json")
    os.remove(dir)
    tokens.reset()
  end)

  before_each(function()
    control(base, { reset = true })
    control(short, { reset = true })
    for _, p in ipairs { "local", "alice", "bob" } do
      tokens.drop("oauth_spec", p)
      tokens.drop("oauth_spec_short", p)
    end
    reads = 0
  end)

  it("exchanges the code once, even when the step fails after the exchange and is retried", function()
    local id = t.start(tool("default", "once"), {})
    t.drive(id)
    assert.are.equal("running", engine.run_status(id))
    assert.are.equal(1, reads)
    local params = sign_in(id)
    assert.is_truthy(params.code:match("^ac_%x+$"))
    t.drive(id)
    local v, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.same({ user = "alice", path = "repos/octo/hello" }, v)
    assert.are.equal(3, reads) -- parked, exchanged and broke, read the stored token
    local st = stats(base)
    assert.are.equal(1, st.token_code)
    assert.are.equal(0, st.token_refresh)
    assert.are.equal(0, st.token_error)
    assert.are.equal(2, st.resource)
    local evs = t.events(id)
    assert.are.equal(1, count("authorization.callback", evs))
    assert.are.same({ { connection = "oauth_spec", outcome = "authorized" } },
      support.kinds(evs, "authorization.completed"))
    -- the stored token is the provider's, and is in no event
    local rec = tokens.get("oauth_spec", "local")
    assert.is_truthy(rec.access_token:match("^at_%x+$"))
    assert.is_truthy(rec.refresh_token:match("^rt_%x+$"))
    for _, e in ipairs(engine.events(id)) do
      assert.is_nil(e.payload:find(rec.access_token, 1, true), e.kind)
      assert.is_nil(e.payload:find(rec.refresh_token, 1, true), e.kind)
    end
  end)

  it("two steps refreshing one token at once: the one whose refresh token was rotated reads the other's", function()
    local verifier, challenge = oauth.pkce()
    local res = assert(moor.fetch(oauth.authorize_url(connection.registry.oauth_spec_short, "S", challenge, CALLBACK),
      { redirects = 0 }))
    local code = res.headers.location:match("[?&]code=([^&]+)")
    local rec = assert(oauth.exchange(connection.registry.oauth_spec_short,
      { redirect_uri = CALLBACK, verifier = verifier }, code))
    assert(tokens.put("oauth_spec_short", "local", rec)) -- (30 s: within the minute, so both refresh)
    local a, b = t.start(tool("short"), {}), t.start(tool("short"), {})
    t.drive(a)
    t.drive(b)
    for _, id in ipairs { a, b } do
      local v, err = t.outcome(id)
      assert.is_nil(err, err and err.message)
      assert.are.same({ user = "alice", path = "repos/octo/hello" }, v)
      assert.is_nil(pending_auth(id), "a sign-in was asked for")
    end
    assert.are.equal(2, stats(short).token_refresh)
    assert.is_table(tokens.get("oauth_spec_short", "local"), "the fresh token was dropped")
  end)

  it("refreshes a token that expires within a minute, inside the step", function()
    -- A token of the 30 s provider, got by hand (PKCE as oauth.lua does).
    local verifier, challenge = oauth.pkce()
    local res = assert(moor.fetch(oauth.authorize_url(connection.registry.oauth_spec_short, "S", challenge, CALLBACK),
      { redirects = 0 }))
    local code = res.headers.location:match("[?&]code=([^&]+)")
    local rec = assert(oauth.exchange(connection.registry.oauth_spec_short,
      { redirect_uri = CALLBACK, verifier = verifier }, code))
    assert.is_true(rec.expires_at - core.now() <= 30000)
    assert(tokens.put("oauth_spec_short", "local", rec))
    local v, err, id = t.call(tool("short"), {})
    assert.is_nil(err)
    assert.are.same({ user = "alice", path = "repos/octo/hello" }, v)
    assert.is_nil(pending_auth(id))
    local st = stats(short)
    assert.are.equal(1, st.token_code)
    assert.are.equal(1, st.token_refresh)
    assert.are.equal(0, st.resource_401)
    local fresh = tokens.get("oauth_spec_short", "local")
    assert.are_not.equal(rec.access_token, fresh.access_token)
    assert.are_not.equal(rec.refresh_token, fresh.refresh_token) -- rotated, and the new one kept
    for _, e in ipairs(engine.events(id)) do
      assert.is_nil(e.payload:find(fresh.access_token, 1, true), e.kind)
      assert.is_nil(e.payload:find(fresh.refresh_token, 1, true), e.kind)
    end
    -- a refresh token the provider no longer knows: the token is dropped and
    -- the step parks on a sign-in
    control(short, { reset = true })
    local id3 = t.start(tool("short"), {})
    t.drive(id3)
    assert.is_table(pending_auth(id3), "a sign-in when the refresh is refused")
    assert.is_nil(tokens.get("oauth_spec_short", "local"))
    assert.are.equal(1, stats(short).token_error)
    t.cancel(id3)
    t.drive(id3)
    -- a token far from expiry (the default provider's hour) is not refreshed
    local id2 = t.start(tool("default"), {})
    t.drive(id2)
    sign_in(id2)
    t.drive(id2)
    assert.is_nil(select(2, t.outcome(id2)))
    v = t.call(tool("default"), {})
    assert.are.equal("alice", v.user)
    assert.are.equal(0, stats(base).token_refresh)
  end)

  it("requireAuth after a 401 drops the token and signs in again; rejected right after, it fails", function()
    local name = tool("default")
    local id = t.start(name, {})
    t.drive(id)
    sign_in(id)
    t.drive(id)
    local old = tokens.get("oauth_spec", "local").access_token
    control(base, { reject = true })
    id = t.start(name, {})
    t.drive(id)
    assert.are.equal("running", engine.run_status(id))
    assert.is_table(pending_auth(id), "a 401 asked for a sign-in")
    assert.is_nil(tokens.get("oauth_spec", "local"), "the rejected token was dropped")
    assert.are.equal(1, stats(base).resource_401)
    control(base, { reject = false })
    sign_in(id)
    t.drive(id)
    local v, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.equal("alice", v.user)
    local st = stats(base)
    assert.are.equal(2, st.token_code)
    assert.are_not.equal(old, tokens.get("oauth_spec", "local").access_token)
    -- the loop guard: the provider rejects the token its sign-in just gave
    control(base, { reject = true })
    id = t.start(name, {})
    t.drive(id)
    sign_in(id)
    t.drive(id)
    local _, ferr = t.outcome(id)
    assert.is_table(ferr)
    assert.is_truthy(ferr.message:find("right after the sign-in", 1, true), ferr.message)
    assert.is_nil(pending_auth(id), "no new sign-in")
    assert.are.equal(3, stats(base).token_code)
  end)

  it("a code the provider refuses fails the step, saying so, with no retry and nothing stored", function()
    local id = t.start(tool("default"), {})
    t.drive(id)
    local q = pending_auth(id)
    local state = assert(engine.auth_state(q.requestId))
    local verifier = tokens.pending(state).verifier
    assert(engine.auth_callback(state, { code = "ac_0000000000000000000000000000dead" }))
    t.drive(id)
    local _, err = t.outcome(id)
    assert.is_table(err)
    assert.are.equal("FatalError", err.code)
    assert.is_truthy(err.message:find("the sign-in to oauth_spec failed", 1, true), err.message)
    assert.is_truthy(err.message:find("invalid_grant", 1, true), err.message)
    assert.is_nil(err.message:find(verifier, 1, true))
    assert.are.same({ { connection = "oauth_spec", outcome = "failed" } },
      support.kinds(t.events(id), "authorization.completed"))
    local st = stats(base)
    assert.are.equal(1, st.token_code)
    assert.are.equal(1, st.token_error)
    assert.are.equal(0, st.resource)
    assert.is_nil(tokens.get("oauth_spec", "local"))
    assert.is_nil(tokens.pending(state), "the spent sign-in's PKCE verifier is forgotten")
    assert.are.equal(2, reads) -- parked, then the one attempt after the callback
  end)

  it("a run replayed while parked on the sign-in waits on the same callback", function()
    local id = t.start(tool("default"), {})
    t.drive(id)
    local url = pending_auth(id).request.authorization.url
    assert.is_nil((t.restart(id)))
    assert.are.equal("running", engine.run_status(id))
    assert.are.equal(url, pending_auth(id).request.authorization.url)
    sign_in(id)
    t.drive(id)
    local v, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.equal("alice", v.user)
    assert.are.equal(1, stats(base).token_code)
  end)

  it("a sign-in not completed in time fails the step; its late callback is refused", function()
    local saved = conf.AUTH_TTL
    conf.AUTH_TTL = 300
    local id = t.start(tool("default"), {})
    t.drive(id, 50)
    conf.AUTH_TTL = saved
    local q = pending_auth(id)
    local state = assert(engine.auth_state(q.requestId))
    t.drive(id)
    local _, err = t.outcome(id)
    assert.is_table(err, "the run ended")
    assert.is_truthy(err.message:find("not completed in time", 1, true), err.message)
    assert.are.same({ { connection = "oauth_spec", outcome = "timed-out" } },
      support.kinds(t.events(id), "authorization.completed"))
    assert.is_nil(pending_auth(id), "no longer listed")
    local ok, cerr = engine.auth_callback(state, { code = "ac_late" })
    assert.is_nil(ok)
    assert.are.equal("not_found", cerr.code)
    assert.are.equal(0, stats(base).token_code)
    assert.is_nil(tokens.pending(state), "the withdrawn sign-in's PKCE verifier is forgotten")
  end)

  it("a cancelled run forgets its sign-in: the late callback gets not_found, the verifier is gone", function()
    local id = t.start(tool("default"), {})
    t.drive(id)
    local q = pending_auth(id)
    local state = assert(engine.auth_state(q.requestId))
    assert.is_table(tokens.pending(state))
    assert(t.cancel(id))
    t.drive(id)
    assert.are.equal("cancelled", engine.run_status(id))
    assert.is_nil(pending_auth(id))
    assert.is_nil(tokens.pending(state), "the withdrawn sign-in's PKCE verifier is forgotten")
    local res = assert(moor.fetch(q.request.authorization.url, { redirects = 0 }))
    local code = res.headers.location:match("[?&]code=([^&]+)")
    local ok, err = engine.auth_callback(state, { code = code })
    assert.is_nil(ok)
    assert.are.equal("not_found", err.code)
    assert.are.equal(0, stats(base).token_code)
  end)

  it("keeps user-scoped tokens apart for two principals in two sessions", function()
    local name = tool("default")
    local a = t.start(name, {}, { session = { id = "s-alice", principal = "alice" } })
    local b = t.start(name, {}, { session = { id = "s-bob", principal = "bob" } })
    t.drive(a)
    t.drive(b)
    assert.is_table(pending_auth(a))
    assert.is_table(pending_auth(b))
    sign_in(b, "bob")
    sign_in(a, "alice")
    t.drive(a)
    t.drive(b)
    assert.are.equal("alice", (t.outcome(a)).user)
    assert.are.equal("bob", (t.outcome(b)).user)
    local ta, tb = tokens.get("oauth_spec", "alice"), tokens.get("oauth_spec", "bob")
    assert.is_table(ta)
    assert.is_table(tb)
    assert.are_not.equal(ta.access_token, tb.access_token)
    assert.is_nil(tokens.get("oauth_spec", "local"))
    -- each reads as themselves again, with no sign-in
    local v, _, id = t.call(name, {}, { session = { id = "s-bob", principal = "bob" } })
    assert.are.equal("bob", v.user)
    assert.is_nil(pending_auth(id))
    v = t.call(name, {}, { session = { id = "s-alice", principal = "alice" } })
    assert.are.equal("alice", v.user)
    assert.are.equal(2, stats(base).token_code)
  end)
end)
