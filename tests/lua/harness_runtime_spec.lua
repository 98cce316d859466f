-- How each harness is started (lua/moor/harness/runtime.lua): Claude Code and
-- Codex non-interactively with their own resume and fork, any program with
-- the prompt on stdin; and what moor reads from their output.
local runtime = require "moor.harness.runtime"

local function has_seq(argv, ...)
  local want = { ... }
  for i = 1, #argv - #want + 1 do
    local ok = true
    for k = 1, #want do if argv[i + k - 1] ~= want[k] then ok = false break end end
    if ok then return true end
  end
  return false
end

describe("harness runtimes", function()
  local L = "/r/abc/wfa"

  it("claude -p with stream-json, the launcher allowed, --resume and --fork-session", function()
    local c = runtime.command("claude", { prompt = "P", launcher = L, instructions = "Be brief." })
    assert.are.equal("claude", c.argv[1])
    assert.is_true(has_seq(c.argv, "-p", "--output-format", "stream-json", "--verbose"))
    assert.is_true(has_seq(c.argv, "--allowedTools", "Bash(/r/abc/wfa:*)"))
    assert.is_true(has_seq(c.argv, "--append-system-prompt", "Be brief."))
    assert.are.equal("P", c.stdin)
    assert.are.equal(L, c.env.MOOR_WFA)
    c = runtime.command("claude", { prompt = "P", launcher = L, resume = "s1" })
    assert.is_true(has_seq(c.argv, "--resume", "s1"))
    assert.is_false(has_seq(c.argv, "--fork-session"))
    c = runtime.command("claude", { prompt = "P", launcher = L, fork = "s1" })
    assert.is_true(has_seq(c.argv, "--resume", "s1", "--fork-session"))
  end)

  it("codex exec --json with the socket allowed by its sandbox, exec resume and exec fork", function()
    local c = runtime.command("codex", { prompt = "P", launcher = L })
    assert.is_true(has_seq(c.argv, "codex", "exec"))
    assert.is_true(has_seq(c.argv, "-c", "sandbox_workspace_write.network_access=true"))
    assert.are.equal("-", c.argv[#c.argv])
    assert.is_true(has_seq(runtime.command("codex", { prompt = "P", launcher = L, resume = "t1" }).argv,
      "resume", "t1", "-"))
    assert.is_true(has_seq(runtime.command("codex", { prompt = "P", launcher = L, fork = "t1" }).argv,
      "fork", "t1", "-"))
  end)

  it("codex: exec's own options before its resume subcommand, which refuses them after it", function()
    -- (codex exec resume takes no --sandbox: "error: unexpected argument '--sandbox' found")
    local c = runtime.command("codex", { prompt = "P", launcher = L, resume = "t1" })
    assert.are.same({ "codex", "exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write", "-c",
      "sandbox_workspace_write.network_access=true", "resume", "t1", "-" }, c.argv)
  end)

  it("a command with the prompt on stdin, and the session to continue in its environment", function()
    local c = runtime.command({ command = { "lua5.4", "fake.lua" } }, { prompt = "P", launcher = L, resume = "x" })
    assert.are.same({ "lua5.4", "fake.lua" }, c.argv)
    assert.are.equal("x", c.env.MOOR_HARNESS_RESUME)
    assert.is_false(c.env.MOOR_HARNESS_FORK)
    assert.are.equal("P", c.stdin)
  end)

  it("checks what open is given", function()
    assert.is_nil(runtime.check("claude"))
    assert.is_nil(runtime.check({ command = { "x" } }))
    assert.is_string(runtime.check("gemini"))
    assert.is_string(runtime.check({ command = {} }))
    assert.is_string(runtime.check({ command = { "x", 3 } }))
    assert.is_string(runtime.check({ command = { "x" }, env = {} }))
  end)

  it("reads the session and the last message from Claude's and Codex's streams", function()
    local st = {}
    runtime.read_line(st, '{"type":"system","subtype":"init","session_id":"c-1"}')
    runtime.read_line(st, "not json")
    runtime.read_line(st, '{"type":"result","subtype":"success","result":"done","session_id":"c-1"}')
    assert.are.same({ session = "c-1", final = "done" }, st)
    st = {}
    runtime.read_line(st, '{"type":"thread.started","thread_id":"t-9"}')
    runtime.read_line(st, '{"type":"item.completed","item":{"type":"agent_message","text":"ok"}}')
    assert.are.same({ session = "t-9", final = "ok" }, st)
  end)

  it("keeps what fits the turn's last delivery: no session id over 1 KiB, the last message's first 64 KiB", function()
    local st = {}
    runtime.read_line(st, '{"session_id":"' .. ("s"):rep(1025) .. '"}')
    assert.is_nil(st.session)
    runtime.read_line(st, '{"session_id":"' .. ("s"):rep(1024) .. '"}')
    assert.are.equal(1024, #st.session)
    -- cut where a character begins: "é" is 2 bytes, 64 KiB - 1 of "a" before it
    runtime.read_line(st, '{"type":"result","result":"' .. ("a"):rep(65535) .. 'é' .. ("b"):rep(10) .. '"}')
    assert.are.equal(("a"):rep(65535), st.final)
  end)
end)
