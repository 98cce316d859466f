--- moor.providers.scripted: a model for tests. No I/O.
--
--   local p = scripted.new(function(turn) ... end)   -- or a list of replies, consumed in order
--   local answer, err = p:complete(req)
--
-- turn = { n = call number (1-based, counted per provider object), messages = req.messages,
--          tools = req.tools, system = req.system, outputSchema = req.outputSchema, model }.
-- A reply is
--   "text"                                       a final answer
--   { text = ?, toolCalls = { { name, input?, id? } }, usage = { inputTokens, outputTokens }?,
--     finishReason = ? }                         tool calls (ids default to "call_<n>_<i>")
--   { data = value }                             a final answer of value as JSON text (structured output)
--   { error = { code, message, retryable? } }    a failure, returned as nil, err
-- and the answer has the real providers' shape. A reply that is none of these, a list that runs
-- out, or a script function that raises is a failure too (codes bad_response, script_exhausted,
-- script_error), so a test sees it as a failed model call.
local json = require "moor.json"

local M = {}

local function fail(code, message, fields)
  local e = { code = code, message = message, retryable = false }
  for k, v in pairs(fields or {}) do e[k] = v end
  return e
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

--- Turn a reply into an answer (or nil, err) for call n.
function M.answer(reply, n)
  local where = ("scripted model, call %d"):format(n)
  if type(reply) == "string" then
    return { message = { role = "assistant", content = reply },
             usage = { inputTokens = 0, outputTokens = 0 }, finishReason = "stop", model = "scripted" }
  end
  if type(reply) ~= "table" then
    return nil, fail("bad_response", ("%s: a reply is a string, { text?, toolCalls? }, { data } or { error },"
      .. " not %s"):format(where, reply == nil and "nothing" or type(reply)))
  end
  if reply.error ~= nil then
    local e = reply.error
    if type(e) ~= "table" then e = { message = tostring(e) } end
    return nil, fail(type(e.code) == "string" and e.code or "scripted_error",
      type(e.message) == "string" and e.message or tostring(e.message or "scripted error"),
      { status = e.status, retryable = e.retryable == true, retryAfter = e.retryAfter })
  end

  local content = reply.text
  if content == nil then content = reply.content end
  if reply.data ~= nil then
    local text, err = json.encode(reply.data)
    if not text then return nil, fail("bad_response", ("%s: data is not JSON: %s"):format(where, tostring(err))) end
    content = text
  end
  if content ~= nil and type(content) ~= "string" then
    return nil, fail("bad_response", ("%s: text must be a string, not %s"):format(where, type(content)))
  end

  local calls
  if reply.toolCalls ~= nil then
    if type(reply.toolCalls) ~= "table" or #reply.toolCalls ~= count(reply.toolCalls) then
      return nil, fail("bad_response", ("%s: toolCalls must be a list of { name, input?, id? }"):format(where))
    end
    if #reply.toolCalls > 0 then
      calls = {}
      for i, c in ipairs(reply.toolCalls) do
        if type(c) ~= "table" or type(c.name) ~= "string" or c.name == "" then
          return nil, fail("bad_response", ("%s: toolCalls[%d] needs a name"):format(where, i))
        end
        if c.input ~= nil and type(c.input) ~= "table" then
          return nil, fail("bad_response", ("%s: toolCalls[%d] (%s): input must be a table"):format(where, i, c.name))
        end
        calls[i] = { id = c.id ~= nil and tostring(c.id) or ("call_%d_%d"):format(n, i),
                     name = c.name, input = c.input or {} }
      end
    end
  end
  if content == nil and calls == nil and reply.data == nil then
    return nil, fail("bad_response", ("%s: the reply has neither text nor toolCalls"):format(where))
  end

  local usage = type(reply.usage) == "table" and reply.usage or {}
  return {
    message = { role = "assistant", content = content, toolCalls = calls },
    usage = { inputTokens = math.tointeger(usage.inputTokens) or 0,
              outputTokens = math.tointeger(usage.outputTokens) or 0 },
    finishReason = type(reply.finishReason) == "string" and reply.finishReason or (calls and "tool_calls" or "stop"),
    model = type(reply.model) == "string" and reply.model or "scripted",
  }
end

--- A scripted provider: script is function(turn) -> reply, or a list of replies.
function M.new(script)
  if type(script) ~= "function" and type(script) ~= "table" then
    error("scripted.new: pass a function(turn) -> reply or a list of replies", 2)
  end
  local p = { name = "scripted", model = "scripted", calls = 0 }

  function p.complete(self, req)
    req = req or {}
    self.calls = self.calls + 1
    local n = self.calls
    local reply
    if type(script) == "function" then
      local turn = { n = n, messages = req.messages or {}, tools = req.tools or {}, system = req.system,
                     outputSchema = req.outputSchema, model = req.model }
      local ok, r = xpcall(script, debug.traceback, turn)
      if not ok then
        local first = tostring(r):match("^[^\n]*")
        return nil, fail("script_error", ("scripted model, call %d: the script raised: %s"):format(n, first),
          { traceback = tostring(r) })
      end
      reply = r
    else
      if n > #script then
        return nil, fail("script_exhausted", ("scripted model, call %d: the script has only %d repl%s"):format(
          n, #script, #script == 1 and "y" or "ies"))
      end
      reply = script[n]
    end
    return M.answer(reply, n)
  end

  return p
end

return M
