-- Specs for moor.providers: resolve, the OpenAI and Anthropic clients (request shapes, parsing,
-- retries, errors, key hygiene) over a stubbed io, and the scripted provider.
-- Runs inside the host (moor.json): ./build/moor test tests/lua/providers_spec.lua

local json = require "moor.json"
local providers = require "moor.providers"
local scripted = require "moor.providers.scripted"

local OPENAI_KEY = "sk-test-OPENAI-0123456789abcdef"
local ANTHROPIC_KEY = "ant-test-KEY-fedcba9876543210"   -- not sk-shaped: redacted as a literal
local NOW = 1700000000   -- io.now() in these specs

-- A stub io: responses are consumed in order; each is
--   { status = 200, headers = {}, body = string | table (JSON-encoded) } | { timeout = true }
--   | { transport = "message" }
local function stub(responses)
  local io = { requests = {}, sleeps = {}, logs = {} }
  local i = 0
  function io.fetch(req)
    io.requests[#io.requests + 1] = req
    i = i + 1
    local r = responses[i]
    if r == nil then error("the stub has no response for request " .. i) end
    if r.timeout then return nil, "Operation timed out after " .. tostring(req.timeout) .. " ms", true end
    if r.transport then return nil, r.transport end
    local body = r.body
    if type(body) == "table" then body = json.encode(body) end
    return { status = r.status or 200, headers = r.headers or {}, body = body or "" }
  end
  function io.sleep(ms) io.sleeps[#io.sleeps + 1] = ms end
  function io.log(msg) io.logs[#io.logs + 1] = msg end
  function io.now() return NOW end
  return io
end

local function body_of(io, n)
  return assert(json.decode(io.requests[n or 1].body))
end

local function env(t)
  return function(name) return t[name] end
end

local function openai_provider(extra)
  local e = { OPENAI_BASE_URL = "http://127.0.0.1:8080/v1", OPENAI_API_KEY = OPENAI_KEY }
  for k, v in pairs(extra or {}) do e[k] = v end
  return assert(providers.resolve("openai/gpt-5.5", env(e)))
end

local function anthropic_provider(extra)
  local e = { ANTHROPIC_API_KEY = ANTHROPIC_KEY }
  for k, v in pairs(extra or {}) do e[k] = v end
  return assert(providers.resolve("anthropic/claude-sonnet-5", env(e)))
end

local PNG = "iVBORw0KGgo="

-- a conversation with everything in it
local function conversation()
  return {
    system = "You deploy services.",
    messages = {
      { role = "user", content = "deploy api" },
      { role = "assistant", content = "Deploying.", toolCalls = {
        { id = "call_1", name = "deploy", input = { service = "api" } },
        { id = "call_2", name = "status", input = {} } } },
      { role = "tool", toolCallId = "call_1", name = "deploy", content = '{"ok":true}', isError = false },
      { role = "tool", toolCallId = "call_2", name = "status", isError = true, content = {
        { type = "text", text = "screenshot:" },
        { type = "file", mediaType = "image/png", data = PNG } } },
      { role = "user", content = "thanks" },
    },
    tools = {
      { name = "deploy", description = "Deploy a service.",
        inputSchema = { type = "object", properties = { service = { type = "string" } } } },
      { name = "status", description = "Show status.", inputSchema = { type = "object", properties = {} } },
    },
  }
end

local function ok_openai(message, extra)
  local v = { id = "chatcmpl-1", model = "gpt-5.5-2026", choices = { { index = 0, message = message,
    finish_reason = "stop" } }, usage = { prompt_tokens = 11, completion_tokens = 7 } }
  for k, val in pairs(extra or {}) do v[k] = val end
  return { status = 200, body = v }
end

local function ok_anthropic(content, extra)
  local v = { id = "msg_1", type = "message", role = "assistant", model = "claude-sonnet-5-2026",
    content = content, stop_reason = "end_turn", usage = { input_tokens = 12, output_tokens = 5 } }
  for k, val in pairs(extra or {}) do v[k] = val end
  return { status = 200, body = v }
end

local function strings_in(v, out, seen)
  out, seen = out or {}, seen or {}
  if type(v) == "string" then
    out[#out + 1] = v
  elseif type(v) == "table" and not seen[v] then
    seen[v] = true
    for k, x in pairs(v) do
      strings_in(k, out, seen)
      strings_in(x, out, seen)
    end
  end
  return out
end

-- ---------------------------------------------------------------------------------------------

describe("providers.resolve", function()
  it("resolves openai and anthropic ids", function()
    local p = openai_provider()
    assert.are.equal("openai", p.name)
    assert.are.equal("gpt-5.5", p.model)
    local a = anthropic_provider()
    assert.are.equal("anthropic", a.name)
    assert.are.equal("claude-sonnet-5", a.model)
  end)

  it("keeps slashes after the first in the model name", function()
    local p = assert(providers.resolve("openai/meta-llama/Llama-3-8B", env {}))
    assert.are.equal("meta-llama/Llama-3-8B", p.model)
  end)

  it("refuses an unknown prefix with the usage hint", function()
    local p, err = providers.resolve("x/y", env {})
    assert.is_nil(p)
    assert.are.equal("unknown_provider", err.code)
    assert.are.equal("unknown model provider 'x' in 'x/y': use openai/<model> (any OpenAI-compatible server:"
      .. " OpenAI, llama.cpp, vLLM, Ollama) or anthropic/<model>", err.message)
  end)

  it("refuses an id with no slash", function()
    local p, err = providers.resolve("gpt-5.5", env {})
    assert.is_nil(p)
    assert.are.equal("unknown_provider", err.code)
    assert.matches("model id 'gpt%-5%.5' names no provider", err.message)
    assert.matches("openai/gpt%-5%.5", err.message)
    assert.matches("anthropic/<model>", err.message, 1, true)
  end)

  it("refuses empty parts and non-strings", function()
    assert.are.equal("unknown_provider", select(2, providers.resolve("openai/", env {})).code)
    assert.are.equal("unknown_provider", select(2, providers.resolve("/gpt", env {})).code)
    assert.are.equal("unknown_provider", select(2, providers.resolve(nil, env {})).code)
  end)

  it("uses the default base URLs", function()
    local io = stub { ok_openai { role = "assistant", content = "hi" } }
    assert(assert(providers.resolve("openai/gpt-5.5", env {})):complete({ messages = {} }, io))
    assert.are.equal("https://api.openai.com/v1/chat/completions", io.requests[1].url)
    io = stub { ok_anthropic { { type = "text", text = "hi" } } }
    assert(anthropic_provider():complete({ messages = {} }, io))
    assert.are.equal("https://api.anthropic.com/v1/messages", io.requests[1].url)
  end)

  it("accepts an env table", function()
    local p = assert(providers.resolve("openai/m", { OPENAI_BASE_URL = "http://h:1/v1/" }))
    local io = stub { ok_openai { role = "assistant", content = "hi" } }
    assert(p:complete({ messages = {} }, io))
    assert.are.equal("http://h:1/v1/chat/completions", io.requests[1].url)
  end)
end)

-- ---------------------------------------------------------------------------------------------

describe("openai request", function()
  it("sends a Chat Completions request with system, tools, tool calls and tool results", function()
    local io = stub { ok_openai { role = "assistant", content = "done" } }
    local req = conversation()
    req.maxTokens = 500
    assert(openai_provider():complete(req, io))
    local r = io.requests[1]
    assert.are.equal("POST", r.method)
    assert.are.equal("http://127.0.0.1:8080/v1/chat/completions", r.url)
    assert.are.equal("Bearer " .. OPENAI_KEY, r.headers.Authorization)
    assert.are.equal("application/json", r.headers["Content-Type"])
    assert.are.equal(120000, r.timeout)
    local b = body_of(io)
    assert.are.equal("gpt-5.5", b.model)
    assert.are.equal(500, b.max_tokens)
    assert.is_nil(b.response_format)
    assert.are.same({ role = "system", content = "You deploy services." }, b.messages[1])
    assert.are.same({ role = "user", content = "deploy api" }, b.messages[2])
    local asst = b.messages[3]
    assert.are.equal("assistant", asst.role)
    assert.are.equal("Deploying.", asst.content)
    assert.are.equal(2, #asst.tool_calls)
    assert.are.same({ id = "call_1", type = "function",
                      ["function"] = { name = "deploy", arguments = '{"service":"api"}' } }, asst.tool_calls[1])
    assert.are.equal("{}", asst.tool_calls[2]["function"].arguments)
    assert.are.same({ role = "tool", tool_call_id = "call_1", content = '{"ok":true}' }, b.messages[4])
    assert.are.equal("tool", b.messages[5].role)
    assert.are.equal("call_2", b.messages[5].tool_call_id)
    assert.matches("screenshot:", b.messages[5].content, 1, true)
    -- the image follows the tool results in a user message, as a data URL
    local img = b.messages[6]
    assert.are.equal("user", img.role)
    assert.are.equal("image_url", img.content[2].type)
    assert.are.equal("data:image/png;base64," .. PNG, img.content[2].image_url.url)
    assert.are.same({ role = "user", content = "thanks" }, b.messages[7])
    assert.are.equal(7, #b.messages)
    -- tools
    assert.are.equal(2, #b.tools)
    assert.are.same({ type = "function", ["function"] = { name = "deploy", description = "Deploy a service.",
      parameters = { type = "object", properties = { service = { type = "string" } } } } }, b.tools[1])
    assert.matches('"properties":{}', io.requests[1].body, 1, true)
  end)

  it("sends an assistant message with only tool calls with content null", function()
    local io = stub { ok_openai { role = "assistant", content = "ok" } }
    assert(openai_provider():complete({ messages = {
      { role = "user", content = "go" },
      { role = "assistant", toolCalls = { { id = "c", name = "t", input = { a = 1 } } } },
      { role = "tool", toolCallId = "c", name = "t", content = "1" } } }, io))
    assert.matches('"content":null', io.requests[1].body, 1, true)
    assert.is_nil(body_of(io).tools)
  end)

  it("sends user content parts: text, images as data URLs, other files as text", function()
    local io = stub { ok_openai { role = "assistant", content = "ok" } }
    assert(openai_provider():complete({ messages = { { role = "user", content = {
      { type = "text", text = "look" },
      { type = "file", mediaType = "image/jpeg", data = "AAAA" },
      { type = "file", mediaType = "text/plain", data = "aGVsbG8=", filename = "a.txt" },
      { type = "file", mediaType = "application/zip", data = "AAAA" } } } } }, io))
    local parts = body_of(io).messages[1].content
    assert.are.same({ type = "text", text = "look" }, parts[1])
    assert.are.same({ type = "image_url", image_url = { url = "data:image/jpeg;base64,AAAA" } }, parts[2])
    assert.are.equal("text", parts[3].type)
    assert.matches("hello", parts[3].text, 1, true)
    assert.matches("application/zip", parts[4].text, 1, true)
  end)

  it("asks for structured output with response_format json_schema", function()
    local schema = { type = "object", properties = { n = { type = "integer" } }, required = json.array { "n" } }
    local io = stub { ok_openai { role = "assistant", content = '{"n":3}' } }
    local a = assert(openai_provider():complete({ messages = { { role = "user", content = "n?" } },
      outputSchema = schema }, io))
    assert.are.same({ type = "json_schema", json_schema = { name = "output", strict = false,
      schema = { type = "object", properties = { n = { type = "integer" } }, required = { "n" } } } },
      body_of(io).response_format)
    assert.are.equal('{"n":3}', a.message.content)
  end)

  it("wraps a non-object output schema and unwraps the answer", function()
    local io = stub { ok_openai { role = "assistant", content = '{"value":[1,2]}' } }
    local a = assert(openai_provider():complete({ messages = {}, outputSchema = { type = "array" } }, io))
    local schema = body_of(io).response_format.json_schema.schema
    assert.are.equal("object", schema.type)
    assert.are.same({ type = "array" }, schema.properties.value)
    assert.are.equal("[1,2]", a.message.content)
  end)

  it("uses max_completion_tokens against api.openai.com", function()
    local io = stub { ok_openai { role = "assistant", content = "ok" } }
    local p = assert(providers.resolve("openai/gpt-5.5", env { OPENAI_API_KEY = OPENAI_KEY }))
    assert(p:complete({ messages = {}, maxTokens = 64 }, io))
    assert.are.equal(64, body_of(io).max_completion_tokens)
    assert.is_nil(body_of(io).max_tokens)
  end)

  it("sends no Authorization header without OPENAI_API_KEY", function()
    local io = stub { ok_openai { role = "assistant", content = "ok" } }
    assert(openai_provider { OPENAI_API_KEY = "" }:complete({ messages = {} }, io))
    assert.is_nil(io.requests[1].headers.Authorization)
  end)

  it("honours req.timeout (ms or a duration)", function()
    local ok = ok_openai { role = "assistant", content = "ok" }
    local io = stub { ok, ok }
    assert(openai_provider():complete({ messages = {}, timeout = 5000 }, io))
    assert(openai_provider():complete({ messages = {}, timeout = "2m" }, io))
    assert.are.equal(5000, io.requests[1].timeout)
    assert.are.equal(120000, io.requests[2].timeout)
  end)
end)

describe("openai response", function()
  it("parses text, usage, finish reason and model", function()
    local io = stub { ok_openai { role = "assistant", content = "Hello." } }
    local a = assert(openai_provider():complete({ messages = { { role = "user", content = "hi" } } }, io))
    assert.are.same({
      message = { role = "assistant", content = "Hello." },
      usage = { inputTokens = 11, outputTokens = 7 },
      finishReason = "stop",
      model = "gpt-5.5-2026",
    }, a)
  end)

  it("parses tool calls with arguments decoded", function()
    local io = stub { { status = 200, body = { choices = { { finish_reason = "tool_calls", message = {
      role = "assistant", content = json.null, tool_calls = {
        { id = "call_a", type = "function", ["function"] = { name = "deploy", arguments = '{"service":"api","n":2}' } },
        { id = "call_b", type = "function", ["function"] = { name = "status", arguments = "" } } } } } } } } }
    local a = assert(openai_provider():complete({ messages = {} }, io))
    assert.is_nil(a.message.content)
    assert.are.equal("tool_calls", a.finishReason)
    assert.are.equal(2, #a.message.toolCalls)
    assert.are.same({ id = "call_a", name = "deploy", input = { service = "api", n = 2 } }, a.message.toolCalls[1])
    assert.are.equal(math.type(2), math.type(a.message.toolCalls[1].input.n))
    assert.are.same({ id = "call_b", name = "status", input = {} }, a.message.toolCalls[2])
  end)

  it("reports length and missing usage", function()
    local v = { choices = { { message = { role = "assistant", content = "trunc" }, finish_reason = "length" } } }
    local io = stub { { status = 200, body = v } }
    local a = assert(openai_provider():complete({ model = "m", messages = {} }, io))
    assert.are.equal("length", a.finishReason)
    assert.are.same({ inputTokens = 0, outputTokens = 0 }, a.usage)
    assert.are.equal("m", a.model)
  end)

  it("refuses tool arguments that are not JSON, naming the tool", function()
    local io = stub { ok_openai { role = "assistant", tool_calls = {
      { id = "c1", type = "function", ["function"] = { name = "deploy", arguments = "{service: api" } } } } }
    local a, err = openai_provider():complete({ messages = {} }, io)
    assert.is_nil(a)
    assert.are.equal("bad_response", err.code)
    assert.matches("tool 'deploy'", err.message, 1, true)
    assert.matches("{service: api", err.message, 1, true)
  end)

  it("refuses malformed JSON with an excerpt", function()
    local io = stub { { status = 200, body = "<html>oops: " .. ("x"):rep(500) } }
    local a, err = openai_provider():complete({ messages = {} }, io)
    assert.is_nil(a)
    assert.are.equal("bad_response", err.code)
    assert.are.equal(200, err.status)
    assert.is_false(err.retryable)
    assert.matches("<html>oops: xxx", err.message, 1, true)
    assert.matches("choices[1].message", err.message, 1, true)
    assert.is_nil(err.message:find(("x"):rep(200), 1, true))   -- only an excerpt (200 bytes)
    assert.are.equal(1, #io.requests)                           -- not retried
  end)

  it("refuses JSON without choices", function()
    local io = stub { { status = 200, body = { object = "list", data = json.array {} } } }
    local _, err = openai_provider():complete({ messages = {} }, io)
    assert.are.equal("bad_response", err.code)
    assert.matches("no choices[1].message", err.message, 1, true)
    assert.matches('{"data":[],"object":"list"}', err.message, 1, true)
  end)
end)

-- ---------------------------------------------------------------------------------------------

describe("anthropic request", function()
  it("sends a Messages request with system, tools, tool_use and merged tool results", function()
    local io = stub { ok_anthropic { { type = "text", text = "done" } } }
    assert(anthropic_provider():complete(conversation(), io))
    local r = io.requests[1]
    assert.are.equal("POST", r.method)
    assert.are.equal("https://api.anthropic.com/v1/messages", r.url)
    assert.are.equal(ANTHROPIC_KEY, r.headers["x-api-key"])
    assert.are.equal("2023-06-01", r.headers["anthropic-version"])
    assert.are.equal("application/json", r.headers["content-type"])
    local b = body_of(io)
    assert.are.equal("claude-sonnet-5", b.model)
    assert.are.equal(4096, b.max_tokens)
    assert.are.equal("You deploy services.", b.system)
    assert.is_nil(b.tool_choice)
    assert.are.same({ role = "user", content = { { type = "text", text = "deploy api" } } }, b.messages[1])
    assert.are.same({ role = "assistant", content = {
      { type = "text", text = "Deploying." },
      { type = "tool_use", id = "call_1", name = "deploy", input = { service = "api" } },
      { type = "tool_use", id = "call_2", name = "status", input = {} } } }, b.messages[2])
    assert.matches('"input":{}', r.body, 1, true)
    -- both tool results and the next user text in one user message
    assert.are.equal(3, #b.messages)
    local u = b.messages[3]
    assert.are.equal("user", u.role)
    assert.are.same({ type = "tool_result", tool_use_id = "call_1", content = '{"ok":true}', is_error = false },
      u.content[1])
    assert.are.same({ type = "tool_result", tool_use_id = "call_2", is_error = true, content = {
      { type = "text", text = "screenshot:" },
      { type = "image", source = { type = "base64", media_type = "image/png", data = PNG } } } }, u.content[2])
    assert.are.same({ type = "text", text = "thanks" }, u.content[3])
    assert.are.same({ name = "deploy", description = "Deploy a service.",
      input_schema = { type = "object", properties = { service = { type = "string" } } } }, b.tools[1])
  end)

  it("sends images and PDFs in user messages, maxTokens and a base URL ending in /v1", function()
    local io = stub { ok_anthropic { { type = "text", text = "ok" } } }
    local p = anthropic_provider { ANTHROPIC_BASE_URL = "http://127.0.0.1:9000/v1/" }
    assert(p:complete({ maxTokens = 100, messages = { { role = "user", content = {
      { type = "text", text = "see" },
      { type = "file", mediaType = "image/webp", data = "AAAA" },
      { type = "file", mediaType = "application/pdf", data = "JVBERg==" } } } } }, io))
    assert.are.equal("http://127.0.0.1:9000/v1/messages", io.requests[1].url)
    local b = body_of(io)
    assert.are.equal(100, b.max_tokens)
    assert.is_nil(b.system)
    assert.is_nil(b.tools)
    local c = b.messages[1].content
    assert.are.same({ type = "image", source = { type = "base64", media_type = "image/webp", data = "AAAA" } }, c[2])
    assert.are.same({ type = "document",
      source = { type = "base64", media_type = "application/pdf", data = "JVBERg==" } }, c[3])
  end)

  it("asks for structured output through a final_output tool", function()
    local schema = { type = "object", properties = { n = { type = "integer" } } }
    local io = stub {
      ok_anthropic({ { type = "tool_use", id = "toolu_1", name = "final_output", input = { n = 3 } } },
        { stop_reason = "tool_use" }),
      ok_anthropic({ { type = "tool_use", id = "toolu_2", name = "deploy", input = { service = "x" } } },
        { stop_reason = "tool_use" }),
    }
    local a = assert(anthropic_provider():complete({ system = "Be brief.", messages = {
      { role = "user", content = "n?" } }, outputSchema = schema }, io))
    local b = body_of(io)
    assert.are.same({ type = "tool", name = "final_output" }, b.tool_choice)
    assert.are.equal("final_output", b.tools[1].name)
    assert.are.same(schema, b.tools[1].input_schema)
    assert.matches("^Be brief%.\n\nWhen you have the final answer, call the final_output tool", b.system)
    assert.are.equal('{"n":3}', a.message.content)
    assert.is_nil(a.message.toolCalls)
    assert.are.equal("stop", a.finishReason)

    -- with tools: any tool, and real tool calls come back as tool calls
    local req = conversation()
    req.outputSchema = schema
    a = assert(anthropic_provider():complete(req, io))
    b = body_of(io, 2)
    assert.are.same({ type = "any" }, b.tool_choice)
    assert.are.equal(3, #b.tools)
    assert.are.equal("final_output", b.tools[3].name)
    assert.are.equal("tool_calls", a.finishReason)
    assert.are.same({ { id = "toolu_2", name = "deploy", input = { service = "x" } } }, a.message.toolCalls)
  end)

  it("wraps a non-object output schema and renames the tool on a clash", function()
    local io = stub { ok_anthropic({ { type = "tool_use", id = "t", name = "moor__final_output",
      input = { value = { "a", "b" } } } }, { stop_reason = "tool_use" }) }
    local a = assert(anthropic_provider():complete({ messages = { { role = "user", content = "list" } },
      tools = { { name = "final_output", inputSchema = { type = "object" } } },
      outputSchema = { type = "array", items = { type = "string" } } }, io))
    local b = body_of(io)
    assert.are.equal("moor__final_output", b.tools[2].name)
    assert.are.same({ type = "array", items = { type = "string" } }, b.tools[2].input_schema.properties.value)
    assert.are.equal('["a","b"]', a.message.content)
  end)

  it("refuses to send without ANTHROPIC_API_KEY", function()
    local io = stub {}
    local a, err = anthropic_provider { ANTHROPIC_API_KEY = "" }:complete({ messages = {} }, io)
    assert.is_nil(a)
    assert.are.equal("config", err.code)
    assert.matches("ANTHROPIC_API_KEY", err.message, 1, true)
    assert.are.equal(0, #io.requests)
  end)
end)

describe("anthropic response", function()
  it("parses text blocks, tool_use, usage and stop reasons", function()
    local io = stub {
      ok_anthropic { { type = "text", text = "Hello, " }, { type = "text", text = "world." } },
      ok_anthropic({ { type = "thinking", thinking = "hmm" }, { type = "text", text = "Let me check." },
        { type = "tool_use", id = "toolu_9", name = "status", input = {} } },
        { stop_reason = "tool_use", usage = { input_tokens = 3, output_tokens = 4, cache_read_input_tokens = 10 } }),
      ok_anthropic({ { type = "text", text = "cut" } }, { stop_reason = "max_tokens" }),
    }
    local p = anthropic_provider()
    local a = assert(p:complete({ messages = {} }, io))
    assert.are.same({ message = { role = "assistant", content = "Hello, world." },
      usage = { inputTokens = 12, outputTokens = 5 }, finishReason = "stop", model = "claude-sonnet-5-2026" }, a)
    a = assert(p:complete({ messages = {} }, io))
    assert.are.equal("Let me check.", a.message.content)
    assert.are.same({ { id = "toolu_9", name = "status", input = {} } }, a.message.toolCalls)
    assert.are.equal("tool_calls", a.finishReason)
    assert.are.same({ inputTokens = 13, outputTokens = 4 }, a.usage)
    a = assert(p:complete({ messages = {} }, io))
    assert.are.equal("length", a.finishReason)
  end)

  it("refuses malformed JSON and replies without content", function()
    local io = stub { { status = 200, body = "not json at all" }, { status = 200, body = { type = "message" } } }
    local p = anthropic_provider()
    local _, err = p:complete({ messages = {} }, io)
    assert.are.equal("bad_response", err.code)
    assert.matches("not json at all", err.message, 1, true)
    _, err = p:complete({ messages = {} }, io)
    assert.are.equal("bad_response", err.code)
    assert.matches("no content list", err.message, 1, true)
  end)
end)

-- ---------------------------------------------------------------------------------------------

describe("retries and errors", function()
  local function run(kind, responses, req)
    local io = stub(responses)
    local p = kind == "openai" and openai_provider() or anthropic_provider()
    local a, err = p:complete(req or { messages = { { role = "user", content = "hi" } } }, io)
    return a, err, io
  end

  for _, kind in ipairs { "openai", "anthropic" } do
    local ok = kind == "openai" and ok_openai { role = "assistant", content = "fine" }
      or ok_anthropic { { type = "text", text = "fine" } }

    it(kind .. ": 429 then success honours retry-after", function()
      local a, _, io = run(kind, { { status = 429, headers = { ["retry-after"] = "7" },
        body = { error = { message = "slow down" } } }, ok })
      assert.are.equal("fine", a.message.content)
      assert.are.same({ 7000 }, io.sleeps)
      assert.are.equal(2, #io.requests)
      assert.are.equal(io.requests[1].body, io.requests[2].body)
      assert.matches("retrying in 7000 ms", io.logs[1], 1, true)
    end)

    it(kind .. ": 500 then success backs off 1 s", function()
      local a, _, io = run(kind, { { status = 500, body = "boom" }, ok })
      assert.are.equal("fine", a.message.content)
      assert.are.same({ 1000 }, io.sleeps)
    end)

    it(kind .. ": three retries then rate_limited", function()
      local r = { status = 429, body = { error = { message = "quota" } } }
      local a, err, io = run(kind, { r, r, r, r })
      assert.is_nil(a)
      assert.are.equal("rate_limited", err.code)
      assert.are.equal(429, err.status)
      assert.is_true(err.retryable)
      assert.matches("quota", err.message, 1, true)
      assert.matches("after 4 attempts", err.message, 1, true)
      assert.are.same({ 1000, 2000, 4000 }, io.sleeps)
      assert.are.equal(4, #io.requests)
    end)

    it(kind .. ": three retries then server_error", function()
      local r = { status = 503, body = "unavailable" }
      local _, err, io = run(kind, { r, { status = 502 }, r, { status = 529, body = "overloaded" } })
      assert.are.equal("server_error", err.code)
      assert.are.equal(529, err.status)
      assert.is_true(err.retryable)
      assert.are.same({ 1000, 2000, 4000 }, io.sleeps)
    end)

    it(kind .. ": a timeout is retried once, then a timeout error", function()
      local _, err, io = run(kind, { { timeout = true }, { timeout = true } })
      assert.are.equal("timeout", err.code)
      assert.is_true(err.retryable)
      assert.matches("120000 ms", err.message, 1, true)
      assert.are.equal(2, #io.requests)
      assert.are.same({ 1000 }, io.sleeps)
    end)

    it(kind .. ": a timeout then success", function()
      local a, _, io = run(kind, { { timeout = true }, ok })
      assert.are.equal("fine", a.message.content)
      assert.are.equal(2, #io.requests)
    end)

    it(kind .. ": transport errors are retried, then reported", function()
      local t = { transport = "Connection refused" }
      local _, err, io = run(kind, { t, t, t, t })
      assert.are.equal("transport", err.code)
      assert.matches("Connection refused", err.message, 1, true)
      assert.are.equal(4, #io.requests)
    end)

    it(kind .. ": 400 is bad_request with the server's message, not retried", function()
      local _, err, io = run(kind, { { status = 400, body = { type = "error",
        error = { type = "invalid_request_error", message = "messages: roles must alternate" } } } })
      assert.are.equal("bad_request", err.code)
      assert.are.equal(400, err.status)
      assert.is_false(err.retryable)
      assert.matches("messages: roles must alternate", err.message, 1, true)
      assert.are.equal(1, #io.requests)
    end)
  end

  it("openai: 401 is auth naming OPENAI_API_KEY and the base URL", function()
    local _, err, io = run("openai",
      { { status = 401, body = { error = { message = "Incorrect API key provided" } } } })
    assert.are.equal("auth", err.code)
    assert.are.equal(401, err.status)
    assert.is_false(err.retryable)
    assert.matches("OPENAI_API_KEY", err.message, 1, true)
    assert.matches("http://127.0.0.1:8080/v1", err.message, 1, true)
    assert.are.equal(1, #io.requests)
    -- with no key set, it says so
    io = stub { { status = 401, body = "no" } }
    local _, err2 = openai_provider { OPENAI_API_KEY = "" }:complete({ messages = {} }, io)
    assert.are.equal("auth", err2.code)
    assert.matches("OPENAI_API_KEY is not set", err2.message, 1, true)
  end)

  it("anthropic: 401 and 403 are auth naming ANTHROPIC_API_KEY", function()
    for _, status in ipairs { 401, 403 } do
      local _, err = run("anthropic", { { status = status, body = { type = "error",
        error = { type = "authentication_error", message = "invalid x-api-key" } } } })
      assert.are.equal("auth", err.code)
      assert.are.equal(status, err.status)
      assert.matches("ANTHROPIC_API_KEY", err.message, 1, true)
      assert.matches("https://api.anthropic.com", err.message, 1, true)
    end
  end)

  it("retry-after as an HTTP date", function()
    local date = "Tue, 14 Nov 2023 22:13:25 GMT"   -- NOW + 5 s
    assert.are.equal(NOW + 5, providers.parse_http_date(date))
    local _, _, io = run("openai", { { status = 429, headers = { ["retry-after"] = date } },
      ok_openai { role = "assistant", content = "x" } })
    assert.are.same({ 5000 }, io.sleeps)
  end)

  it("an unparseable retry-after falls back to the backoff", function()
    local _, _, io = run("openai", { { status = 503, headers = { ["retry-after"] = "soon" } },
      { status = 503, headers = { ["retry-after"] = "soon" } }, ok_openai { role = "assistant", content = "x" } })
    assert.are.same({ 1000, 2000 }, io.sleeps)
  end)

  it("a retry-after longer than a minute is handed back, not slept", function()
    local a, err, io = run("openai", { { status = 429, headers = { ["retry-after"] = "3600" } } })
    assert.is_nil(a)
    assert.are.equal("rate_limited", err.code)
    assert.are.equal(3600000, err.retryAfter)
    assert.is_true(err.retryable)
    assert.are.same({}, io.sleeps)
  end)

  it("a retry-after too large for an integer is handed back as a clean rate limit", function()
    for _, h in ipairs { { ["retry-after"] = "1e300" }, { ["retry-after-ms"] = "1e30" } } do
      local a, err = run("openai", { { status = 429, headers = h } })
      assert.is_nil(a)
      assert.are.equal("rate_limited", err.code)
      assert.are.equal("integer", math.type(err.retryAfter))
    end
  end)

  it("backoff doubles and caps at 30 s", function()
    assert.are.same({ 1000, 2000, 4000, 8000, 16000, 30000, 30000 },
      { providers.backoff_ms(1), providers.backoff_ms(2), providers.backoff_ms(3), providers.backoff_ms(4),
        providers.backoff_ms(5), providers.backoff_ms(6), providers.backoff_ms(7) })
  end)
end)

-- ---------------------------------------------------------------------------------------------

describe("API keys", function()
  local function echo(key)
    -- servers that echo the key back in every way they can
    return {
      { status = 401, body = { error = { message = "Incorrect API key provided: " .. key } } },
      { status = 403, body = "forbidden for " .. key },
      { status = 400, body = { error = { message = "bad key " .. key .. " in request" } } },
      { status = 200, body = "not json " .. key },
      { status = 200, body = { choices = "?" .. key, content = "?" .. key } },
      { transport = "could not connect with " .. key },
      { transport = "could not connect with " .. key },
      { transport = "could not connect with " .. key },
      { transport = "could not connect with " .. key },
      { status = 500, body = key }, { status = 500, body = key }, { status = 500, body = key },
      { status = 500, body = key },
      { status = 429, headers = { ["retry-after"] = "1" }, body = key },
      { status = 200, body = { choices = { { message = { role = "assistant", content = "ok" } } } } },
    }
  end

  for _, kind in ipairs { "openai", "anthropic" } do
    it(kind .. ": never appear in returned values, errors or log lines", function()
      local key = kind == "openai" and OPENAI_KEY or ANTHROPIC_KEY
      local p = kind == "openai" and openai_provider() or anthropic_provider()
      local io = stub(echo(key))
      local returned = { p }
      for _ = 1, 8 do
        local a, err = p:complete({ messages = { { role = "user", content = "hi" } } }, io)
        returned[#returned + 1] = a or false
        returned[#returned + 1] = err or false
      end
      returned[#returned + 1] = io.logs
      -- the key did go out on the wire
      local sent = io.requests[1].headers
      assert.is_truthy(sent.Authorization == "Bearer " .. key or sent["x-api-key"] == key)
      local seen = strings_in(returned)
      assert.is_true(#seen > 10)
      for _, s in ipairs(seen) do
        assert.is_nil(s:find(key, 1, true), "the key leaked in: " .. s)
        assert.is_nil(s:find(key:sub(-12), 1, true), "part of the key leaked in: " .. s)
      end
    end)
  end
end)

-- ---------------------------------------------------------------------------------------------

describe("scripted provider", function()
  it("consumes a list of replies in order", function()
    local p = scripted.new {
      { toolCalls = { { name = "deploy", input = { service = "api" } }, { name = "status", id = "mine" } } },
      "All done.",
    }
    assert.are.equal("scripted", p.name)
    local a = assert(p:complete { messages = { { role = "user", content = "go" } } })
    assert.are.same({
      message = { role = "assistant", toolCalls = {
        { id = "call_1_1", name = "deploy", input = { service = "api" } },
        { id = "mine", name = "status", input = {} } } },
      usage = { inputTokens = 0, outputTokens = 0 }, finishReason = "tool_calls", model = "scripted",
    }, a)
    a = assert(p:complete { messages = {} })
    assert.are.same({ message = { role = "assistant", content = "All done." },
      usage = { inputTokens = 0, outputTokens = 0 }, finishReason = "stop", model = "scripted" }, a)
    local none, err = p:complete { messages = {} }
    assert.is_nil(none)
    assert.are.equal("script_exhausted", err.code)
    assert.matches("call 3", err.message, 1, true)
  end)

  it("calls a function with the turn", function()
    local turns = {}
    local tools = { { name = "deploy" } }
    local schema = { type = "object" }
    local p = scripted.new(function(turn)
      turns[#turns + 1] = turn
      if turn.n == 1 then
        return { text = "checking", toolCalls = { { name = "deploy", input = { service = "api" } } },
                 usage = { inputTokens = 5, outputTokens = 2 } }
      end
      local last = turn.messages[#turn.messages]
      return { data = { result = last.content } }
    end)
    local msgs = { { role = "user", content = "go" } }
    local a = assert(p:complete { system = "sys", messages = msgs, tools = tools, outputSchema = schema })
    assert.are.equal("checking", a.message.content)
    assert.are.equal("call_1_1", a.message.toolCalls[1].id)
    assert.are.same({ inputTokens = 5, outputTokens = 2 }, a.usage)
    msgs[#msgs + 1] = a.message
    msgs[#msgs + 1] = { role = "tool", toolCallId = "call_1_1", name = "deploy", content = "deployed" }
    a = assert(p:complete { messages = msgs, tools = tools })
    assert.are.equal('{"result":"deployed"}', a.message.content)
    assert.are.equal("stop", a.finishReason)
    assert.are.equal(1, turns[1].n)
    assert.are.equal(2, turns[2].n)
    assert.are.equal("sys", turns[1].system)
    assert.are.equal(schema, turns[1].outputSchema)
    assert.are.equal(tools, turns[1].tools)
    assert.are.equal(msgs, turns[2].messages)
    assert.are.equal(2, p.calls)
  end)

  it("returns scripted errors and refuses bad replies", function()
    local p = scripted.new {
      { error = { code = "rate_limited", message = "slow", retryable = true } },
      { toolCalls = { { input = {} } } },
      42,
      { text = "x", toolCalls = {} },
    }
    local a, err = p:complete { messages = {} }
    assert.is_nil(a)
    assert.are.same({ code = "rate_limited", message = "slow", retryable = true }, err)
    a, err = p:complete { messages = {} }
    assert.is_nil(a)
    assert.are.equal("bad_response", err.code)
    assert.matches("toolCalls[1] needs a name", err.message, 1, true)
    a, err = p:complete { messages = {} }
    assert.is_nil(a)
    assert.are.equal("bad_response", err.code)
    assert.matches("not number", err.message, 1, true)
    a = assert(p:complete { messages = {} })
    assert.is_nil(a.message.toolCalls)
  end)

  it("reports a script that raises", function()
    local p = scripted.new(function() error("no reply for this") end)
    local a, err = p:complete { messages = {} }
    assert.is_nil(a)
    assert.are.equal("script_error", err.code)
    assert.matches("no reply for this", err.message, 1, true)
    assert.is_string(err.traceback)
  end)

  it("refuses a script that is neither a function nor a list", function()
    assert.has_error(function() scripted.new("hi") end)
  end)
end)
