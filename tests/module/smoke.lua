-- moor as a Lua module in a stock Lua 5.4 (the rockspec's build): require it,
-- register a workflow tool, run it to the end, and read its log.
local moor = require "moor"
local core = require "moor.core"
local s = moor.schema

local double = moor.step("double", function(x) return x * 2 end)
moor.register("twice", moor.defineWorkflowTool {
  description = "Double twice, with a durable sleep between.",
  inputSchema = s.object { n = s.integer() },
  execute = function(input)
    local a = double(input.n)
    moor.sleep("20ms")
    return { value = double(a) }
  end,
})

local id = assert(moor.call("twice", { n = 5 }))
moor.run()
local status, result = moor.status(id)
assert(status == "completed", "status: " .. tostring(status) .. " " .. tostring(result))
assert(result == '{"value":20}', "result: " .. tostring(result))
local events = core.query("SELECT kind FROM events WHERE run_id=? ORDER BY seq", id)
local kinds = {}
for _, e in ipairs(events) do kinds[#kinds + 1] = e.kind end
assert(table.concat(kinds, ",") ==
  "run.started,step.result,timer.scheduled,timer.fired,step.result,run.completed", table.concat(kinds, ","))
local _, err = moor.call("twice", { n = "x" })
assert(err and err:find("n: must be an integer", 1, true), "refusal: " .. tostring(err))
-- schema patterns are PCRE2 in moor.core (host/regex.c): a backreference and the match limit
assert(s.validate(s.string { pattern = "^(\\w+)-\\1$" }, "ab-ab"))
local _, costly = s.validate(s.string { pattern = "^(a+)+$" }, string.rep("a", 4096) .. "!")
assert(costly and costly:find("too costly to check", 1, true), "pattern limit: " .. tostring(costly))
print("ok: moor as a Lua module ran " .. id)

-- moor's built-in tools (tools/) are found from the module's Lua files too,
-- and run on a stock Lua: the built-in sleep, as every agent gets it.
local builtins = assert(require("moor.loader").builtins())
assert(builtins.tools.ask_question and builtins.factories.subagent, "built-in tools")
moor.register("sleep", builtins.tools.sleep.tool)
local sid = assert(moor.call("sleep", { seconds = 0.02 }))
moor.run()
local sstatus, sresult = moor.status(sid)
assert(sstatus == "completed" and sresult == '{"waitedSeconds":0.02}', "sleep: " .. tostring(sresult))
print("ok: the built-in sleep ran " .. sid)

-- Harness agents' processes and socket (host/harness.c) on a stock Lua: a
-- process run to its end, and a process group and a server left open for
-- the state's close to end (lua_close: the engine's __gc kills and frees them).
local seen = {}
assert(core.spawn { argv = { "sh", "-c", "echo hi; exit 4" },
  on_line = function(line) seen.line = line end,
  on_exit = function(code) seen.status = code end })
local t0 = core.mono()
while seen.status == nil and core.mono() - t0 < 10000000 do core.wait(10) end
assert(seen.line == "hi" and seen.status == 4, "spawn: " .. tostring(seen.line) .. " " .. tostring(seen.status))
assert(core.wfa_path(), "moor-wfa is found (the build tree's)")
local dir = os.getenv("MOOR_DB"):match("^(.*)/[^/]*$")
assert(core.spawn { argv = { "sleep", "30" } })
assert(core.unix_listen { path = dir .. "/smoke.sock", full_response = "{}", on_request = function() end })
print("ok: core.spawn and core.unix_listen in module mode")
