-- An agent in its own harness triages a backlog through three tools (seed 001's
-- examples/tools): list_items takes no input, set_priority takes flags, and
-- label_item, whose input holds a list, is taught as JSON on standard input.
-- The turn's answer is typed (a summary). Tested by tests/agent/triage_spec.lua.
local moor = require "moor"
local s = moor.schema

local Item = s.object { id = s.string { minLength = 1 }, title = s.string { minLength = 1 } }

return moor.defineWorkflowTool {
  description = "Triage a backlog: an agent sets each item's priority and labels.",
  inputSchema = s.object { items = s.array(Item, { minItems = 1 }) },
  execute = function(input)
    local items, by_id = {}, {}
    for i, it in ipairs(input.items) do
      items[i] = { id = it.id, title = it.title, labels = moor.json.array {} }
      by_id[it.id] = items[i]
    end
    local function item(id)
      local it = by_id[id]
      if not it then error(("there is no item %s; list_items shows the ids"):format(id)) end
      return it
    end
    local triager = moor.harness.open {
      key = "triager",
      runtime = "claude",
      tools = {
        list_items = moor.harness.tool {
          description = "The backlog, one item per line: id, priority (or -), title.",
          handler = function()
            local lines = {}
            for i, it in ipairs(items) do lines[i] = ("%s  %s  %s"):format(it.id, it.priority or "-", it.title) end
            return table.concat(lines, "\n")
          end,
        },
        set_priority = moor.harness.tool {
          description = "Set one item's priority: p1 for this week, p2 for this month, p3 for later.",
          input = s.object { id = s.string { minLength = 1 }, priority = s.enum { "p1", "p2", "p3" } },
          handler = function(x)
            item(x.id).priority = x.priority
            return ("%s is %s."):format(x.id, x.priority)
          end,
        },
        label_item = moor.harness.tool {
          description = "Give one item its labels (replacing any it had).",
          input = s.object { id = s.string { minLength = 1 },
            labels = s.array(s.string { minLength = 1 }, { maxItems = 8 }) },
          handler = function(x)
            item(x.id).labels = moor.json.array(x.labels)
            return { id = x.id, labels = moor.json.array(x.labels) }
          end,
        },
      },
    }
    local r = triager:run {
      prompt = "Triage the backlog: give every item a priority and its labels, then answer with a summary.",
      schema = s.object { summary = s.string { minLength = 1 } },
      timeout = "15m",
    }
    return {
      items = items,
      summary = r.outcome.answered and r.outcome.value.summary or nil,
      ended = r.outcome.answered and "answered" or r.outcome.reason,
    }
  end,
}
