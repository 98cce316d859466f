#!/usr/bin/env bash
# Harness agents across a kill -9 of the host (issue 11): the seed's dead-code
# workflow with a fake `codex` (MOOR_CODEX) that records a finding through
# its launcher, starts a background process, and works on. The host is
# killed with -9 mid-turn and started again: the turn ends as interrupted,
# the run returns the finding recorded before the kill, and nothing of the
# harness is left running (its background process included), nor its
# launcher's directory.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

cat >"$T/fake-codex" <<'SH'
#!/bin/sh
# Reads the prompt, finds the launcher in it, records one finding, then works on.
prompt=$(cat)
wfa=$(printf '%s\n' "$prompt" | sed -n 's/^ *\(\/[^ ]*\/wfa\) tool add_finding .*/\1/p' | head -1)
[ -n "$wfa" ] || { echo "no launcher in the prompt" >&2; exit 3; }
"$wfa" tool add_finding --file 'src/a.ts' --line '12' --problem 'it'\''s unused' >"$FAKE_DIR/out" 2>&1
printf "\nexit %s\n" $? >>"$FAKE_DIR/out"
sleep 300 &
echo $! >"$FAKE_DIR/bg"
echo $$ >"$FAKE_DIR/leader"
wait
SH
chmod +x "$T/fake-codex"
export MOOR_CODEX="$T/fake-codex" FAKE_DIR="$T"
export MOOR_HARNESS_DIR="$T/h"

BG=
# (the root is 0300: made listable again so that it can be removed)
trap 'if [ -n "$BG" ]; then kill -9 "$BG" 2>/dev/null || true; fi; kill -9 $(jobs -p) 2>/dev/null || true
      chmod 700 "$T/h" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT

start_dev "$T/example" 127.0.0.1:0
call dead-code '{}'
wait_for test -s "$T/leader"
grep -qx "exit 0" "$T/out" || fail "the tool call: $(cat "$T/out")"
grep -q "^Recorded; 1 so far.$" "$T/out" || fail "the tool's output: $(cat "$T/out")"
BG=$(cat "$T/bg")
LEADER=$(cat "$T/leader")
kill -0 "$BG" || fail "the fake harness's background process is not running"
[ "$(stat -c %a "$T/h")" = 300 ] || fail "the harness root is $(stat -c %a "$T/h"), not 300"
kill_dev
# PDEATHSIG: the harness itself dies with the host; what it started does not
wait_for sh -c "! kill -0 $LEADER 2>/dev/null"
kill -0 "$BG" 2>/dev/null || fail "(setup) the background process died with the host"

start_dev "$T/example" 127.0.0.1:0
wait_for has_status "$RUN" completed
run_body "$RUN" >/dev/null
printf '%s' "$BODY" | grep -qF '"findings":[{"file":"src/a.ts","line":12,"problem":"it'\''s unused"}]' \
  || fail "the run's findings: $BODY"
printf '%s' "$BODY" | grep -qF '"ended":"interrupted"' || fail "the run's end: $BODY"
wait_for sh -c "! kill -0 $BG 2>/dev/null"
chmod 700 "$T/h"
[ "$(ls -A "$T/h" | wc -l)" = 0 ] || fail "left in the harness root: $(ls -la "$T/h")"
chmod 300 "$T/h"
pass "a kill -9 mid-turn: the finding kept, the turn interrupted, no harness process or directory left"

# An agent whose turn is over when the host stops: its directory goes when its
# run ends, though no turn of it runs after the restart.
cat >"$T/example/tools/harness_park.lua" <<'LUA'
local moor = require "moor"
return moor.defineWorkflowTool {
  description = "One turn of a harness agent, then a wait on a hook.",
  inputSchema = moor.schema.object {},
  execute = function()
    local a = moor.harness.open { key = "p", runtime = { command = { "sh", "-c",
      'cat > /dev/null; "$MOOR_WFA" result \'"done"\' > /dev/null' } } }
    local r = a:run { prompt = "answer" }
    moor.createHook { token = "harness-park" }:await()
    return { answered = r.outcome.answered, value = r.outcome.value }
  end,
}
LUA
stop_dev
start_dev "$T/example" 127.0.0.1:0
call harness_park '{}'
wait_for sh -c "sqlite3 '$DB' \"SELECT count(*) FROM hooks WHERE token='harness-park'\" | grep -qx 1"
stop_dev
start_dev "$T/example" 127.0.0.1:0
req POST /v1/hooks/harness-park '{}'
expect 202 "the hook"
wait_for has_status "$RUN" completed
run_body "$RUN" >/dev/null
printf '%s' "$BODY" | grep -qF '"answered":true' || fail "harness_park: $BODY"
chmod 700 "$T/h"
[ "$(ls -A "$T/h" | wc -l)" = 0 ] || fail "left in the harness root after the run ended: $(ls -la "$T/h"/*)"
chmod 300 "$T/h"
stop_dev
pass "an agent's directory goes when its run ends after a restart"

# A kill -9 while a handler's step runs: after the restart the handler is
# given the call again (its step runs again: at least once), the turn ends as
# interrupted, and the run returns what the handlers built.
cat >"$T/example/tools/harness_slow_call.lua" <<'LUA'
local moor = require "moor"
local work = moor.step("harness_slow_call.work", function(what)
  local f = assert(io.open(os.getenv("FAKE_DIR") .. "/work", "a"))
  f:write(what, "\n")
  f:close()
  os.execute("sleep 2")
  return what .. " done"
end, { retries = 0 })
return moor.defineWorkflowTool {
  description = "A handler that runs a slow step.",
  inputSchema = moor.schema.object {},
  execute = function()
    local got = {}
    local a = moor.harness.open { key = "w", runtime = { command = { "sh", "-c",
      'cat > /dev/null; "$MOOR_WFA" tool work --what one > /dev/null; sleep 300' } },
      tools = { work = moor.harness.tool { description = "Work.", input = moor.schema.object {
        what = moor.schema.string() }, handler = function(x) got[#got + 1] = work(x.what) return "ok" end } } }
    local r = a:run { prompt = "work" }
    return { got = moor.json.array(got), ended = r.outcome.reason }
  end,
}
LUA
start_dev "$T/example" 127.0.0.1:0
call harness_slow_call '{}'
wait_for grep -qx one "$T/work"
kill_dev
start_dev "$T/example" 127.0.0.1:0
wait_for has_status "$RUN" completed
run_body "$RUN" >/dev/null
printf '%s' "$BODY" | grep -qF '"ended":"interrupted"' || fail "harness_slow_call: $BODY"
[ "$(count one "$T/work")" = 2 ] || fail "the handler's step ran $(count one "$T/work") times, not twice"
stop_dev
pass "a kill -9 during a handler's step: the call given to the handler again, the turn interrupted"
