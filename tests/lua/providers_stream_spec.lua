-- Specs for streamed model replies: both providers ask for a stream, read it piece by piece
-- (text deltas handed to io.delta as they come, tool-call arguments assembled from their
-- pieces), and give clear errors for a malformed or truncated stream. The real libcurl path
-- against the fake model server is tests/e2e/test_session_stream.sh.

local json = require "moor.json"
local providers = require "moor.providers"
local sse = require "moor.providers.sse"

local function env(t)
  return function(name) return t[name] end
end

local function openai()
  return assert(providers.resolve("openai/gpt-test", env { OPENAI_BASE_URL = "http://127.0.0.1:9/v1" }))
end

local function anthropic()
  return assert(providers.resolve("anthropic/claude-test", env { ANTHROPIC_API_KEY = "ant-key-123" }))
end

-- An io whose fetch hands each response's pieces to onData one by one (as the C client
-- does), then answers with an empty body. A response is { pieces = {...} } | { transport = msg }.
local function stream_io(responses)
  local io = { requests = {}, deltas = {}, resets = {}, sleeps = {} }
  local i = 0
  function io.fetch(req)
    io.requests[#io.requests + 1] = req
    i = i + 1
    local r = assert(responses[i], "no response for request " .. i)
    for _, p in ipairs(r.pieces or {}) do req.onData(p) end
    if r.transport then return nil, r.transport end
    return { status = r.status or 200, headers = {}, body = r.body or "" }
  end
  function io.delta(t) io.deltas[#io.deltas + 1] = t end
  function io.reset(why) io.resets[#io.resets + 1] = why end
  function io.sleep(ms) io.sleeps[#io.sleeps + 1] = ms end
  return io
end

-- Split s into pieces of n bytes (a stream cut anywhere, mid-line and mid-UTF-8 too).
local function split(s, n)
  local out = {}
  for i = 1, #s, n do out[#out + 1] = s:sub(i, i + n - 1) end
  return out
end

local function data(v) return "data: " .. (type(v) == "string" and v or json.encode(v)) .. "\n\n" end

local function openai_stream(text_pieces, calls, opts)
  opts = opts or {}
  local out = {}
  for _, t in ipairs(text_pieces) do
    out[#out + 1] = data { model = "gpt-test", choices = { { index = 0, delta = { content = t } } } }
  end
  for i, c in ipairs(calls or {}) do
    out[#out + 1] = data { choices = { { index = 0, delta = { tool_calls = { { index = i - 1, id = c.id,
      type = "function", ["function"] = { name = c.name, arguments = "" } } } } } } }
    for _, a in ipairs(c.args) do
      out[#out + 1] = data { choices = { { index = 0, delta = { tool_calls = { { index = i - 1,
        ["function"] = { arguments = a } } } } } } }
    end
  end
  out[#out + 1] = data { choices = { { index = 0, delta = {}, finish_reason = calls and "tool_calls" or "stop" } } }
  out[#out + 1] = data { choices = json.array {}, usage = { prompt_tokens = 7, completion_tokens = 3 } }
  if not opts.cut then out[#out + 1] = data "[DONE]" end
  return table.concat(out)
end

local function ev(name, v) return "event: " .. name .. "\r\ndata: " .. json.encode(v) .. "\r\n\r\n" end

local function anthropic_stream(text_pieces, uses, opts)
  opts = opts or {}
  local out = { ev("message_start", { type = "message_start", message = { model = "claude-test",
    usage = { input_tokens = 11, output_tokens = 1 } } }), ": keep-alive\n\n", ev("ping", { type = "ping" }) }
  out[#out + 1] = ev("content_block_start", { type = "content_block_start", index = 0,
    content_block = { type = "text", text = "" } })
  for _, t in ipairs(text_pieces) do
    out[#out + 1] = ev("content_block_delta", { type = "content_block_delta", index = 0,
      delta = { type = "text_delta", text = t } })
  end
  out[#out + 1] = ev("content_block_stop", { type = "content_block_stop", index = 0 })
  for i, u in ipairs(uses or {}) do
    out[#out + 1] = ev("content_block_start", { type = "content_block_start", index = i,
      content_block = { type = "tool_use", id = u.id, name = u.name, input = {} } })
    for _, a in ipairs(u.args) do
      out[#out + 1] = ev("content_block_delta", { type = "content_block_delta", index = i,
        delta = { type = "input_json_delta", partial_json = a } })
    end
    out[#out + 1] = ev("content_block_stop", { type = "content_block_stop", index = i })
  end
  out[#out + 1] = ev("message_delta", { type = "message_delta",
    delta = { stop_reason = uses and "tool_use" or "end_turn" }, usage = { output_tokens = 9 } })
  if not opts.cut then out[#out + 1] = ev("message_stop", { type = "message_stop" }) end
  return table.concat(out)
end

local REQ = { messages = { { role = "user", content = "hi" } } }

describe("the SSE reader", function()
  it("reads events split anywhere, with LF, CRLF and CR line ends and comments", function()
    local got = {}
    local r = sse.new(function(e, d) got[#got + 1] = e .. "=" .. d end)
    local text = "event: a\r\ndata: 1\r\ndata: 2\r\n\r\n: note\n\ndata: x\rdata:y\r\r" .. "data: last\n"
    for _, p in ipairs(split(text, 1)) do r:feed(p) end
    r:close()
    assert.same({ "a=1\n2", "message=x\ny" }, got)
  end)
end)

describe("openai streaming", function()
  it("asks for a stream with usage, and hands each text delta on as it comes", function()
    local io = stream_io { { pieces = split(openai_stream { "Hel", "lo, ", "wörld" }, 7) } }
    local res = assert(openai():complete(REQ, io))
    local body = json.decode(io.requests[1].body)
    assert.is_true(body.stream)
    assert.is_true(body.stream_options.include_usage)
    assert.same({ "Hel", "lo, ", "wörld" }, io.deltas)
    assert.equal("Hello, wörld", res.message.content)
    assert.equal(table.concat(io.deltas), res.message.content)
    assert.same({ inputTokens = 7, outputTokens = 3 }, res.usage)
    assert.equal("stop", res.finishReason)
    assert.equal("gpt-test", res.model)
  end)

  it("assembles tool-call arguments from their pieces", function()
    local s = openai_stream({}, { { id = "call_1", name = "deploy", args = { '{"serv', 'ice": "a', 'pi"}' } },
                                  { id = "call_2", name = "page", args = { "{}" } } })
    local io = stream_io { { pieces = split(s, 13) } }
    local res = assert(openai():complete(REQ, io))
    assert.same({ { id = "call_1", name = "deploy", input = { service = "api" } },
                  { id = "call_2", name = "page", input = {} } }, res.message.toolCalls)
    assert.equal("tool_calls", res.finishReason)
  end)

  it("reads a server that ignores stream = true and answers plain JSON", function()
    local plain = json.encode { model = "m", choices = { { message = { role = "assistant", content = "plain" },
      finish_reason = "stop" } }, usage = { prompt_tokens = 1, completion_tokens = 2 } }
    local res = assert(openai():complete(REQ, stream_io { { pieces = split(plain, 10) } }))
    assert.equal("plain", res.message.content)
  end)

  it("says a stream cut short (no [DONE]) is cut short", function()
    local cut = openai_stream({ "partial" }, nil, { cut = true })
    local res, err = openai():complete(REQ, stream_io { { pieces = { cut } } })
    assert.is_nil(res)
    assert.equal("bad_response", err.code)
    assert.matches("event stream that ended before its end", err.message, 1, true)
    assert.matches("cut short", err.message, 1, true)
  end)

  it("says what was wrong with garbage in a stream", function()
    local pieces = { data { choices = { { delta = { content = "a" } } } }, "data: {not json\n\n", data "[DONE]" }
    local res, err = openai():complete(REQ, stream_io { { pieces = pieces } })
    assert.is_nil(res)
    assert.equal("bad_response", err.code)
    assert.matches("an event whose data is not a JSON object: {not json", err.message, 1, true)
  end)

  it("says tool arguments assembled into something that is not JSON are not JSON", function()
    local s = openai_stream({}, { { id = "c", name = "deploy", args = { '{"a": ', "tru" } } })
    local res, err = openai():complete(REQ, stream_io { { pieces = { s } } })
    assert.is_nil(res)
    assert.matches("called tool 'deploy' with arguments that are not a JSON object", err.message, 1, true)
  end)

  it("retries a stream the connection dropped, and says the text streamed so far is void", function()
    local io = stream_io {
      { pieces = { data { choices = { { delta = { content = "Hal" } } } } }, transport = "transfer closed" },
      { pieces = { openai_stream { "Hello" } } },
    }
    local res = assert(openai():complete(REQ, io))
    assert.equal("Hello", res.message.content)
    assert.same({ "Hal", "Hello" }, io.deltas)
    assert.equal(1, #io.resets)
    assert.matches("transfer closed", io.resets[1], 1, true)
  end)

  it("reports an error event inside a 200 stream as the server's error", function()
    local res, err = openai():complete(REQ, stream_io { { pieces = { data { error = { message = "overloaded" } } } } })
    assert.is_nil(res)
    assert.equal("server_error", err.code)
    assert.matches("overloaded", err.message, 1, true)
  end)
end)

describe("anthropic streaming", function()
  it("asks for the event stream and hands each text delta on as it comes", function()
    local io = stream_io { { pieces = split(anthropic_stream { "Bon", "jour" }, 5) } }
    local res = assert(anthropic():complete(REQ, io))
    assert.is_true(json.decode(io.requests[1].body).stream)
    assert.same({ "Bon", "jour" }, io.deltas)
    assert.equal("Bonjour", res.message.content)
    assert.same({ inputTokens = 11, outputTokens = 9 }, res.usage)
    assert.equal("stop", res.finishReason)
    assert.equal("claude-test", res.model)
  end)

  it("assembles tool_use inputs from their input_json_delta pieces", function()
    local s = anthropic_stream({ "Deploying." }, {
      { id = "toolu_1", name = "deploy", args = { '{"service"', ': "api"}' } },
      { id = "toolu_2", name = "noop", args = {} } })
    local res = assert(anthropic():complete(REQ, stream_io { { pieces = split(s, 17) } }))
    assert.equal("Deploying.", res.message.content)
    assert.same({ { id = "toolu_1", name = "deploy", input = { service = "api" } },
                  { id = "toolu_2", name = "noop", input = {} } }, res.message.toolCalls)
    assert.equal("tool_calls", res.finishReason)
  end)

  it("says a stream cut short (no message_stop) is cut short", function()
    local cut = anthropic_stream({ "x" }, nil, { cut = true })
    local res, err = anthropic():complete(REQ, stream_io { { pieces = { cut } } })
    assert.is_nil(res)
    assert.equal("bad_response", err.code)
    assert.matches("ended before message_stop", err.message, 1, true)
  end)

  it("says a delta for a block that never started is malformed", function()
    local res, err = anthropic():complete(REQ, stream_io { { pieces = { ev("content_block_delta",
      { type = "content_block_delta", index = 3, delta = { type = "text_delta", text = "x" } }) } } })
    assert.is_nil(res)
    assert.matches("content_block_delta for block 3 that never started", err.message, 1, true)
  end)

  it("reports an error event as the server's error", function()
    local res, err = anthropic():complete(REQ, stream_io { { pieces = { ev("error",
      { type = "error", error = { type = "overloaded_error", message = "Overloaded" } }) } } })
    assert.is_nil(res)
    assert.equal("server_error", err.code)
    assert.matches("Overloaded", err.message, 1, true)
  end)
end)
