-- Test tool: cleanup in a to-be-closed variable (issue 7, item 15). Its
-- __close runs a cleanup step, then a slow step (so a test can kill the host
-- inside it), when the body raises (mode "raise") or is cancelled while
-- parked on a webhook (mode "park").
local moor = require "moor"
local s = moor.schema

local function witness(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:close()
end

local work = moor.step("work", function(path) witness(path, "work"); return true end)
local cleanup = moor.step("cleanup", function(path) witness(path, "cleanup"); return true end)
local slow = moor.step("slow", function(path, hold)
  witness(path, "slow:start")
  os.execute("sleep " .. hold)
  witness(path, "slow")
  return true
end)

return moor.defineWorkflowTool {
  description = "Test tool: a to-be-closed guard whose __close runs two steps.",
  inputSchema = s.object {
    witness = s.string { minLength = 1 },
    mode = s.enum { "raise", "park" },
    hold = s.optional(s.integer { minimum = 0 }),
  },
  execute = function(input)
    local _guard <close> = setmetatable({}, { __close = function() -- luacheck: ignore
      cleanup(input.witness)
      slow(input.witness, input.hold or 2)
    end })
    if input.mode == "raise" then
      work(input.witness)
      error(moor.FatalError("the body failed after its work"))
    end
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    wh:await()
    return "delivered"
  end,
}
