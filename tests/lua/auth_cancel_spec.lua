-- Cancelling a turn withdraws the sign-in its call waits on (issue 12 item 6;
-- seed 000: "Cancelling an authorization wait withdraws its callback.
-- Cancellation uses the existing turn cancellation path"): as a question
-- (ctx.ask) is withdrawn when the turn is cancelled, so is a sign-in, and a
-- late callback gets not_found.
local moor = require "moor"
local engine = require "moor.engine"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

describe("a cancelled turn", function()
  local sign_in = support.sign_in("fakecn")
  before_each(sign_in.setup)
  after_each(sign_in.teardown)
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
