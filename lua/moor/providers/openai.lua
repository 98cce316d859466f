--- moor.providers.openai: an OpenAI-compatible Chat Completions client (OpenAI, llama.cpp's
-- server, vLLM, Ollama, ...). POST {OPENAI_BASE_URL}/chat/completions; the base URL includes
-- the /v1, as OpenAI's SDKs take it. With no OPENAI_API_KEY the request goes without auth.
local providers = require "moor.providers"

local M = {}

local DEFAULT_BASE = "https://api.openai.com/v1"
local NAME = "openai"

local function is_image(media_type)
  return tostring(media_type or ""):lower():match("^image/") ~= nil
end

local function data_url(part)
  return ("data:%s;base64,%s"):format(tostring(part.mediaType), tostring(part.data or ""))
end

-- A user message's content: a string, or a list of text and image_url parts.
local function user_content(json, content)
  if type(content) ~= "table" then return content == nil and "" or tostring(content) end
  local parts = {}
  for _, part in ipairs(content) do
    if part.type == "text" then
      parts[#parts + 1] = { type = "text", text = tostring(part.text or "") }
    elseif part.type == "file" and is_image(part.mediaType) then
      parts[#parts + 1] = { type = "image_url", image_url = { url = data_url(part) } }
    elseif part.type == "file" then
      parts[#parts + 1] = { type = "text", text = providers.file_as_text(part) }
    end
  end
  return json.array(parts)
end

-- A tool message's text, and its image parts (Chat Completions takes images only in user
-- messages: they follow the run of tool messages in one user message).
local function tool_content(content, images, m)
  if type(content) ~= "table" then return content == nil and "" or tostring(content) end
  local texts = {}
  for _, part in ipairs(content) do
    if part.type == "text" then
      texts[#texts + 1] = tostring(part.text or "")
    elseif part.type == "file" and is_image(part.mediaType) then
      texts[#texts + 1] = ("[image %s: attached in the next message]"):format(tostring(part.mediaType))
      images[#images + 1] = { type = "text", text = ("[image from tool %s (%s)]"):format(
        tostring(m.name or "?"), tostring(m.toolCallId or "?")) }
      images[#images + 1] = { type = "image_url", image_url = { url = data_url(part) } }
    elseif part.type == "file" then
      texts[#texts + 1] = providers.file_as_text(part)
    end
  end
  return table.concat(texts, "\n")
end

--- The Chat Completions request body (a table) for a normalized request. nil, err when a
-- value cannot be sent (a tool input that is not JSON).
function M.build_body(req, opts)
  local json = providers.json()
  opts = opts or {}
  local messages = {}
  if req.system ~= nil and req.system ~= "" then
    messages[1] = { role = "system", content = tostring(req.system) }
  end
  local images = {}
  local function flush_images()
    if #images > 0 then
      messages[#messages + 1] = { role = "user", content = json.array(images) }
      images = {}
    end
  end
  for i, m in ipairs(req.messages or {}) do
    if m.role ~= "tool" then flush_images() end
    if m.role == "user" then
      messages[#messages + 1] = { role = "user", content = user_content(json, m.content) }
    elseif m.role == "system" then
      messages[#messages + 1] = { role = "system", content = providers.content_text(m.content) or "" }
    elseif m.role == "assistant" then
      local out = { role = "assistant", content = providers.content_text(m.content) }
      if out.content == nil or (out.content == "" and m.toolCalls and #m.toolCalls > 0) then
        out.content = json.null
      end
      if m.toolCalls and #m.toolCalls > 0 then
        local calls = {}
        for j, call in ipairs(m.toolCalls) do
          local args, err = json.encode(call.input == nil and {} or call.input)
          if not args then
            return nil, providers.fail("bad_request",
              ("openai: messages[%d].toolCalls[%d] (%s): input is not JSON: %s"):format(
                i, j, tostring(call.name), tostring(err)))
          end
          calls[j] = { id = call.id, type = "function",
                       ["function"] = { name = call.name, arguments = args } }
        end
        out.tool_calls = json.array(calls)
      end
      messages[#messages + 1] = out
    elseif m.role == "tool" then
      messages[#messages + 1] = { role = "tool", tool_call_id = m.toolCallId,
                                  content = tool_content(m.content, images, m) }
    else
      return nil, providers.fail("bad_request",
        ("openai: messages[%d] has role %s (expected user, assistant or tool)"):format(i, tostring(m.role)))
    end
  end
  flush_images()

  -- streamed: text deltas reach the session's stream as they come; usage comes in the last chunk
  local body = { model = req.model, messages = json.array(messages), stream = true,
                 stream_options = { include_usage = true } }
  if req.tools and #req.tools > 0 then
    local tools = {}
    for j, t in ipairs(req.tools) do
      tools[j] = { type = "function", ["function"] = {
        name = t.name, description = t.description,
        parameters = t.inputSchema or { type = "object", properties = {} } } }
    end
    body.tools = json.array(tools)
  end
  if req.outputSchema ~= nil then
    local schema = providers.object_schema(req.outputSchema)
    body.response_format = { type = "json_schema",
                             json_schema = { name = "output", schema = schema, strict = false } }
  end
  if req.maxTokens then
    -- OpenAI's own API refuses max_tokens for its newer models; compatible servers know max_tokens
    if opts.official then body.max_completion_tokens = req.maxTokens
    else body.max_tokens = req.maxTokens end
  end
  return body
end

local function bad(base, what, body)
  return providers.bad_response("openai", base, "a Chat Completions response", what, body)
end

--- Parse a decoded Chat Completions response into moor's answer. raw is the body text.
function M.parse(v, raw, req, base)
  local json = providers.json()
  local choice = type(v.choices) == "table" and v.choices[1]
  if type(choice) ~= "table" or type(choice.message) ~= "table" then
    if type(v.error) == "table" and type(v.error.message) == "string" then
      return nil, providers.fail("server_error", "openai: the server answered 200 with an error: "
        .. providers.excerpt(v.error.message, 500), { status = 200, retryable = true })
    end
    return bad(base, "its reply has no choices[1].message", raw)
  end
  local msg = choice.message
  local content = msg.content
  if content == json.null then content = nil end
  if type(content) == "table" then content = providers.content_text(content) end
  if content ~= nil and type(content) ~= "string" then
    return bad(base, "choices[1].message.content is neither text nor null", raw)
  end
  if content == "" then content = nil end

  local calls
  if type(msg.tool_calls) == "table" and #msg.tool_calls > 0 then
    calls = {}
    for i, c in ipairs(msg.tool_calls) do
      local fn = type(c) == "table" and c["function"]
      if type(fn) ~= "table" or type(fn.name) ~= "string" then
        return bad(base, ("tool_calls[%d] has no function name"):format(i), raw)
      end
      local input = fn.arguments
      if input == nil or input == json.null or input == "" then
        input = {}
      elseif type(input) == "string" then
        local decoded, derr = json.decode(input)
        if type(decoded) ~= "table" then
          return nil, providers.fail("bad_response", ("openai: the model called tool '%s' with arguments that"
            .. " are not a JSON object (%s): %s"):format(fn.name, derr or "not an object", providers.excerpt(input)))
        end
        input = decoded
      elseif type(input) ~= "table" then
        return nil, providers.fail("bad_response", ("openai: the model called tool '%s' with arguments that"
          .. " are not a JSON object"):format(fn.name))
      end
      local id = c.id
      if type(id) ~= "string" or id == "" then id = ("call_%d"):format(i) end
      calls[i] = { id = id, name = fn.name, input = input }
    end
  end

  -- a wrapped (non-object) output schema: unwrap { "value": ... }
  if content and req.outputSchema ~= nil and not calls then
    local _, wrapped = providers.object_schema(req.outputSchema)
    if wrapped then
      local d = json.decode(content)
      if type(d) == "table" and d.value ~= nil then
        content = json.encode(d.value) or content
      end
    end
  end

  local usage = type(v.usage) == "table" and v.usage or {}
  local finish = choice.finish_reason
  if finish == json.null or type(finish) ~= "string" then finish = calls and "tool_calls" or "stop" end
  return providers.answer(v, req, content, calls, math.tointeger(usage.prompt_tokens) or 0,
    math.tointeger(usage.completion_tokens) or 0, finish)
end

--- A reader of a streamed Chat Completions reply (chunks of choices[1].delta, then usage,
-- then `data: [DONE]`); its result is the reply as one unstreamed response, for M.parse:
-- the text joined, each tool call's arguments joined from their pieces (by index).
function M.stream_decoder(on_text)
  local json = providers.json()
  local st = { text = {}, calls = {}, ncalls = 0 }
  local function on_event(d, _, data)
    if st.done then return nil end
    if data == "[DONE]" then st.done = true return nil end
    local v = json.decode(data)
    if type(v) ~= "table" then
      return "has an event whose data is not a JSON object: " .. providers.excerpt(data, 200)
    end
    if v.error ~= nil and v.error ~= json.null then st.error = v return nil end
    if type(v.model) == "string" then st.model = v.model end
    if type(v.usage) == "table" then st.usage = v.usage end
    local c = type(v.choices) == "table" and v.choices[1]
    if type(c) ~= "table" then return nil end
    if type(c.finish_reason) == "string" then st.finish = c.finish_reason end
    local delta = type(c.delta) == "table" and c.delta or (type(c.message) == "table" and c.message) or {}
    if type(delta.content) == "string" and delta.content ~= "" then
      st.text[#st.text + 1] = delta.content
      d:text(delta.content)
    end
    if type(delta.tool_calls) == "table" then
      for _, tc in ipairs(delta.tool_calls) do
        if type(tc) ~= "table" then return "has a tool_calls delta that is not an object" end
        local i = math.tointeger(tc.index)
        -- by index (0-based); a server that sends none: an id starts the next call
        if i then i = i + 1
        elseif type(tc.id) == "string" or st.ncalls == 0 then i = st.ncalls + 1
        else i = st.ncalls end
        if i < 1 or i > 128 then return ("has a tool call index %s out of range"):format(tostring(tc.index)) end
        local slot = st.calls[i]
        if not slot then
          slot = { args = {} }
          st.calls[i] = slot
          if i > st.ncalls then st.ncalls = i end
        end
        if type(tc.id) == "string" and tc.id ~= "" then slot.id = tc.id end
        local fn = type(tc["function"]) == "table" and tc["function"] or {}
        if type(fn.name) == "string" then slot.name = (slot.name or "") .. fn.name end
        if type(fn.arguments) == "string" then slot.args[#slot.args + 1] = fn.arguments end
      end
    end
    return nil
  end
  local function result()
    if st.error then return st.error end
    if not st.done then return nil, "ended before its end (no `data: [DONE]`: the stream was cut short)" end
    local msg = { role = "assistant", content = #st.text > 0 and table.concat(st.text) or json.null }
    if st.ncalls > 0 then
      local calls = {}
      for i = 1, st.ncalls do
        local slot = st.calls[i] or { args = {} }
        calls[#calls + 1] = { id = slot.id, type = "function",
                              ["function"] = { name = slot.name, arguments = table.concat(slot.args) } }
      end
      msg.tool_calls = calls
    end
    return { model = st.model, choices = { { index = 0, message = msg, finish_reason = st.finish or json.null } },
             usage = st.usage }
  end
  return providers.stream_decoder(on_text, on_event, result)
end

--- A provider for model (the part after "openai/"); env(name) reads the environment.
function M.new(model, env)
  local base, key = providers.endpoint(env, "OPENAI_BASE_URL", "OPENAI_API_KEY", DEFAULT_BASE)
  local official = base:match("^https?://api%.openai%.com[:/]") ~= nil
    or base:match("^https?://api%.openai%.com$") ~= nil

  local p = { name = NAME, model = model, baseUrl = providers.display_url(base) }

  function p.complete(_, req, io)
    req = req or {}
    local r = setmetatable({ model = req.model or model }, { __index = req })
    local body, err = M.build_body(r, { official = official })
    if not body then return nil, err end
    local headers = { ["Content-Type"] = "application/json", ["Accept"] = "text/event-stream, application/json" }
    if key then headers["Authorization"] = "Bearer " .. key end
    return providers.exchange(io, {
      provider = NAME, url = base .. "/chat/completions", base_url = base, headers = headers,
      body = body, timeout = providers.timeout_ms(req.timeout), secret = key,
      key_env = "OPENAI_API_KEY", base_env = "OPENAI_BASE_URL", key_set = key ~= nil,
      expected = "a Chat Completions response with choices[1].message",
      stream = M.stream_decoder,
      parse = function(v, raw) return M.parse(v, raw, r, base) end,
    })
  end

  return p
end

return M
