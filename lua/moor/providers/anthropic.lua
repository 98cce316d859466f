--- moor.providers.anthropic: an Anthropic Messages API client.
-- POST {ANTHROPIC_BASE_URL}/v1/messages with x-api-key: ANTHROPIC_API_KEY.
--
-- Structured output (req.outputSchema): the request gets one more tool, `final_output`, whose
-- input_schema is the output schema (wrapped as { value = schema } when its root is not an
-- object), and tool_choice = { type = "any" } (or that tool by name when it is the only one), so
-- the model must either call a real tool or answer through final_output; the system prompt says
-- so. A final_output call comes back as the answer's content (its input as JSON text),
-- finishReason "stop", never as a tool call. The tool is named `moor__final_output` when an
-- author's tool is already called `final_output`.
local providers = require "moor.providers"
local conf = require "moor.conf"

local M = {}

local DEFAULT_BASE = "https://api.anthropic.com"
local VERSION = "2023-06-01"
local DEFAULT_MAX_TOKENS = conf.ANTHROPIC_MAX_TOKENS
local NAME = "anthropic"

local IMAGE_TYPES = { ["image/jpeg"] = true, ["image/png"] = true, ["image/gif"] = true, ["image/webp"] = true }

local OUTPUT_INSTRUCTIONS = "When you have the final answer, call the %s tool with it as the input;"
  .. " do not give the final answer as plain text."

local function text_block(text)
  return { type = "text", text = text }
end

