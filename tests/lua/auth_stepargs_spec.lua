-- The step-argument adapter (issue 12 item 2): ctx passed directly becomes
-- the step context; a ctx nested in an argument (however deep) or captured
-- is refused when its getToken/requireAuth is used in the step, never
-- resolved as some other principal; and the adapter costs a step call next to
-- nothing, whatever the size of its arguments (it ran on every moor.step).
local moor = require "moor"
local core = require "moor.core"
local tokens = require "moor.auth.tokens"
local t = moor.testing
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

describe("step arguments", function()
  local sign_in = support.sign_in("fakesa")
  before_each(function()
    sign_in.setup()
    tokens.put("fakesa", "local", { access_token = "the-local-token" })
  end)
  after_each(sign_in.teardown)
  local fake = moor.connection("fakesa")

  it("a ctx nested deeper than any scan is refused when used, not resolved as 'local'", function()
    local deep = moor.step("sa_deep", function(a) return a[1][1][1][1].getToken(fake).token end)
    local name = support.workflow("sa", function(_, ctx) return deep({ { { { ctx } } } }) end)
    local v, err = t.call(name, {}, { session = { id = "s1", principal = "alice" } })
    assert.is_nil(v)
    assert.is_truthy(err and err.message:find("pass the call's ctx directly as the step's first argument", 1, true),
      err and err.message)
    local far = moor.step("sa_far", function(list) return list[100].getToken(fake).token end)
    name = support.workflow("sa", function(_, ctx)
      local list = {}
      for i = 1, 99 do list[i] = i end
      list[100] = ctx
      return far(list)
    end)
    v, err = t.call(name, {}, { session = { id = "s1", principal = "alice" } })
    assert.is_nil(v)
    assert.is_truthy(err and err.message:find("pass the call's ctx directly", 1, true), err and err.message)
  end)

  it("costs a step next to nothing, even with a large nested argument", function()
    local big = {}
    for i = 1, 64 do
      local y = {}
      big[i] = y
      for j = 1, 64 do
        local z = {}
        y[j] = z
        for k = 1, 64 do z[k] = k end
      end
    end
    local N = 20
    local st = moor.step("sa_big", function(x) return #x end, { retries = 0 })
    local name = support.workflow("sa", function()
      local n = 0
      for _ = 1, N do n = n + st(big) end
      return n
    end)
    local t0 = core.now()
    assert.are.equal(64 * N, (t.call(name, {})))
    local ms = core.now() - t0
    assert.is_true(ms < 1000, ("%d steps given a 64x64x64 table took %d ms"):format(N, ms))
  end)
end)
