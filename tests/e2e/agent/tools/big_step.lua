-- Test tool: a step that returns `bytes` bytes (witnessed in a file), then a
-- park on a webhook, so a test can kill the host with a large value in the log
-- and see the replay read it back (issue 7, item 18).
local moor = require "moor"
local s = moor.schema

local big = moor.step("big", function(path, bytes)
  local f = assert(io.open(path, "a"))
  f:write("big\n")
  f:close()
  return string.rep("z", bytes)
end)

return moor.defineWorkflowTool {
  description = "Test tool: a large step result, then wait for a webhook.",
  inputSchema = s.object { witness = s.string { minLength = 1 }, bytes = s.integer { minimum = 1 } },
  execute = function(input)
    local v = big(input.witness, input.bytes)
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    wh:await()
    return { n = #v, tail = v:sub(-3) }
  end,
}
