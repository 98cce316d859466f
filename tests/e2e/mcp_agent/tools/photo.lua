-- MCP test tool: a result shown as an image part (toModelOutput).
local moor = require "moor"
local s = moor.schema

return moor.defineTool {
  description = "Take a tiny picture.",
  inputSchema = s.object {},
  execute = function() return { png = "iVBORw0KGgo=" } end,
  toModelOutput = function(out)
    return moor.toolOutput.content { moor.toolOutputPart.text("a picture:"),
      moor.toolOutputPart.file(out.png, { mediaType = "image/png" }) }
  end,
}
