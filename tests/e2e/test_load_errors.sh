#!/usr/bin/env bash
# Every broken tool file is reported at once, each with its file and line,
# and moor exits 2 without running anything.
. "$(dirname "$0")/lib.sh"
cd "$T"
B="$T/broken"
mkdir -p "$B/tools"
cat >"$B/tools/syntax.lua" <<'LUA'
local moor = require "moor"
return moor.defineTool {
  description = "broken",
  inputSchema = moor.schema.object {}
  execute = function() end,
}
LUA
cat >"$B/tools/nodesc.lua" <<'LUA'
local moor = require "moor"

return moor.defineTool {
  inputSchema = moor.schema.object {},
  execute = function() end,
}
LUA
cat >"$B/tools/twoentries.lua" <<'LUA'
local moor = require "moor"
local def = {
  description = "two",
  inputSchema = moor.schema.object {},
  execute = function() end,
  task = function() end,
}
local tool = moor.defineWorkflowTool(def)
return tool
LUA
cat >"$B/tools/noschema.lua" <<'LUA'
local moor = require "moor"
return moor.defineTool { description = "x", execute = function() end }
LUA
cat >"$B/tools/badschema.lua" <<'LUA'
local moor = require "moor"
return moor.defineTool { description = "x",
  inputSchema = { type = "object", properties = { n = { type = "integr" } } },
  execute = function() end }
LUA
cat >"$B/tools/tasky.lua" <<'LUA'
local moor = require "moor"
return moor.defineWorkflowTool { description = "x", inputSchema = moor.schema.object {},
  execution = "background", execute = function() end }
LUA
cat >"$B/tools/returnsnothing.lua" <<'LUA'
local x = 1
LUA
cat >"$B/tools/raises.lua" <<'LUA'
local moor = require "moor"
local cfg = nil
return moor.defineTool { description = cfg.description, inputSchema = moor.schema.object {},
  execute = function() end }
LUA
cat >"$B/tools/1bad.lua" <<'LUA'
return nil
LUA
cat >"$B/tools/moor__reserved.lua" <<'LUA'
return nil
LUA
cat >"$B/tools/workflow.lua" <<'LUA'
-- the runtime-generated workflow tool, with a limit out of range
return require("moor.tools.workflow") { maxSubagents = 200 }
LUA
cat >"$B/tools/ok.lua" <<'LUA'
local moor = require "moor"
local f = assert(io.open(os.getenv("WITNESS"), "a")); f:write("loaded\n"); f:close()
return moor.defineTool { description = "fine", inputSchema = moor.schema.object {},
  execute = function() return "ran" end }
LUA
cat >"$B/agent.lua" <<'LUA'
local moor = require "moor"
return moor.defineAgent { model = "gpt", instructions = "x" }
LUA
export WITNESS="$T/witness"
set +e
"$MOOR" call ok '{}' --agent "$B" >"$T/out" 2>"$T/err"
status=$?
set -e
[ $status = 2 ] || fail "exit status $status, want 2"
[ ! -s "$T/out" ] || fail "something ran: $(cat "$T/out")"
e="$T/err"
grep -q "12 broken files" "$e" || fail "not every broken file reported: $(cat "$e")"
grep -q "tools/syntax.lua:5: .*'}' expected" "$e" || fail "syntax error line: $(cat "$e")"
grep -q "tools/nodesc.lua:3: missing description" "$e" || fail "missing description line: $(cat "$e")"
grep -q "tools/twoentries.lua:8: .*exactly one entry point, but defines execute and task" "$e" || fail "two entry points: $(cat "$e")"
grep -q "tools/workflow.lua:2: maxSubagents must be an integer from 1 through 128, not 200" "$e" \
  || fail "workflow's maxSubagents: $(cat "$e")"
grep -q "tools/noschema.lua:2: missing inputSchema" "$e" || fail "missing schema: $(cat "$e")"
grep -q "tools/badschema.lua:2: inputSchema is not a valid schema: .*integr" "$e" || fail "bad schema: $(cat "$e")"
grep -qF 'tools/tasky.lua:2: "execution" was replaced by task(). Define task(input, ctx) to run each call as a task.' "$e" \
  || fail "execution refused: $(cat "$e")"
grep -q "tools/returnsnothing.lua:1: the file must return a tool" "$e" || fail "no tool returned: $(cat "$e")"
grep -q "tools/raises.lua:3: attempt to index a nil value" "$e" || fail "runtime error line: $(cat "$e")"
grep -q "tools/1bad.lua:1: bad tool name '1bad'" "$e" || fail "bad name: $(cat "$e")"
grep -q "tools/moor__reserved.lua:1: bad tool name 'moor__reserved': .*reserved" "$e" || fail "reserved name: $(cat "$e")"
grep -q "agent.lua:2: model \"gpt\" must be \"provider/model\"" "$e" || fail "agent.lua error: $(cat "$e")"
# A name over 64 characters
long=$(printf 'a%.0s' $(seq 1 65))
mkdir -p "$T/long/tools" && echo 'return nil' >"$T/long/tools/$long.lua"
set +e; "$MOOR" call x --agent "$T/long" 2>"$T/err2"; status=$?; set -e
[ $status = 2 ] && grep -q "at most 64 characters" "$T/err2" || fail "long name: $(cat "$T/err2")"
pass "all broken files reported with file and line; exit 2; nothing ran"
