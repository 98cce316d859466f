-- The MCP server (lua/moor/mcp/server.lua) in-process, without a transport:
-- defineTool's MCP annotations, tools/list's view of a tool, a question as
-- an elicitation form, and a declined elicitation withdrawing the question
-- (engine.withdraw_input). The protocol end to end is tests/e2e/test_mcp_*.sh.
local moor = require "moor"
local s = moor.schema
local engine = require "moor.engine"
local server = require "moor.mcp.server"
local json = require "moor.json"
local define = require "moor.authoring.define"
local core = require "moor.core"

local function register(name, tool)
  define._bind(tool, name, "spec-" .. name)
  engine.register(name, tool)
end

describe("MCP annotations on a tool definition", function()
  it("takes the four hints as booleans and refuses anything else", function()
    local tool = moor.defineTool { description = "d", inputSchema = s.object {}, readOnlyHint = true,
      openWorldHint = false, execute = function() end }
    assert.are.equal(true, tool.readOnlyHint)
    assert.are.equal(false, tool.openWorldHint)
    local ok, err = pcall(moor.defineWorkflowTool, { description = "d", inputSchema = s.object {},
      destructiveHint = "yes", execute = function() end })
    assert.is_false(ok)
    assert.matches("destructiveHint must be true or false", tostring(err))
  end)
end)

describe("the MCP server", function()
  local sent
  local srv
  before_each(function()
    sent = {}
    srv = server.new(function(msg) sent[#sent + 1] = msg end)
    srv.receive(json.encode { jsonrpc = "2.0", id = 1, method = "initialize", params = {
      protocolVersion = "2025-11-25", capabilities = { elicitation = { form = {} } } } })
  end)
  after_each(function() srv.close() end)

  it("lists a tool with its schemas and hints, and no moor__ internals", function()
    register("mcp_spec_tool", moor.defineTool { description = "spec", inputSchema = s.object { a = s.string() },
      outputSchema = s.object { b = s.integer() }, idempotentHint = true, execute = function() return { b = 1 } end })
    register("moor__mcp_spec_internal", moor.defineTool { description = "x", inputSchema = s.object {},
      execute = function() end })
    local found, internal
    for _, tool in ipairs(server.list_tools()) do
      if tool.name == "mcp_spec_tool" then found = tool end
      if tool.name:sub(1, 6) == "moor__" then internal = tool end
    end
    assert.is_nil(internal)
    assert.are.equal("spec", found.description)
    assert.are.equal("string", found.inputSchema.properties.a.type)
    assert.are.equal("integer", found.outputSchema.properties.b.type)
    assert.are.same({ idempotentHint = true }, found.annotations)
    assert.is_nil(found.execution)
  end)

  local function wait_for(pred)
    for _ = 1, 200 do
      engine.tick()
      local v = pred()
      if v then return v end
      core.wait(5)
    end
  end

  it("an approval gate asks the client's person first; approved it runs, denied it does not", function()
    local ran = 0
    register("mcp_spec_gated", moor.defineTool { description = "gated", inputSchema = s.object {},
      approval = moor.approval.always(), execute = function() ran = ran + 1 return "done" end })
    srv.receive(json.encode { jsonrpc = "2.0", id = 2, method = "tools/call", params = { name = "mcp_spec_gated" } })
    local ask = sent[#sent]
    assert.are.equal("elicitation/create", ask.method)
    assert.is_truthy(ask.params.message:find("Allow mcp_spec_gated?", 1, true))
    assert.are.equal(0, ran)
    srv.receive(json.encode { jsonrpc = "2.0", id = ask.id, result = { action = "accept",
      content = { choice = "approve" } } })
    local res = wait_for(function()
      for _, m in ipairs(sent) do if m.id == 2 and m.result then return m.result end end
    end)
    assert.is_table(res, "the call answered")
    assert.is_falsy(res.isError)
    assert.are.equal(1, ran)
    srv.receive(json.encode { jsonrpc = "2.0", id = 3, method = "tools/call", params = { name = "mcp_spec_gated" } })
    ask = sent[#sent]
    srv.receive(json.encode { jsonrpc = "2.0", id = ask.id, result = { action = "decline" } })
    res = sent[#sent]
    assert.are.equal(3, res.id)
    assert.is_true(res.result.isError)
    assert.is_truthy(res.result.content[1].text:find("not approved", 1, true))
    assert.are.equal(1, ran)
  end)

  it("a client that cannot elicit cannot run a gated tool", function()
    local plain = {}
    local srv2 = server.new(function(msg) plain[#plain + 1] = msg end)
    srv2.receive(json.encode { jsonrpc = "2.0", id = 1, method = "initialize", params = {
      protocolVersion = "2025-11-25", capabilities = {} } })
    register("mcp_spec_gated2", moor.defineTool { description = "gated", inputSchema = s.object {},
      approval = moor.approval.always(), execute = function() return "done" end })
    srv2.receive(json.encode { jsonrpc = "2.0", id = 2, method = "tools/call", params = { name = "mcp_spec_gated2" } })
    local res = plain[#plain]
    srv2.close()
    assert.are.equal(2, res.id)
    assert.is_true(res.result.isError)
    assert.is_truthy(res.result.content[1].text:find("needs a person's approval", 1, true))
  end)

  it("makes a question a form: options as an enum, free text as a string", function()
    local p = server.elicit_params { prompt = "Pick", allowFreeform = true,
      options = { { id = "a", label = "A" }, { id = "b", label = "B" } } }
    assert.are.equal("form", p.mode)
    assert.are.equal("Pick", p.message)
    assert.are.same({ "a", "b" }, p.requestedSchema.properties.choice.enum)
    assert.are.equal("string", p.requestedSchema.properties.text.type)
    local free = server.elicit_params { prompt = "Say" }
    assert.is_nil(free.requestedSchema.properties.choice)
    assert.are.same({ "text" }, free.requestedSchema.required)
  end)

  it("sends a run's question as elicitation/create; a decline withdraws it (cancelled)", function()
    register("mcp_spec_ask", moor.defineWorkflowTool { description = "ask", inputSchema = s.object {},
      execute = function(_, ctx) return ctx.ask { prompt = "Go?", options = { { id = "go", label = "Go" } } } end })
    srv.receive(json.encode { jsonrpc = "2.0", id = 2, method = "tools/call",
      params = { name = "mcp_spec_ask", arguments = {} } })
    engine.tick()
    engine.tick()
    local elicit
    for _, m in ipairs(sent) do if m.method == "elicitation/create" then elicit = m end end
    assert.is_table(elicit, "no elicitation/create was sent")
    assert.are.equal("Go?", elicit.params.message)
    srv.receive(json.encode { jsonrpc = "2.0", id = elicit.id, result = { action = "decline" } })
    engine.tick()
    engine.tick()
    local answer
    for _, m in ipairs(sent) do if m.id == 2 then answer = m end end
    assert.is_table(answer, "the call was not answered")
    assert.matches('"status":"cancelled"', answer.result.content[1].text)
  end)
end)
