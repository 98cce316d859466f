#!/usr/bin/env bash
# The CLI's contract: exit codes, result on the last line of stdout, progress
# on stderr, bad JSON and schema refusals, the lock, runs and logs.
. "$(dirname "$0")/lib.sh"
cd "$T"
"$MOOR" --version | grep -q '^moor [0-9]' || fail "--version"
"$MOOR" help | grep -q 'moor <command>' || fail "help"
set +e
"$MOOR" frobnicate 2>"$T/err"; [ $? = 2 ] || fail "unknown command should exit 2"
"$MOOR" call 2>"$T/err"; [ $? = 2 ] || fail "call without a tool should exit 2"
"$MOOR" call nosuch '{}' 2>"$T/err"; [ $? = 2 ] || fail "unknown tool should exit 2"
grep -q "unknown tool 'nosuch'; this agent has: .*three_steps" "$T/err" || fail "unknown tool message: $(cat "$T/err")"
"$MOOR" call three_steps '{"witness": ' 2>"$T/err"; [ $? = 2 ] || fail "bad JSON should exit 2"
grep -q "not valid JSON" "$T/err" || fail "bad JSON message: $(cat "$T/err")"
"$MOOR" call three_steps '{"witness": "", "sleep": "1s"}' 2>"$T/err"; [ $? = 2 ] || fail "schema refusal should exit 2"
grep -q "witness: must be a string of at least 1 character" "$T/err" || fail "refusal message: $(cat "$T/err")"
"$MOOR" call flaky '{"mode": "fatal"}' >"$T/out" 2>"$T/err"; [ $? = 1 ] || fail "a failed tool should exit 1"
grep -q "FatalError" "$T/err" || fail "failure message: $(cat "$T/err")"
set -e
"$MOOR" call flaky '{"mode": "progress"}' >"$T/out" 2>"$T/err"
[ "$(tail -n 1 "$T/out")" = '{"done":true,"n":3}' ] || fail "result line: $(cat "$T/out")"
grep -q '^progress: {"n":1}' "$T/err" || fail "progress on stderr: $(cat "$T/err")"

# Only one process drives a database.
"$MOOR" call three_steps "{\"witness\":\"$T/w\",\"sleep\":\"3s\"}" >/dev/null 2>&1 &
pid=$!
wait_for grep -qx two "$T/w" 2>/dev/null
set +e
"$MOOR" resume 2>"$T/err"; status=$?
set -e
kill -9 $pid; wait $pid 2>/dev/null || true
[ $status = 2 ] || fail "a second process should be refused (status $status)"
grep -q "is in use by another moor process: pid $pid" "$T/err" || fail "lock message: $(cat "$T/err")"

"$MOOR" runs | grep -q "three_steps .*running" || fail "runs: $("$MOOR" runs)"
"$MOOR" runs --json | grep -q '"status":"failed"' || fail "runs --json"
set +e
"$MOOR" logs run_nope 2>"$T/err"; [ $? = 1 ] || fail "unknown run should exit 1"
set -e
grep -q "unknown run 'run_nope'" "$T/err" || fail "unknown run message"
pass "exit codes, messages, lock, runs and logs"
