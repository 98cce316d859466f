#!/usr/bin/env bash
# A duration too long for the clock (more milliseconds than an integer holds,
# or enough to overflow "now + duration") is refused with a clear error; it
# never reaches the timer heap, where a float due time aborted the host
# ("PANIC: unprotected error ... number has no integer representation") and,
# the sleep being durable, aborted every restart after it. The built-in sleep
# tool takes its seconds from a model or POST /v1/tools/sleep/calls.
. "$(dirname "$0")/lib.sh"
cd "$T"
cat >"$T/agent/tools/sleep_for.lua" <<'LUA'
local moor = require "moor"
return moor.defineWorkflowTool {
  description = "Test tool: moor.sleep(input.ms).",
  inputSchema = moor.schema.object { ms = moor.schema.number() },
  execute = function(input)
    moor.sleep(input.ms)
    return { slept = input.ms }
  end,
}
LUA

# check_refused NAME INPUT: the call fails (exit 1) saying the duration is too long.
check_refused() {
  local st=0
  timeout 20 "$MOOR" call "$1" "$2" </dev/null >"$T/out" 2>"$T/err" || st=$?
  [ $st = 1 ] || fail "$1 $2 exited $st (want 1: a failed run): $(tail -3 "$T/err")"
  grep -q "too long" "$T/err" || fail "$1 $2: no clear error: $(tail -3 "$T/err")"
}
check_refused sleep '{"seconds": 1e17}'
check_refused sleep '{"seconds": 1e300}'
check_refused sleep_for '{"ms": 1e20}'
check_refused sleep_for '{"ms": 9223372036854775807}'

# Nothing durable is left that aborts the next start.
st=0
timeout 20 "$MOOR" resume </dev/null >"$T/resume.out" 2>"$T/resume.err" || st=$?
[ $st = 0 ] || fail "moor resume after refused sleeps exited $st: $(tail -3 "$T/resume.err")"

pass "durations too long for the clock are refused, and the host survives them"
