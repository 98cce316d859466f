-- Test tool: a plain tool whose result is a large "screenshot" (base64 of
-- `bytes` bytes), shown to the model as a file content part (issue 7, item 18).
local moor = require "moor"
local s = moor.schema

return moor.defineTool {
  description = "Test tool: take a large screenshot.",
  inputSchema = s.object { bytes = s.integer { minimum = 4 } },
  execute = function(input)
    return { base64 = string.rep("QUJD", input.bytes // 4) }
  end,
  toModelOutput = function(out)
    return moor.toolOutput.content { moor.toolOutputPart.file(out.base64, { mediaType = "image/png" }) }
  end,
}
