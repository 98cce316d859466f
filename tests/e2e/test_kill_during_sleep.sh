#!/usr/bin/env bash
# kill -9 during the durable sleep between step two and three; `moor resume`
# finishes the run and no step runs twice.
. "$(dirname "$0")/lib.sh"
cd "$T"
W="$T/witness"
"$MOOR" call three_steps "{\"witness\":\"$W\",\"sleep\":\"2s\"}" >"$T/out" 2>"$T/err" &
pid=$!
wait_for grep -qx two "$W" 2>/dev/null
sleep 0.3
kill -9 $pid
wait $pid 2>/dev/null || true
run=$(run_id_from "$T/err")
[ -n "$run" ] || fail "no run id in: $(cat "$T/err")"
[ "$(count three "$W")" = 0 ] || fail "step three ran before the sleep ended"

"$MOOR" resume >"$T/resume.out" 2>"$T/resume.err" || fail "resume failed: $(cat "$T/resume.err")"
[ "$(count one "$W")" = 1 ] || fail "step one ran $(count one "$W") times"
[ "$(count two "$W")" = 1 ] || fail "step two ran $(count two "$W") times"
[ "$(count three "$W")" = 1 ] || fail "step three ran $(count three "$W") times"
"$MOOR" runs | grep "$run" | grep -q completed || fail "run not completed: $("$MOOR" runs)"
event_line "$run" run.completed | grep -qF '{"steps":[1,2,3],"sum":6}' \
  || fail "wrong result: $("$MOOR" logs "$run")"
grep -qxF "$run completed {\"steps\":[1,2,3],\"sum\":6}" "$T/resume.out" \
  || fail "resume should print the settled run: $(cat "$T/resume.out")"
pass "killed during sleep, resumed, each step once, result {sum=6}"
