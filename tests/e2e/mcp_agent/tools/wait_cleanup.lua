-- MCP test tool: park on a webhook; a cancel runs a cleanup step (witnessed
-- in a file) once.
local moor = require "moor"
local s = moor.schema

local cleanup = moor.step("cleanup", function(path)
  local f = assert(io.open(path, "a"))
  f:write("cleanup\n")
  f:close()
  return true
end)

return moor.defineWorkflowTool {
  description = "Wait for a webhook; clean up when cancelled.",
  inputSchema = s.object { witness = s.string { minLength = 1 } },
  execute = function(input)
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    local ok, err = pcall(wh.await, wh)
    if not ok and moor.Cancelled.is(err) then cleanup(input.witness) end
    if not ok then error(err, 0) end
    return { delivered = true }
  end,
}