-- Content blocks for a part list. allow_docs: PDFs as document blocks (user messages).
local function part_blocks(content, allow_docs)
  local blocks = {}
  for _, part in ipairs(content) do
    if part.type == "text" then
      if part.text ~= nil and part.text ~= "" then blocks[#blocks + 1] = text_block(tostring(part.text)) end
    elseif part.type == "file" then
      local mt = tostring(part.mediaType or ""):lower()
      if IMAGE_TYPES[mt] then
        blocks[#blocks + 1] = { type = "image", source = { type = "base64", media_type = mt, data = part.data } }
      elseif allow_docs and mt == "application/pdf" then
        blocks[#blocks + 1] = { type = "document", source = { type = "base64", media_type = mt, data = part.data } }
      else
        blocks[#blocks + 1] = text_block(providers.file_as_text(part))
      end
    end
  end
  return blocks
end

--- The name the structured-output tool gets for this request.
function M.output_tool_name(req)
  for _, t in ipairs(req.tools or {}) do
    if t.name == "final_output" then return "moor__final_output" end
  end
  return "final_output"
end

--- The Messages API request body (a table) for a normalized request.
function M.build_body(req)
  local json = providers.json()
  local messages = {}
  local systems = {}
  if req.system ~= nil and req.system ~= "" then systems[1] = tostring(req.system) end

  -- append blocks as role; consecutive same-role messages merge into one
  local function push(role, blocks)
    if #blocks == 0 then return end
    local last = messages[#messages]
    if last and last.role == role then
      for _, b in ipairs(blocks) do last.content[#last.content + 1] = b end
    else
      messages[#messages + 1] = { role = role, content = json.array(blocks) }
    end
  end

  for i, m in ipairs(req.messages or {}) do
    if m.role == "user" then
      if type(m.content) == "table" then
        push("user", part_blocks(m.content, true))
      else
        local text = m.content == nil and "" or tostring(m.content)
        push("user", { text_block(text ~= "" and text or "(empty message)") })
      end
    elseif m.role == "system" then
      local text = providers.content_text(m.content)
      if text and text ~= "" then systems[#systems + 1] = text end
    elseif m.role == "assistant" then
      local blocks = {}
      local text = providers.content_text(m.content)
      if text and text ~= "" then blocks[1] = text_block(text) end
      for _, call in ipairs(m.toolCalls or {}) do
        local input = call.input
        if input == nil or input == json.null or (type(input) == "table" and next(input) == nil) then
          input = {}   -- a fresh empty table encodes as {} (an array-marked one would be [])
        end
        blocks[#blocks + 1] = { type = "tool_use", id = call.id, name = call.name, input = input }
      end
      push("assistant", blocks)
    elseif m.role == "tool" then
      local content
      if type(m.content) == "table" then
        content = json.array(part_blocks(m.content, false))
      else
        content = m.content == nil and "" or tostring(m.content)
      end
      push("user", { { type = "tool_result", tool_use_id = m.toolCallId, content = content,
                       is_error = m.isError == true } })
    else
      return nil, providers.fail("bad_request",
        ("anthropic: messages[%d] has role %s (expected user, assistant or tool)"):format(i, tostring(m.role)))
    end
  end

  local body = {
    model = req.model,
    max_tokens = req.maxTokens or DEFAULT_MAX_TOKENS,
    messages = json.array(messages),
    stream = true,   -- the event stream: text deltas reach the session's stream as they come
  }
  local tools = {}
  for _, t in ipairs(req.tools or {}) do
    tools[#tools + 1] = { name = t.name, description = t.description,
                          input_schema = t.inputSchema or { type = "object", properties = {} } }
  end
  if req.outputSchema ~= nil then
    local name = M.output_tool_name(req)
    local schema = providers.object_schema(req.outputSchema)
    tools[#tools + 1] = { name = name, input_schema = schema,
                          description = "Give your final answer: its input is the answer, in the required shape." }
    if #tools == 1 then
      body.tool_choice = { type = "tool", name = name }
    else
      body.tool_choice = { type = "any" }
    end
    systems[#systems + 1] = OUTPUT_INSTRUCTIONS:format(name)
  end
  if #tools > 0 then body.tools = json.array(tools) end
  if #systems > 0 then body.system = table.concat(systems, "\n\n") end
  return body
end

local STOP_REASONS = {
  end_turn = "stop", stop_sequence = "stop", tool_use = "tool_calls",
  max_tokens = "length", refusal = "content_filter",
}

local function bad(base, what, body)
  return providers.bad_response("anthropic", base, "a Messages response", what, body)
end

--- Parse a decoded Messages response into moor's answer. raw is the body text.
function M.parse(v, raw, req, base)
  local json = providers.json()
  if v.type == "error" and type(v.error) == "table" then
    return nil, providers.fail("server_error", "anthropic: the server answered 200 with an error: "
      .. providers.excerpt(tostring(v.error.message), 500), { status = 200, retryable = true })
  end
  if type(v.content) ~= "table" then
    return bad(base, "its reply has no content list", raw)
  end
  local output_name = req.outputSchema ~= nil and M.output_tool_name(req) or nil
  local texts, calls, final = {}, {}, nil
  for i, block in ipairs(v.content) do
    if type(block) ~= "table" then return bad(base, ("content[%d] is not a block"):format(i), raw) end
    if block.type == "text" then
      if type(block.text) ~= "string" then return bad(base, ("content[%d] has no text"):format(i), raw) end
      texts[#texts + 1] = block.text
    elseif block.type == "tool_use" then
      if type(block.name) ~= "string" or type(block.id) ~= "string" then
        return bad(base, ("content[%d] (tool_use) has no id or name"):format(i), raw)
      end
      local input = block.input
      if input == nil or input == json.null then input = {} end
      if type(input) ~= "table" then
        return nil, providers.fail("bad_response", ("anthropic: the model called tool '%s' with an input that is"
          .. " not a JSON object"):format(block.name))
      end
      if output_name and block.name == output_name then
        final = input   -- the answer, unless real tool calls come with it (then it is dropped)
      else
        calls[#calls + 1] = { id = block.id, name = block.name, input = input }
      end
    end
    -- thinking and other blocks are not part of the answer
  end

  local content = table.concat(texts)
  if content == "" then content = nil end
  local finish = STOP_REASONS[v.stop_reason] or (type(v.stop_reason) == "string" and v.stop_reason) or "stop"
  if #calls == 0 then
    calls = nil
    if final ~= nil then
      local _, wrapped = providers.object_schema(req.outputSchema)
      local value = final
      if wrapped then value = final.value == nil and json.null or final.value end
      local text, eerr = json.encode(value)
      if not text then
        return nil, providers.fail("bad_response", "anthropic: the final_output input is not JSON: " .. tostring(eerr))
      end
      content = text
      finish = "stop"
    end
  elseif finish == "stop" then
    finish = "tool_calls"
  end

  local usage = type(v.usage) == "table" and v.usage or {}
  local input_tokens = (math.tointeger(usage.input_tokens) or 0)
    + (math.tointeger(usage.cache_creation_input_tokens) or 0)
    + (math.tointeger(usage.cache_read_input_tokens) or 0)
  return providers.answer(v, req, content, calls, input_tokens, math.tointeger(usage.output_tokens) or 0, finish)
end

--- A reader of a streamed Messages reply (message_start, content_block_start/delta/stop,
-- message_delta, message_stop; ping and unknown events skipped; error). Its result is the
-- reply as one unstreamed Messages response, for M.parse: text blocks joined from their
-- text_delta pieces, tool_use inputs decoded from their input_json_delta pieces.
function M.stream_decoder(on_text)
  local json = providers.json()
  local st = { blocks = {}, nblocks = 0, usage = {} }
  local function merge_usage(u)
    if type(u) ~= "table" then return end
    for k, v in pairs(u) do st.usage[k] = v end
  end
  local function on_event(d, _, data)
    if st.done then return nil end
    local v = json.decode(data)
    if type(v) ~= "table" then
      return "has an event whose data is not a JSON object: " .. providers.excerpt(data, 200)
    end
    local t = v.type
    if t == "message_start" then
      local m = type(v.message) == "table" and v.message or {}
      if type(m.model) == "string" then st.model = m.model end
      merge_usage(m.usage)
    elseif t == "content_block_start" then
      local i, b = math.tointeger(v.index), v.content_block
      if not i or i < 0 or i > 1024 or type(b) ~= "table" then
        return "has a content_block_start without an index and a block"
      end
      local block = { type = b.type }
      if b.type == "text" then
        block.text = { type(b.text) == "string" and b.text or "" }
        if block.text[1] ~= "" then d:text(block.text[1]) end
      elseif b.type == "tool_use" then
        block.id, block.name, block.input0, block.json = b.id, b.name, b.input, {}
      end
      st.blocks[i + 1] = block
      if i + 1 > st.nblocks then st.nblocks = i + 1 end
    elseif t == "content_block_delta" then
      local i, delta = math.tointeger(v.index), v.delta
      local block = i and st.blocks[i + 1]
      if not block then
        return ("has a content_block_delta for block %s that never started"):format(tostring(v.index))
      end
      if type(delta) ~= "table" then return "has a content_block_delta without a delta" end
      if delta.type == "text_delta" and block.text then
        if type(delta.text) ~= "string" then return "has a text_delta without text" end
        block.text[#block.text + 1] = delta.text
        if delta.text ~= "" then d:text(delta.text) end
      elseif delta.type == "input_json_delta" and block.json then
        if type(delta.partial_json) ~= "string" then return "has an input_json_delta without partial_json" end
        block.json[#block.json + 1] = delta.partial_json
      end
    elseif t == "message_delta" then
      local delta = type(v.delta) == "table" and v.delta or {}
      if type(delta.stop_reason) == "string" then st.stop = delta.stop_reason end
      merge_usage(v.usage)
    elseif t == "message_stop" then
      st.done = true
    elseif t == "error" then
      st.error = v
      st.done = true
    end
    return nil
  end
  local function result()
    if st.error then return st.error end
    if not st.done then return nil, "ended before message_stop (the stream was cut short)" end
    local content = {}
    for i = 1, st.nblocks do
      local b = st.blocks[i]
      if b and b.type == "text" then
        content[#content + 1] = { type = "text", text = table.concat(b.text) }
      elseif b and b.type == "tool_use" then
        local text, input = table.concat(b.json), b.input0
        if text ~= "" then
          input = json.decode(text)
          if type(input) ~= "table" then input = text end -- parse says it is not an object
        end
        content[#content + 1] = { type = "tool_use", id = b.id, name = b.name, input = input }
      elseif b then
        content[#content + 1] = { type = b.type }
      end
    end
    return { type = "message", model = st.model, content = content, stop_reason = st.stop or json.null,
             usage = st.usage }
  end
  return providers.stream_decoder(on_text, on_event, result)
end

--- A provider for model (the part after "anthropic/"); env(name) reads the environment.
function M.new(model, env)
  local base, key = providers.endpoint(env, "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", DEFAULT_BASE)
  local url = base:match("/v1$") and (base .. "/messages") or (base .. "/v1/messages")

  local p = { name = NAME, model = model, baseUrl = providers.display_url(base) }

  function p.complete(_, req, io)
    req = req or {}
    if not key then
      return nil, providers.fail("config", "anthropic: ANTHROPIC_API_KEY is not set: set it to an Anthropic API key"
        .. " (the server is " .. providers.display_url(base) .. ", from ANTHROPIC_BASE_URL)")
    end
    local r = setmetatable({ model = req.model or model }, { __index = req })
    local body, err = M.build_body(r)
    if not body then return nil, err end
    return providers.exchange(io, {
      provider = NAME, url = url, base_url = base,
      headers = { ["x-api-key"] = key, ["anthropic-version"] = VERSION, ["content-type"] = "application/json" },
      body = body, timeout = providers.timeout_ms(req.timeout), secret = key,
      key_env = "ANTHROPIC_API_KEY", base_env = "ANTHROPIC_BASE_URL", key_set = true,
      expected = "a Messages response with a content list",
      stream = M.stream_decoder,
      parse = function(v, raw) return M.parse(v, raw, r, base) end,
    })
  end

  return p
end

return M
