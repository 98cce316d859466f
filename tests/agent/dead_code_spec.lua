-- Seed 001's two tests of the `dead-code` workflow (agent/tools/dead-code.lua),
-- ported to busted: the harness agent is a script whose turn.tool goes
-- through the same checks and handler a real launcher call does.
local moor = require "moor"
local t = moor.testing

describe("dead-code", function()
  it("each finding the agent records reaches the workflow, and it can read them back", function()
    local seen = {}
    local run = t.workflow("dead-code", {}, {
      agents = {
        reviewer = t.answer(function(turn)
          seen[1] = turn.tool("add_finding", { file = "src/a.ts", line = 12, problem = "unused export" })
          seen[2] = turn.tool("list_findings")
          return "One finding."
        end),
      },
    })
    assert.are.same({ kind = "result", output = "Recorded; 1 so far." }, seen[1])
    assert.are.same({ kind = "result", output = "src/a.ts:12  unused export" }, seen[2])
    assert.is_nil(run.error)
    assert.are.same({
      findings = { { file = "src/a.ts", line = 12, problem = "unused export" } },
      ended = "answered",
    }, run.value)
  end)

  it("input that doesn't fit is refused before the handler runs; a throw fails only the call", function()
    local seen = {}
    local run = t.workflow("dead-code", {}, {
      agents = {
        reviewer = t.answer(function(turn)
          seen[#seen + 1] = turn.tool("add_finding", { file = "src/a.ts", line = 0, problem = "x" })
          turn.tool("add_finding", { file = "src/a.ts", line = 3, problem = "unused" })
          seen[#seen + 1] = turn.tool("add_finding", { file = "src/a.ts", line = 3, problem = "again" })
          return "Done."
        end),
      },
    })
    assert.are.equal(2, #seen)
    assert.are.equal("refused", seen[1].kind)
    assert.are.equal("invalid-input", seen[1].code)
    assert.is_truthy(seen[1].error:find("line", 1, true), seen[1].error)
    assert.are.same({ kind = "failed", outcome = "failed", error = "src/a.ts:3 is already recorded" }, seen[2])
    assert.are.equal(1, #run.value.findings)
    assert.are.equal("answered", run.value.ended)
  end)
end)
