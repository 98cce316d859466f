#!/usr/bin/env bash
# moor.race of a step against a timer, killed with -9 after the race and
# resumed: the replay gives the same winner, and the step is not re-run.
. "$(dirname "$0")/lib.sh"
cd "$T"
W="$T/witness"
"$MOOR" call race "{\"witness\":\"$W\",\"timer\":\"200ms\",\"after\":\"2s\"}" >"$T/out" 2>"$T/err" &
pid=$!
fired() { "$MOOR" logs "$(run_id_from "$T/err")" 2>/dev/null | grep -q timer.fired; }
wait_for fired
sleep 0.3
kill -9 $pid
wait $pid 2>/dev/null || true
run=$(run_id_from "$T/err")
[ "$(count slow "$W")" = 1 ] || fail "the step ran $(count slow "$W") times before the kill"
"$MOOR" resume >"$T/resume.out" 2>"$T/resume.err" || fail "resume: $(cat "$T/resume.err")"
event_line "$run" run.completed | grep -qF '{"winner":2}' || fail "winner changed: $("$MOOR" logs "$run")"
pass "the timer won live and again after kill -9 and resume"
