-- Test tool: parks on a webhook inside pcall. When cancelled it runs a
-- cleanup step, then a slow step (so a test can kill the host inside the
-- grace period), then re-raises the Cancelled error.
local moor = require "moor"
local s = moor.schema

local function witness(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:close()
end

local cleanup = moor.step("cleanup", function(path)
  witness(path, "cleanup")
  return true
end)

local slow = moor.step("slow", function(path, hold)
  witness(path, "slow:start")
  os.execute("sleep " .. hold)
  witness(path, "slow")
  return true
end)

return moor.defineWorkflowTool {
  description = "Test tool: park on a webhook; on cancel, clean up in two steps.",
  inputSchema = s.object {
    witness = s.string { minLength = 1 },
    hold = s.optional(s.integer { minimum = 0 }),
  },
  execute = function(input, ctx)
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    local ok, err = pcall(wh.await, wh)
    if not ok then
      if moor.Cancelled.is(err) then
        cleanup(input.witness)
        slow(input.witness, input.hold or 3)
        error(err, 0)
      end
      error(err, 0)
    end
    return { delivered = err:json(), aborted = ctx.abortSignal.aborted }
  end,
}
