-- A plain tool: runs once per call, no durable ops.
local moor = require "moor"
local s = moor.schema

return moor.defineTool {
  description = "Count the words, lines and characters of a text.",
  inputSchema = s.object { text = s.string { maxLength = 100000 } },
  outputSchema = s.object { words = s.integer(), lines = s.integer(), chars = s.integer() },
  execute = function(input)
    local words = 0
    for _ in input.text:gmatch("%S+") do words = words + 1 end
    local lines = select(2, input.text:gsub("\n", "")) + (input.text:match("[^\n]$") and 1 or 0)
    return { words = words, lines = lines, chars = utf8.len(input.text) or #input.text }
  end,
}
