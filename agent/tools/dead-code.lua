-- Seed 001's `dead-code` workflow: a coding agent in its own harness (Codex)
-- records each finding through a tool while it works. The handlers run here,
-- in the workflow's process; each call is recorded in the run's log, so the
-- findings survive a restart, and they are kept however the turn ended.
-- Tested by tests/agent/dead_code_spec.lua with a scripted agent.
local moor = require "moor"
local s = moor.schema

local Finding = s.object {
  file = s.string { minLength = 1 },
  line = s.integer { minimum = 1 },
  problem = s.string { minLength = 1 },
}

return moor.defineWorkflowTool {
  description = "An agent records each finding through a tool.",
  inputSchema = s.object {},
  execute = function()
    local findings = {}
    local reviewer = moor.harness.open {
      key = "reviewer",
      runtime = "codex",
      tools = {
        add_finding = moor.harness.tool {
          description = "Record one finding as soon as you are sure of it.",
          input = Finding,
          handler = function(finding)
            for _, f in ipairs(findings) do
              if f.file == finding.file and f.line == finding.line then
                error(("%s:%d is already recorded"):format(finding.file, finding.line))
              end
            end
            findings[#findings + 1] = finding
            return ("Recorded; %d so far."):format(#findings)
          end,
        },
        list_findings = moor.harness.tool {
          description = "The findings recorded so far, one per line.",
          handler = function()
            local lines = {}
            for i, f in ipairs(findings) do lines[i] = ("%s:%d  %s"):format(f.file, f.line, f.problem) end
            return #lines > 0 and table.concat(lines, "\n") or "None yet."
          end,
        },
      },
    }
    local r = reviewer:run {
      prompt = "Find dead code in src/. Record each finding with add_finding as you go.",
      timeout = "20m",
    }
    -- What the agent recorded is kept, however its turn ended.
    return {
      findings = moor.json.array(findings),
      ended = r.outcome.answered and "answered" or r.outcome.reason,
    }
  end,
}
