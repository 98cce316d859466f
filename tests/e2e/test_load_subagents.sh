#!/usr/bin/env bash
# Subagents load with the root: broken subagent files are reported with the
# tools' rules (file, line, all at once), `agent` is reserved, a subagent's own
# tools/ folder is its own, and tool = false hides it from the root model.
. "$(dirname "$0")/lib.sh"
cd "$T"
A="$T/a"
mkdir -p "$A/tools" "$A/subagents/agent" "$A/subagents/helper/tools" "$A/subagents/broken" "$A/subagents/empty" \
  "$A/subagents/9bad"
cat >"$A/agent.lua" <<'LUA'
local moor = require "moor"
return moor.defineAgent { model = "openai/x", instructions = "root" }
LUA
cat >"$A/tools/ping.lua" <<'LUA'
local moor = require "moor"
return moor.defineTool { description = "ping", inputSchema = moor.schema.object {}, execute = function() return "pong" end }
LUA
cp "$A/agent.lua" "$A/subagents/agent/agent.lua"
cat >"$A/subagents/broken/agent.lua" <<'LUA'
local moor = require "moor"

return moor.defineAgent { model = "openai/x" }
LUA
cp "$A/agent.lua" "$A/subagents/9bad/agent.lua"
set +e
"$MOOR" call ping --agent "$A" >"$T/out" 2>"$T/err"; st=$?
set -e
[ $st = 2 ] || fail "broken subagents should fail the load (status $st)"
grep -q "5 broken files" "$T/err" || fail "all at once: $(cat "$T/err")"
grep -q "subagents/agent:1: the subagent name 'agent' is reserved" "$T/err" || fail "reserved: $(cat "$T/err")"
grep -q "subagents/broken/agent.lua:3: defineAgent needs instructions" "$T/err" || fail "file and line: $(cat "$T/err")"
grep -q "subagents/empty/agent.lua:1: missing" "$T/err" || fail "missing agent.lua: $(cat "$T/err")"
grep -q "subagents/9bad:1: bad subagent name '9bad': a subagent's folder name is its name" "$T/err" \
  || fail "bad name: $(cat "$T/err")"
grep -q "subagents/helper/agent.lua:1: missing" "$T/err" || fail "helper without agent.lua: $(cat "$T/err")"

# Fixed: the helper has its own tool; the root model sees helper as a tool.
rm -rf "$A/subagents/agent" "$A/subagents/broken" "$A/subagents/empty" "$A/subagents/9bad"
cat >"$A/subagents/helper/agent.lua" <<'LUA'
local moor = require "moor"
return moor.defineAgent { model = "openai/x", instructions = "help", description = "Helps." }
LUA
cat >"$A/subagents/helper/tools/secret.lua" <<'LUA'
local moor = require "moor"
return moor.defineTool { description = "only the helper's", inputSchema = moor.schema.object {},
  execute = function() return "s" end }
LUA
"$MOOR" call ping --agent "$A" >"$T/out" 2>"$T/err" || fail "load: $(cat "$T/err")"
set +e
"$MOOR" call secret --agent "$A" 2>"$T/err2"; st=$?
set -e
[ $st = 2 ] && grep -q "unknown tool 'secret'; this agent has: agent, ask_question, helper, ping, sleep" "$T/err2" \
  || fail "the helper's own tool must not be a root tool, and helper must be: $(cat "$T/err2")"
pass "subagent load errors reported at once with file and line; own tools; exposed as a tool"
