-- Cancelling a turn withdraws the sign-in its call waits on (issue 12 item 6;
-- seed 000: "Cancelling an authorization wait withdraws its callback.
-- Cancellation uses the existing turn cancellation path"): as a question
-- (ctx.ask) is withdrawn when the turn is cancelled, so is a sign-in, and a
-- late callback gets not_found.
local moor = require "moor"
local engine = require "moor.engine"
local conf = require "moor.conf"
local connection = require "moor.auth.connection"
local tokens = require "moor.auth.tokens"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

describe("a cancelled turn", function()
  local saved_url, saved_path
  local dir = os.tmpname()
  before_each(function()
    saved_url, saved_path = conf.callback_url, conf.tokens_path
    conf.callback_url = "http://127.0.0.1:7373/v1/auth/callback"
    conf.tokens_path = dir .. ".tokens.json"
    tokens.reset()
    os.remove(conf.tokens_path)
    connection.registry.fakecn = moor.defineConnection {
      description = "The fake provider", authorizationUrl = "http://127.0.0.1:9/authorize",
      tokenUrl = "http://127.0.0.1:9/token", clientId = "moor-test",
    }
  end)
  after_each(function()
    conf.callback_url, conf.tokens_path = saved_url, saved_path
    os.remove(dir .. ".tokens.json")
    tokens.reset()
  end)
  local fake = moor.connection("fakecn")
  local read = moor.step("cn_read", function(ctx) return #ctx.getToken(fake).token end)

  local function check(tool_name, tool)
    support.register(tool_name, tool)
    local calls = 0
    local signer = moor.defineAgent { instructions = "x", model = t.script(function()
      calls = calls + 1
      return { toolCalls = { { name = tool_name, input = {} } } }
    end) }
    local root = moor.defineAgent { instructions = "x", model = t.script(function() return "ok" end) }
    support.with_agents(root, { signer = signer }, function()
      local name = support.workflow("cn", function(_, ctx)
        local c = moor.AbortController()
        local resp = ctx.agent("signer"):send("go", { signal = c.signal })
        moor.sleep("100ms")
        c:abort("enough")
        return resp:result()
      end)
      local id = t.start(name, {})
      t.drive(id, 3000)
      assert.are.equal("completed", engine.run_status(id), "the cancelled turn still waits on the sign-in")
      assert.are.same({ status = "waiting" }, (t.outcome(id)))
      assert.are.equal(1, calls)
      -- the sign-in is no longer listed, and its callback is gone
      for _, q in ipairs(engine.inputs()) do
        assert.are_not.equal("authorization", type(q.request) == "table" and q.request.kind or nil)
      end
      local required = support.kinds(t.events(id), "authorization.required")
      assert.are.equal(1, #required)
      local ok, err = engine.auth_callback(required[1].state, { code = "late" })
      assert.is_nil(ok)
      assert.are.equal("not_found", err.code)
      local resolved = support.kinds(t.events(id), "input.resolved")
      assert.are.equal(required[1].requestId, resolved[#resolved].requestId)
      assert.are.equal("cancelled", resolved[#resolved].outcome)
      assert.is_nil(next(support.kinds(t.events(id), "authorization.completed")))
    end)
  end

  it("withdraws a workflow tool's sign-in", function()
    check("cn_flow", moor.defineWorkflowTool { description = "Reads.", inputSchema = s.object {},
      execute = function(_, ctx) return read(ctx) end })
  end)

  it("withdraws a plain tool's sign-in", function()
    check("cn_plain", moor.defineTool { description = "Reads.", inputSchema = s.object {},
      execute = function(_, ctx) return #ctx.getToken(fake).token end })
  end)
end)
