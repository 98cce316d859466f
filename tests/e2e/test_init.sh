#!/bin/bash
# moor init [DIR] (issue 14 item 2): the scaffold works at once (moor call,
# moor test, moor dev in the new folder), .luarc.json points at the
# annotations of the moor that wrote it, and it never overwrites a file.
# (test_install.sh does the same from an installed prefix.)
source "$(dirname "$0")/lib.sh"
unset MOOR_DB

"$MOOR" init "$T/proj" >"$T/init.out" 2>"$T/init.err" || fail "moor init: $(cat "$T/init.err")"
grep -q "$T/proj/agent/tools/remind.lua" "$T/init.out" || fail "moor init did not list what it wrote: $(cat "$T/init.out")"
grep -q "\"$MOOR_SRC/lua/moor/meta\"" "$T/proj/.luarc.json" || fail ".luarc.json: $(cat "$T/proj/.luarc.json")"
[ -f "$MOOR_SRC/lua/moor/meta/moor.lua" ] || fail "the annotations .luarc.json names are missing"
grep -q 'moor.testing.script' "$T/proj/agent/agent.lua" && grep -q 'model = "openai/' "$T/proj/agent/agent.lua" \
  && grep -q 'model = "anthropic/' "$T/proj/agent/agent.lua" || fail "agent.lua lacks the scripted model or the provider lines"
grep -q 'moor.defineTool' "$T/proj/agent/tools/greet.lua" || fail "greet.lua is no plain tool"
grep -q 'moor.defineWorkflowTool' "$T/proj/agent/tools/remind.lua" && grep -q 'moor.step(' "$T/proj/agent/tools/remind.lua" \
  && grep -q 'moor.sleep(' "$T/proj/agent/tools/remind.lua" || fail "remind.lua is no workflow tool with a step and a sleep"
pass "moor init DIR wrote the agent, two tools, their specs, .luarc.json (-> $MOOR_SRC/lua/moor/meta) and .gitignore"

cd "$T/proj"
"$MOOR" test >"$T/test.out" 2>&1 || fail "moor test in the scaffold: $(cat "$T/test.out")"
grep -q '^4 successes / 0 failures / 0 errors' "$T/test.out" || fail "moor test: $(cat "$T/test.out")"
out=$("$MOOR" call remind '{"note": "stand up", "delay": "20ms"}' 2>"$T/call.err") || fail "moor call: $(cat "$T/call.err")"
[ "$(printf '%s\n' "$out" | tail -1)" = '{"reminder":"Reminder: stand up"}' ] || fail "moor call remind printed: $out"
run=$(run_id_from "$T/call.err")
"$MOOR" logs "$run" | grep -q 'timer.fired' || fail "the run's log has no durable sleep"
pass "moor test passes the scaffold's specs, and moor call runs its workflow tool (a step, a durable sleep)"

# moor dev in the folder holds a session with the scripted model, which calls greet
"$MOOR" dev --listen 127.0.0.1:0 >"$T/dev.out" 2>"$T/dev.err" &
DEV=$!
i=0
until grep -q '^http://' "$T/dev.out"; do
  kill -0 $DEV 2>/dev/null || fail "moor dev exited: $(cat "$T/dev.err")"
  i=$((i + 1)); [ $i -le 300 ] || fail "moor dev printed no URL"
  sleep 0.1
done
URL=$(head -1 "$T/dev.out")
body=$(curl -s --max-time 10 -H 'Content-Type: application/json' -d '{"message": "Ada"}' "$URL/v1/sessions")
sid=$(printf '%s' "$body" | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')
[ -n "$sid" ] || fail "POST /v1/sessions answered: $body"
i=0
until curl -s --max-time 10 "$URL/v1/sessions/$sid" | grep -q 'greet answered'; do
  i=$((i + 1)); [ $i -le 100 ] || fail "the scripted agent did not answer: $(curl -s "$URL/v1/sessions/$sid")"
  sleep 0.1
done
curl -s --max-time 10 "$URL/v1/sessions/$sid" | grep -q 'Hello, Ada!' || fail "the session's answer lacks greet's result"
kill -TERM $DEV
st=0; wait $DEV || st=$?
[ $st = 0 ] || fail "moor dev exited $st"
pass "moor dev in the folder serves the scaffold's agent: its scripted model calls greet"

# never overwrites: exit 2, the files named, nothing written (even the missing ones)
before=$(cat agent/tools/greet.lua .gitignore | cksum)
rm tests/lua/greet_spec.lua
st=0
"$MOOR" init >"$T/init.out" 2>"$T/init.err" || st=$?
[ $st = 2 ] || fail "moor init over a project exited $st, not 2: $(cat "$T/init.err")"
grep -q 'agent/tools/greet.lua' "$T/init.err" && grep -q '\.gitignore' "$T/init.err" \
  || fail "moor init did not name the existing files: $(cat "$T/init.err")"
grep -q 'greet_spec' "$T/init.err" && fail "moor init named a file that does not exist: $(cat "$T/init.err")"
[ ! -e tests/lua/greet_spec.lua ] || fail "moor init wrote a file while refusing"
[ "$(cat agent/tools/greet.lua .gitignore | cksum)" = "$before" ] || fail "moor init changed an existing file"
pass "moor init over existing files exits 2 naming them, and writes nothing"

# one existing file is enough; a file where a directory goes is an I/O error (exit 1)
mkdir "$T/one" && echo keep >"$T/one/.gitignore"
st=0; "$MOOR" init "$T/one" 2>"$T/init.err" >/dev/null || st=$?
[ $st = 2 ] && grep -q "$T/one/.gitignore exists" "$T/init.err" || fail "one existing file: $st $(cat "$T/init.err")"
[ "$(cat "$T/one/.gitignore")" = keep ] && [ ! -e "$T/one/agent" ] || fail "moor init wrote into $T/one"
mkdir "$T/two" && : >"$T/two/agent"
st=0; "$MOOR" init "$T/two" 2>"$T/init.err" >/dev/null || st=$?
[ $st = 1 ] && grep -q "cannot create the directory $T/two/agent" "$T/init.err" || fail "a file in the way: $st $(cat "$T/init.err")"
st=0; "$MOOR" init a b 2>"$T/init.err" >/dev/null || st=$?
[ $st = 2 ] || fail "moor init a b exited $st"
pass "moor init refuses one existing file (exit 2), says what is in the way of a directory (exit 1), takes one DIR"
