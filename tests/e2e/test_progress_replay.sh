#!/usr/bin/env bash
# A progress snapshot is published once: a restart replays the body, and the
# snapshot it yields again before its pending op is already in the log, so
# the log (and every SSE stream) must not get a second copy.
. "$(dirname "$0")/lib.sh"
cd "$T"
cp -r "$MOOR_SRC/agent" "$T/example"
"$MOOR" call remind_with_progress '{"note":"stand up","delay":"2s"}' --agent "$T/example" >"$T/out" 2>"$T/err" &
pid=$!
wait_for grep -q '^progress: ' "$T/err"
sleep 0.3
kill -9 $pid
wait $pid 2>/dev/null || true
run=$(run_id_from "$T/err")
[ -n "$run" ] || fail "no run id in: $(cat "$T/err")"
"$MOOR" resume --agent "$T/example" >"$T/resume.out" 2>"$T/resume.err" || fail "resume: $(cat "$T/resume.err")"
grep -q "^$run completed " "$T/resume.out" || fail "not completed: $(cat "$T/resume.out")"
n=$("$MOOR" logs "$run" | grep -c ' progress ' || true)
[ "$n" = 1 ] || fail "the progress snapshot is in the log $n times after one restart: $("$MOOR" logs "$run")"
pass "progress published once across a kill -9 and resume"
