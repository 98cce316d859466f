--- The authoring API's definitions of what a tool gives (part of
-- `require "moor"`): approval policies (moor.approval) and the toModelOutput
-- builders (moor.toolOutput, moor.toolOutputPart). Plain data, no engine.
local json = require "moor.json"

local M = {}

--- approval = moor.approval.always() | once() | never() | function(call) -> boolean,
-- where call = { toolName, toolInput, callId, sessionId }. A gated call asks a
-- person (approve / deny) before it runs; once() remembers an approval for
-- the session.
M.approval = {
  always = function() return { kind = "approval", mode = "always" } end,
  once = function() return { kind = "approval", mode = "once" } end,
  never = function() return { kind = "approval", mode = "never" } end,
}

--- toModelOutput builders: { type = "text", value }, { type = "json", value },
-- { type = "content", value = parts }.
M.toolOutput = {
  text = function(v) return { type = "text", value = tostring(v) } end,
  json = function(v) return { type = "json", value = v } end,
  content = function(parts)
    if type(parts) ~= "table" then error("toolOutput.content takes a list of parts", 2) end
    return { type = "content", value = json.array(parts) }
  end,
}

M.toolOutputPart = {
  text = function(text) return { type = "text", text = tostring(text) } end,
  --- file(base64, { mediaType }): raw bytes are refused; they do not survive
  -- the durable JSON boundary.
  file = function(data, opts)
    if type(data) ~= "string" or data:find("[^A-Za-z0-9+/=\r\n]") then
      error("toolOutputPart.file: data must be a base64 string; raw bytes are refused (encode them first)", 2)
    end
    if type(opts) ~= "table" or type(opts.mediaType) ~= "string" then
      error("toolOutputPart.file: pass { mediaType = \"image/png\" }", 2)
    end
    return { type = "file", data = data, mediaType = opts.mediaType }
  end,
}

return M
