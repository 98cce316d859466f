-- A multi-step workflow tool. Each step does real work (runs find and wc,
-- writes a file); the body only sequences them, so a crash at any point
-- resumes without repeating a finished step.
local moor = require "moor"
local files = require "lib.files"
local s = moor.schema

local inventory = moor.step("inventory", function(dir)
  return files.line_counts(dir)
end)

local summarize = moor.step("summarize", function(project, version, counts)
  local total = 0
  local lines = { ("# %s %s"):format(project, version), "", "Tools in this release:", "" }
  for _, f in ipairs(counts) do
    total = total + f.lines
    lines[#lines + 1] = ("- %s (%d lines)"):format(f.path, f.lines)
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = ("%d files, %d lines of Lua."):format(#counts, total)
  return { text = table.concat(lines, "\n") .. "\n", files = #counts, lines = total }
end)

local publish = moor.step("publish", function(path, text)
  return files.write(path, text)
end)

return moor.defineWorkflowTool {
  description = "Draft release notes for a project version from the agent's tool files and write them to a file.",
  inputSchema = s.object {
    project = s.string { minLength = 1, maxLength = 64, pattern = "^[A-Za-z0-9_.-]+$" },
    version = s.string { minLength = 1, pattern = "^[0-9]+\\.[0-9]+\\.[0-9]+$" },
    dir = s.optional(s.string { description = "directory to inventory (default: agent/tools)" }),
    wait = s.optional(s.string { description = "pause before publishing, as \"2s\" (default 1s)" }),
  },
  execute = function(input, ctx)
    coroutine.yield { phase = "inventory" }
    local counts = inventory(input.dir or "agent/tools")
    coroutine.yield { phase = "summarize", files = #counts }
    local summary = summarize(input.project, input.version, counts)
    coroutine.yield { phase = "waiting", wait = input.wait or "1s" }
    moor.sleep(input.wait or "1s") -- durable: a restart resumes the wait, not the steps
    local path = publish((".moor/out/%s-%s.md"):format(input.project, input.version), summary.text)
    return { path = path, files = summary.files, lines = summary.lines, callId = ctx.callId }
  end,
}
