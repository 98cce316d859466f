-- Who a user-scoped token is for (issue 12 item 3; seed 000 "Resumable
-- tasks: serve", seed 003 §3.2): whoever launched the call, also for a
-- task-lifetime tool started in a session, and for a serve task the caller
-- of the call being served (a later call may come from another person).
local moor = require "moor"
local json = require "moor.json"
local tokens = require "moor.auth.tokens"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

local function results_in(messages)
  local out = {}
  for _, m in ipairs(messages) do
    local r = m.role == "user" and tostring(m.content):match("<task_result[^>]*>(.-)</task_result>")
    if r then out[#out + 1] = r end
  end
  return out
end

describe("user-scoped tokens in tasks", function()
  local sign_in = support.sign_in("fakep")
  before_each(function()
    sign_in.setup()
    tokens.put("fakep", "alice", { access_token = "alice-token" })
    tokens.put("fakep", "bob", { access_token = "bobs-token-is-longer" })
  end)
  after_each(sign_in.teardown)

  local fake = moor.connection("fakep")
  local who = moor.step("ap_who", function(ctx)
    local tok = ctx.getToken(fake).token
    return { principal = ctx.session.principal, token = tok:match("^(%a+)") }
  end, { retries = 0 })

  it("a background task started in a session signs in as whoever launched the call", function()
    support.register("ap_bg", moor.defineWorkflowTool {
      description = "Reads as the caller.", inputSchema = s.object {},
      task = function(_, ctx) return who(ctx) end,
    })
    local seen = {}
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      if turn.n == 1 then return { toolCalls = { { name = "ap_bg", input = {} } } } end
      for _, r in ipairs(results_in(turn.messages)) do seen[#seen + 1] = r end
      return "done"
    end) }
    local c = t.converse(agent, { { message = "read it", principal = "alice" } })
    assert.is_nil(next(support.kinds(c.events, "authorization.required")), "no sign-in: alice has a token")
    assert.are.equal(1, #seen, json.encode(seen))
    assert.is_truthy(seen[1]:find('"principal":"alice"', 1, true), seen[1])
    assert.is_truthy(seen[1]:find('"token":"alice"', 1, true), seen[1])
  end)

  it("a serve task's later call signs in as that call's caller", function()
    support.register("ap_serve", moor.defineWorkflowTool {
      description = "Reads as the caller of each call.", inputSchema = s.object {},
      serve = function(receive, ctx)
        while true do
          receive()
          ctx.reply(who(ctx))
        end
      end,
    })
    local tid
    local seen = {}
    local agent = moor.defineAgent { instructions = "x", model = t.script(function(turn)
      local m = turn.messages[#turn.messages]
      for _, msg in ipairs(turn.messages) do
        tid = tid or (msg.role == "tool" and tostring(msg.content):match("^Started task (ap_serve%-%w+)%."))
      end
      if m.role == "user" and m.content == "first" then return { toolCalls = { { name = "ap_serve", input = {} } } } end
      if m.role == "user" and m.content == "second" then
        return { toolCalls = { { name = "ap_serve", input = { taskId = tid } } } }
      end
      for _, r in ipairs(results_in(turn.messages)) do seen[r] = true end
      return "ok"
    end) }
    t.converse(agent, { { message = "first", principal = "alice" }, { message = "second", principal = "bob" } })
    local list = {}
    for r in pairs(seen) do list[#list + 1] = r end
    table.sort(list)
    local all = table.concat(list, "\n")
    assert.are.equal(2, #list, all)
    assert.is_truthy(list[1]:find('"principal":"alice"', 1, true), all)
    assert.is_truthy(list[1]:find('"token":"alice"', 1, true), all)
    assert.is_truthy(list[2]:find('"principal":"bob"', 1, true), all)
    assert.is_truthy(list[2]:find('"token":"bobs"', 1, true), all)
  end)
end)

-- seed 000 "Agents": "A local child runs as the caller's principal with the
-- caller's capabilities": a session opened with ctx.agent signs in as the
-- principal of the call that opened it.
describe("user-scoped tokens in a subagent's session", function()
  local sign_in = support.sign_in("fakep")
  before_each(function()
    sign_in.setup()
    tokens.put("fakep", "alice", { access_token = "alice-token" })
  end)
  after_each(sign_in.teardown)

  it("runs as the principal of the call that opened it", function()
    local fake = moor.connection("fakep")
    support.register("ap_plain", moor.defineTool {
      description = "Reads as the caller.", inputSchema = s.object {},
      execute = function(_, ctx)
        return { principal = ctx.session.principal, token = ctx.getToken(fake).token:match("^(%a+)") }
      end,
    })
    local seen = {}
    local sub = moor.defineAgent { instructions = "x", tools = { "ap_plain" }, model = t.script(function(turn)
      if turn.n == 1 then return { toolCalls = { { name = "ap_plain", input = {} } } } end
      seen.result = turn.messages[#turn.messages].content
      return "read"
    end) }
    support.register("ap_delegate", moor.defineWorkflowTool {
      description = "Asks the subagent.", inputSchema = s.object {},
      execute = function(_, ctx) return ctx.agent("reader"):send("read it"):result() end,
    })
    local root = moor.defineAgent { instructions = "x", tools = { "ap_delegate" }, model = t.script(function(turn)
      if turn.n == 1 then return { toolCalls = { { name = "ap_delegate", input = {} } } } end
      return "done"
    end) }
    support.with_agents(root, { reader = sub }, function()
      t.converse(root, { { message = "go", principal = "alice" } })
    end)
    assert.is_string(seen.result, "the subagent's tool call did not finish (a sign-in as someone else?)")
    assert.is_truthy(seen.result:find('"principal":"alice"', 1, true), seen.result)
    assert.is_truthy(seen.result:find('"token":"alice"', 1, true), seen.result)
  end)
end)
