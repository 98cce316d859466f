-- The triage example (agent/tools/triage.lua): three tools, the third taught
-- as JSON on standard input; the turn's answer is typed.
local moor = require "moor"
local t = moor.testing

local BACKLOG = { items = { { id = "b1", title = "Login page is slow" }, { id = "b2", title = "Cron job fails" } } }

describe("triage", function()
  it("teaches list_items by name, set_priority as flags, label_item as JSON; keeps what the agent set", function()
    local prompt, seen = nil, {}
    local run = t.workflow("triage", BACKLOG, {
      agents = {
        triager = t.answer(function(turn)
          prompt = turn.prompt .. "\n"
          seen.list = turn.tool("list_items")
          seen.p = turn.tool("set_priority", { id = "b2", priority = "p1" })
          seen.bad = turn.tool("set_priority", { id = "b1", priority = "urgent" })
          seen.label = turn.tool("label_item", { id = "b2", labels = { "ops", "cron" } })
          seen.missing = turn.tool("label_item", { id = "b9", labels = {} })
          seen.unknown = turn.tool("close_item", { id = "b1" })
          return { summary = "b2 first: the cron job is broken." }
        end),
      },
    })
    assert.is_nil(run.error)
    local launcher = prompt:match("\n(/%S+/wfa) tool <name> %-%-<option> '<value>' %.%.%.\n")
    assert.is_string(launcher, prompt)
    assert.is_truthy(prompt:find("  " .. launcher .. " tool list_items\n", 1, true), prompt)
    assert.is_truthy(prompt:find("  " .. launcher .. " tool set_priority --id <text, at least 1 character> "
      .. "--priority <one of p1, p2, p3>\n", 1, true), prompt)
    assert.is_truthy(prompt:find("\n" .. launcher .. " tool label_item <<'WF_JSON'\n<the input as JSON>\nWF_JSON",
      1, true), prompt)
    assert.is_truthy(prompt:find(launcher .. " result '<your answer>'", 1, true), prompt)
    assert.are.same({ kind = "result", output = "b1  -  Login page is slow\nb2  -  Cron job fails" }, seen.list)
    assert.are.same({ kind = "result", output = "b2 is p1." }, seen.p)
    assert.are.equal("invalid-input", seen.bad.code)
    assert.is_truthy(seen.bad.error:find("priority", 1, true), seen.bad.error)
    assert.are.same({ kind = "result", output = { id = "b2", labels = { "ops", "cron" } } }, seen.label)
    assert.are.same({ kind = "failed", outcome = "failed", error = "there is no item b9; list_items shows the ids" },
      seen.missing)
    assert.are.equal("unknown-tool", seen.unknown.code)
    assert.are.equal("answered", run.value.ended)
    assert.are.equal("b2 first: the cron job is broken.", run.value.summary)
    assert.are.same({ "ops", "cron" }, run.value.items[2].labels)
    assert.are.equal("p1", run.value.items[2].priority)
  end)

  it("an answer that doesn't fit the turn's schema fails the turn; the priorities set are kept", function()
    local run = t.workflow("triage", BACKLOG, {
      agents = {
        triager = t.answer(function(turn)
          turn.tool("set_priority", { id = "b1", priority = "p3" })
          return { summary = "" }
        end),
      },
    })
    assert.are.equal("failed", run.value.ended)
    assert.are.equal("p3", run.value.items[1].priority)
  end)

  it("a turn that times out keeps what the agent set", function()
    local run = t.workflow("triage", BACKLOG, { agents = { triager = t.reply.timedOut() } })
    assert.are.equal("timed-out", run.value.ended)
  end)
end)
