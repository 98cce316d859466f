-- The CLI's views (issue 14 item 7, lua/moor/cli.lua): what a run waits on as
-- `moor call` shows it ("approval req_... (tool T)", "sleep until 18:30
-- (4h)"), and `moor inputs` with each question's kind.
local moor = require "moor"
local cli = require "moor.cli"
local json = require "moor.json"
local t = moor.testing
local s = moor.schema
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")

support.register("cli_pay", moor.defineTool {
  description = "Pay an amount (gated).",
  inputSchema = s.object { amount = s.integer() },
  approval = moor.approval.always(),
  execute = function(input) return { paid = input.amount } end,
})

describe("moor.cli", function()
  it("says a run waits on an approval, naming its request and tool, and lists it as one", function()
    local x = support.calling { { name = "cli_pay", input = { amount = 5 } } }
    x.toolset = { cli_pay = "cli_pay" }
    support.with_agents(support.calling {}, { x = x }, function()
      local id = t.start(moor.defineWorkflowTool {
        description = "relays", inputSchema = s.object {},
        execute = function(_, ctx) return ctx.agent("x"):send("pay 5"):result() end,
      }, {})
      t.drive(id, 500)
      local q = t.inputs(id)
      assert.are.equal(1, #q)
      local waiting = cli.run_waiting(id)
      -- (the question first; then what else the run holds open: its handle's hook, the session)
      assert.are.equal(("approval %s (tool cli_pay)"):format(q[1].requestId), waiting:match("^[^\n]*"))
      assert.truthy(waiting:find("\nchild run run_%w+ %(moor__session%)"), waiting)
      local listed = json.decode(cli.list_inputs(true))
      local mine
      for _, i in ipairs(listed) do if i.requestId == q[1].requestId then mine = i end end
      assert.is_table(mine)
      assert.are.equal("approval", mine.kind)
      local text = cli.list_inputs(false)
      assert.truthy(text:find(q[1].requestId .. "%s+run_%w+%s+moor__session%s+approval"))
      t.cancel(id)
    end)
  end)

  it("says a run waits on a sleep, until when and for how long", function()
    local id = t.start(moor.defineWorkflowTool {
      description = "naps", inputSchema = s.object {},
      execute = function() moor.sleep("4h"); return {} end,
    }, {})
    t.drive(id, 100)
    local waiting = cli.run_waiting(id)
    assert.truthy(waiting and waiting:match("^sleep until %d%d:%d%d %(4h%)$"), waiting)
    local rows = json.decode(cli.list_runs(true, "waiting", nil, nil))
    local found = false
    for _, r in ipairs(rows) do found = found or r.id == id end
    assert.is_true(found)
    t.cancel(id)
  end)

  it("refuses a status moor has not got", function()
    local out, err = cli.list_runs(false, "asleep")
    assert.is_nil(out)
    assert.are.equal("bad_request", err.code)
  end)
end)
