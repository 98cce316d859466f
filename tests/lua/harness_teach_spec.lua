-- Specs for moor.harness.teach (issue 11 item 3, seed 001 "What the agent
-- runs"): the block that ends every turn's prompt, word for word as the seed
-- shows it, small inputs taught and read as flags, other inputs taught as
-- JSON Schema on standard input, and what `wfa tool` prints with no
-- arguments (every code, exit status and limit). Runs inside the host
-- (`moor test`).
local T = require "moor.harness.teach"
local schema = require "moor.schema"

local S = schema

-- the seed's dead-code tools
local Finding = S.object {
  file = S.string { minLength = 1 },
  line = S.integer { minimum = 1 },
  problem = S.string { minLength = 1 },
}

local function dead_code_tools()
  return {
    { name = "add_finding", description = "Record one finding as soon as you are sure of it.", input = Finding },
    { name = "list_findings", description = "The findings recorded so far, one per line." },
  }
end

-- seed 001, "What the agent runs", copied as it stands ("/…/wfa" is the seed's
-- elided launcher path; its long line stays as the seed has it)
-- luacheck: push no max string line length
local SEED_BLOCK = [[
You have tools the workflow runs for you. Call one with:

/…/wfa tool <name> --<option> '<value>' ...

Put every value in single quotes; a ' inside a value is written '\''.

- add_finding: Record one finding as soon as you are sure of it.
  /…/wfa tool add_finding --file <text, at least 1 character> --line <integer, at least 1> --problem <text, at least 1 character>
- list_findings: The findings recorded so far, one per line.
  /…/wfa tool list_findings]]
-- luacheck: pop

-- the seed's label_item, whose input (a list) is taught as JSON
local Label = S.object {
  id = S.string { minLength = 1 },
  labels = S.array(S.string { minLength = 1 }),
}

local function refused(input, e)
  assert.is_nil(input)
  assert.are.equal("table", type(e))
  assert.are.equal("invalid-input", e.code)
  return e.message
end

describe("moor.harness.teach prompt_block", function()
  it("reads word for word as the seed's block for the dead-code tools", function()
    assert.are.equal(SEED_BLOCK, T.prompt_block("/…/wfa", dead_code_tools()))
  end)

  it("names the launcher by the absolute path it is given, in every line", function()
    local text = T.prompt_block("/tmp/moor-h/Xy7q/wfa", dead_code_tools())
    assert.are.equal((SEED_BLOCK:gsub("/…/wfa", "/tmp/moor-h/Xy7q/wfa")), text)
    assert.is_nil(text:find("/…/", 1, true))
  end)

  it("lists the tools sorted by name whatever the list's order, the same text every time", function()
    local tools = dead_code_tools()
    local reversed = { tools[2], tools[1] }
    local want = T.prompt_block("/…/wfa", tools)
    assert.are.equal(want, T.prompt_block("/…/wfa", reversed))
    -- the same schema built again (a new properties table, other insertion order)
    local again = S.object {
      problem = S.string { minLength = 1 }, line = S.integer { minimum = 1 }, file = S.string { minLength = 1 },
    }
    local rebuilt = { { name = "list_findings", description = tools[2].description },
      { name = "add_finding", description = tools[1].description, input = again } }
    for _ = 1, 20 do assert.are.equal(want, T.prompt_block("/…/wfa", rebuilt)) end
    -- and the caller's list is left as it was
    assert.are.equal("list_findings", reversed[1].name)
  end)

  it("teaches an input that isn't small as its JSON Schema, sent with the seed's heredoc", function()
    local tools = dead_code_tools()
    tools[3] = { name = "label_item", description = "Put labels on one backlog item.", input = Label }
    local want = table.concat({
      "You have tools the workflow runs for you. Call one with:",
      "",
      "/w/wfa tool <name> --<option> '<value>' ...",
      "",
      "Put every value in single quotes; a ' inside a value is written '\\''.",
      "",
      "- add_finding: Record one finding as soon as you are sure of it.",
      "  /w/wfa tool add_finding --file <text, at least 1 character> --line <integer, at least 1>"
        .. " --problem <text, at least 1 character>",
      "- label_item: Put labels on one backlog item.",
      "  Its input is JSON on standard input, with this JSON Schema:",
      '  {"properties":{"id":{"minLength":1,"type":"string"},"labels":{"items":{"minLength":1,"type":"string"},'
        .. '"type":"array"}},"required":["id","labels"],"type":"object"}',
      "/w/wfa tool label_item <<'WF_JSON'",
      "<the input as JSON>",
      "WF_JSON",
      "- list_findings: The findings recorded so far, one per line.",
      "  /w/wfa tool list_findings",
    }, "\n")
    assert.are.equal(want, T.prompt_block("/w/wfa", tools))
    -- the seed's call form, exactly
    assert.truthy(want:find("\n/w/wfa tool label_item <<'WF_JSON'\n", 1, true))
  end)

  it("calls a tool without input properties by its name alone", function()
    local text = T.prompt_block("/w/wfa", {
      { name = "ping", description = "Check the workflow answers." },
      { name = "pong", description = "Empty object.", input = S.object {} },
    })
    assert.truthy(text:find("\n- ping: Check the workflow answers.\n  /w/wfa tool ping\n", 1, true))
    assert.truthy(text:find("\n- pong: Empty object.\n  /w/wfa tool pong$"))
  end)

  it("marks optional flags in brackets and lists an enum's members", function()
    local s = S.object {
      severity = S.enum { "low", "medium", "high" },
      note = S.optional(S.string { maxLength = 200 }),
      score = S.optional(S.number { minimum = 0, maximum = 1 }),
      fixed = S.optional(S.boolean()),
      code = S.string { minLength = 2, maxLength = 2 },
    }
    assert.are.equal("--code <text, exactly 2 characters> [--fixed <true or false>] [--note <text, at most 200"
      .. " characters>] [--score <number, 0 to 1>] --severity <one of low, medium, high>", T.flag_usage(s))
    local text = T.prompt_block("/w/wfa", { { name = "rate", description = "Rate it.", input = s } })
    assert.truthy(text:find("\n  /w/wfa tool rate " .. T.flag_usage(s), 1, true))
  end)

  it("refuses a launcher path that isn't absolute", function()
    local text, e = T.prompt_block("wfa", dead_code_tools())
    assert.is_nil(text)
    assert.are.equal("invalid-launcher", e.code)
  end)

  it("keeps each description on its one line", function()
    local text = T.prompt_block("/w/wfa", { { name = "a", description = "First line.\n  Second line.\n" } })
    assert.truthy(text:find("\n- a: First line. Second line.\n  /w/wfa tool a$"))
  end)
end)

describe("moor.harness.teach is_small", function()
  it("is true for a flat object of strings, integers, numbers, booleans and enums", function()
    assert.is_true(T.is_small(Finding))
    assert.is_true(T.is_small(S.object { a = S.number(), b = S.boolean(), c = S.enum { "x", 1, true } }))
    assert.is_true(T.is_small(S.object({ a = S.string() }, { additionalProperties = false })))
  end)

  it("is false for lists, nested objects, open objects, unions and inputs without properties", function()
    assert.is_false(T.is_small(Label))
    assert.is_false(T.is_small(S.object { o = S.object { x = S.string() } }))
    assert.is_false(T.is_small(S.object({ a = S.string() }, { additionalProperties = S.string() })))
    assert.is_false(T.is_small({ type = "object", properties = { a = { type = { "string", "null" } } } }))
    assert.is_false(T.is_small({ type = "object", properties = { a = { anyOf = { { type = "string" } } } } }))
    assert.is_false(T.is_small({ type = "object", properties = { ["a b"] = { type = "string" } } }))
    assert.is_false(T.is_small(S.object {}))
    assert.is_false(T.is_small(nil))
    assert.is_false(T.is_small(S.string()))
  end)
end)

describe("moor.harness.teach parse_flags", function()
  it("reads the seed's call into typed input (the line an integer)", function()
    local input = assert(T.parse_flags(Finding,
      { "--file", "src/report.ts", "--line", "41", "--problem", "formatDate is never called" }))
    assert.are.same({ file = "src/report.ts", line = 41, problem = "formatDate is never called" }, input)
    assert.are.equal("integer", math.type(input.line))
    assert.is_true(schema.validate(Finding, input))
  end)

  it("takes --flag=value as well, in any order", function()
    local input = assert(T.parse_flags(Finding, { "--problem=a=b", "--line=7", "--file", "x" }))
    assert.are.same({ file = "x", line = 7, problem = "a=b" }, input)
  end)

  it("keeps a quote, spaces, newlines and a leading -- inside a value as they are", function()
    -- the shell has undone '\'' already: the launcher sees the quote itself
    local input = assert(T.parse_flags(Finding,
      { "--file", "it's.ts", "--line", "1", "--problem", "--not a flag\n'quoted' \"too\"" }))
    assert.are.equal("it's.ts", input.file)
    assert.are.equal("--not a flag\n'quoted' \"too\"", input.problem)
  end)

  it("reads numbers, booleans and enum members with their types", function()
    local s = S.object {
      level = S.enum { "low", "high", 3 },
      ratio = S.optional(S.number()),
      dry = S.optional(S.boolean()),
    }
    local a = assert(T.parse_flags(s, { "--level", "high", "--ratio", "0.25", "--dry", "false" }))
    assert.are.same({ level = "high", ratio = 0.25, dry = false }, a)
    local b = assert(T.parse_flags(s, { "--level", "3", "--ratio", "-2e3" }))
    assert.are.equal(3, b.level)
    assert.are.equal("integer", math.type(b.level))
    assert.are.equal(-2000.0, b.ratio)
    local c = assert(T.parse_flags(s, { "--level", "low", "--ratio", "5" }))
    assert.are.equal(5, c.ratio)
  end)

  it("gives {} for a tool without input", function()
    assert.are.same({}, assert(T.parse_flags(S.object {}, {})))
    assert.are.same({}, assert(T.parse_flags(nil, {})))
  end)

  it("refuses an unknown flag, naming the tool's options", function()
    assert.are.equal("unknown option --path; the options are --file, --line, --problem",
      refused(T.parse_flags(Finding, { "--path", "x", "--line", "1", "--problem", "p" })))
    assert.are.equal("unknown option --x; this tool takes no options",
      refused(T.parse_flags(S.object {}, { "--x", "1" })))
  end)

  it("refuses a flag without its value", function()
    assert.are.equal("--problem needs a value: --problem <text, at least 1 character>",
      refused(T.parse_flags(Finding, { "--file", "a", "--line", "1", "--problem" })))
  end)

  it("refuses a value that isn't an integer, a number, a boolean or a member", function()
    local function line(v)
      return refused(T.parse_flags(Finding, { "--file", "a", "--line", v, "--problem", "p" }))
    end
    assert.are.equal("--line must be an integer, got 'forty'", line("forty"))
    assert.are.equal("--line must be an integer, got '4.5'", line("4.5"))
    assert.are.equal("--line must be an integer, got '0x10'", line("0x10"))
    assert.are.equal("--line must be an integer, got ''", line(""))
    assert.are.equal("--line must be an integer, got '99999999999999999999'", line("99999999999999999999"))
    assert.are.equal("--line must be an integer, got 'it'\\''s'", line("it's"))
    local s = S.object { n = S.number(), b = S.boolean(), e = S.enum { "low", "high" } }
    assert.are.equal("--n must be a number, got 'inf'",
      refused(T.parse_flags(s, { "--n", "inf", "--b", "true", "--e", "low" })))
    assert.are.equal("--b must be true or false, got 'yes'",
      refused(T.parse_flags(s, { "--n", "1", "--b", "yes", "--e", "low" })))
    assert.are.equal("--e must be one of low, high, got 'medium'",
      refused(T.parse_flags(s, { "--n", "1", "--b", "true", "--e", "medium" })))
  end)

  it("refuses flags for a tool taught as JSON, pointing at the heredoc", function()
    assert.are.equal("this tool takes its input as JSON on standard input, not as options:"
      .. " send it with <<'WF_JSON', as the prompt shows",
      refused(T.parse_flags(Label, { "--id", "b2" })))
  end)

  it("refuses a repeated flag", function()
    assert.are.equal("--line is given more than once; give it once",
      refused(T.parse_flags(Finding, { "--file", "a", "--line", "1", "--line=2", "--problem", "p" })))
  end)

  it("refuses a value without its flag", function()
    assert.are.equal("expected an option such as --file, got 'src/a.ts'; put every value right after its option",
      refused(T.parse_flags(Finding, { "src/a.ts" })))
    assert.are.equal("expected an option such as --file, got '--'; put every value right after its option",
      refused(T.parse_flags(Finding, { "--" })))
  end)

  it("refuses a missing required flag, naming what it takes", function()
    assert.are.equal("missing --line <integer, at least 1>",
      refused(T.parse_flags(Finding, { "--file", "a", "--problem", "p" })))
    assert.are.equal("missing --file <text, at least 1 character>, --line <integer, at least 1>",
      refused(T.parse_flags(Finding, { "--problem", "p" })))
  end)

  it("leaves the schema's bounds to the validator, whose message names the field", function()
    local input = assert(T.parse_flags(Finding, { "--file", "src/a.ts", "--line", "0", "--problem", "x" }))
    local ok, msg = schema.validate(Finding, input)
    assert.is_nil(ok)
    assert.truthy(msg:find("line", 1, true))
  end)
end)

describe("moor.harness.teach codes_text", function()
  local text = T.codes_text()

  local function has_line(s, line)
    for l in (s .. "\n"):gmatch("(.-)\n") do
      if l == line then return true end
    end
    return false
  end

  it("lists every exit and refusal code with its exit status", function()
    local want = {
      { "ok", 0 }, { "failed", 1 }, { "invalid-input", 2 }, { "unknown-tool", 3 }, { "busy", 4 },
      { "outside-a-turn", 5 }, { "timed-out", 6 }, { "too-many-connections", 7 }, { "bad-request", 8 },
      { "unreachable", 9 }, { "invalid-answer", 10 },
    }
    assert.are.equal(#want, #T.CODES)
    for i, w in ipairs(want) do
      assert.are.equal(w[1], T.CODES[i].code)
      assert.are.equal(w[2], T.EXIT[w[1]])
      assert.truthy(text:find(string.format("\n  %-3d %-21s ", w[2], w[1]), 1, true), w[1])
    end
    assert.is_true(has_line(text, "  4   busy                  another call of yours is running (one call at a time,"
      .. " and no result or waiting while it runs): call again once it has answered (retryable)"))
    assert.is_true(has_line(text, "  7   too-many-connections  over 64 connections at once; nothing was done:"
      .. " call again (retryable)"))
    assert.is_true(has_line(text, "  6   timed-out             the handler's time was up, or the turn ended;"
      .. " the call may have run"))
    assert.is_true(has_line(text, "  1   failed                the handler threw, or returned a result that isn't"
      .. " JSON or is over 64 KiB as JSON; standard error has its message"))
  end)

  it("gives every limit", function()
    for _, line in ipairs {
      "  a value (tool input or answer): 1 MiB",
      "  a response: 256 KiB",
      "  reading standard input: 30 s",
      "  connections at once: 64",
      "  a connection's lifetime: 30 s",
      "  a handler: 30 s unless the tool sets its own (the turn's deadline always bounds it), then 5 s of grace;"
        .. " then timed-out",
      "  a result: 64 KiB as JSON",
      "  tools per agent: 16, named in lowercase letters, digits and _",
    } do
      assert.is_true(has_line(text, line), line)
    end
  end)

  it("gives each harness's background hand-back limit, codex's 10 s", function()
    assert.is_true(has_line(text, "  codex   hands a running command back after 10 s"))
    assert.truthy(text:find("\n  claude  ", 1, true))
    assert.are.equal(10, T.HANDBACK[1].seconds)
  end)

  it("shows the limits it is given, and the same text every time", function()
    local other = T.codes_text { connections = 8, result_bytes = 1024 }
    assert.is_true(has_line(other, "  connections at once: 8"))
    assert.is_true(has_line(other, "  a result: 1 KiB as JSON"))
    assert.truthy(other:find("over 8 connections at once", 1, true))
    assert.are.equal(text, T.codes_text())
    assert.are.equal(text, T.codes_text {})
    assert.are.equal(64, T.LIMITS.connections)   -- the defaults are left alone
  end)
end)
