-- Test tool: a step that leaves a long-lived child process behind (its pid
-- written to `pidfile`), then a wait on a hook so the run stays open.
local moor = require "moor"
local s = moor.schema

local spawn = moor.step("spawn", function(pidfile, seconds)
  os.execute(("sleep %d </dev/null >/dev/null 2>&1 & echo $! > %q"):format(seconds, pidfile))
  return true
end)

return moor.defineWorkflowTool {
  description = "Test tool: spawn a background child from a step, then wait on a hook.",
  inputSchema = s.object { pidfile = s.string { minLength = 1 }, seconds = s.integer { minimum = 1, maximum = 120 } },
  execute = function(input)
    spawn(input.pidfile, input.seconds)
    local hook = moor.createHook { token = "spawn-child-" .. input.pidfile:gsub("%W", "") }
    return { got = hook:await() }
  end,
}
