#!/usr/bin/env bash
# kill -9 while step two runs: step two may run again, the others run once,
# and the result is the same.
. "$(dirname "$0")/lib.sh"
cd "$T"
W="$T/witness"
"$MOOR" call three_steps "{\"witness\":\"$W\",\"sleep\":\"100ms\",\"hold\":2}" >"$T/out" 2>"$T/err" &
pid=$!
wait_for grep -qx two:start "$W" 2>/dev/null
kill -9 $pid
wait $pid 2>/dev/null || true
pkill -9 -f "^sleep 2$" 2>/dev/null || true
run=$(run_id_from "$T/err")
[ -n "$run" ] || fail "no run id"
[ "$(count two "$W")" = 0 ] || fail "step two finished before the kill"

"$MOOR" resume >"$T/resume.out" 2>"$T/resume.err" || fail "resume failed: $(cat "$T/resume.err")"
[ "$(count one "$W")" = 1 ] || fail "step one ran $(count one "$W") times"
[ "$(count two:start "$W")" = 2 ] || fail "step two should have started twice, started $(count two:start "$W")"
[ "$(count two "$W")" = 1 ] || fail "step two completed $(count two "$W") times"
[ "$(count three "$W")" = 1 ] || fail "step three ran $(count three "$W") times"
event_line "$run" run.completed | grep -qF '{"steps":[1,2,3],"sum":6}' \
  || fail "wrong result: $("$MOOR" logs "$run")"
pass "killed inside step two; two re-ran, one and three once; same result"
