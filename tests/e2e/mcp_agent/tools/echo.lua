-- MCP test tool: a plain tool with an output schema and annotations; it
-- prints to stdout (print and io.write), which must not reach the protocol.
local moor = require "moor"
local s = moor.schema

return moor.defineTool {
  description = "Echo a message back, shouted.",
  inputSchema = s.object { message = s.string { minLength = 1 }, times = s.optional(s.integer { minimum = 1 }) },
  outputSchema = s.object { shout = s.string(), times = s.integer() },
  readOnlyHint = true,
  idempotentHint = true,
  openWorldHint = false,
  execute = function(input)
    print("stray print from a tool")
    io.write("stray io.write from a tool\n")
    io.stdout:write("{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{}}\n")
    io.stdout:flush()
    return { shout = input.message:upper(), times = input.times or 1 }
  end,
}
