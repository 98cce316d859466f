#!/usr/bin/env bash
# Cancel without a host: `moor cancel RUN` while no moor dev runs records the
# cancel in the database; the next start applies it (the body parked on a
# webhook gets Cancelled, its cleanup steps run once) and the run ends
# cancelled. Also the plain live path: cancel over HTTP with no kill.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0
W1="$T/witness1"
call cancel_cleanup "{\"witness\":\"$W1\",\"hold\":0}"
RUN1=$RUN
sse "$RUN1" "$T/sse1"
wait_for grep -q '^event: progress$' "$T/sse1"
req POST "/v1/runs/$RUN1/cancel"
expect 202 "cancel a parked run"
[ "$(field status)" = cancelling ] || fail "cancel response: $BODY"
wait $SSE_PID || fail "the stream did not end when the run was cancelled"
[ "$(grep '^event: ' "$T/sse1" | tail -1)" = "event: run.cancelled" ] || fail "stream did not end at run.cancelled: $(cat "$T/sse1")"
grep -q '^event: run.cancel$' "$T/sse1" || fail "no run.cancel event"
[ "$(status "$RUN1")" = cancelled ] || fail "status after cancel: $BODY"
run_body "$RUN1" | grep -qF '"error":{"code":"Cancelled"' || fail "error: $BODY"
[ "$(count cleanup "$W1")" = 1 ] && [ "$(count slow "$W1")" = 1 ] || fail "cleanup steps: $(cat "$W1")"
req POST "/v1/runs/$RUN1/cancel"
expect_error 409 already_settled "cancel a cancelled run"
pass "cancel over HTTP: cleanup steps ran once, run cancelled, stream ended"

# A cancel recorded while no host runs takes effect on the next start.
W2="$T/witness2"
call cancel_cleanup "{\"witness\":\"$W2\",\"hold\":0}"
RUN2=$RUN
sse "$RUN2" "$T/sse2"
wait_for grep -q '^event: progress$' "$T/sse2"
kill_dev
wait $SSE_PID 2>/dev/null || true
"$MOOR" cancel "$RUN2" >"$T/cancel.out" 2>"$T/cancel.err" || fail "moor cancel failed: $(cat "$T/cancel.err")"
grep -q "cancel requested for $RUN2" "$T/cancel.out" || fail "moor cancel output: $(cat "$T/cancel.out")"
"$MOOR" runs | grep "$RUN2" | grep -q running || fail "run should still be running until a host drives it"
[ -e "$W2" ] && fail "cleanup ran with no host: $(cat "$W2")"
start_dev "$T/example" 127.0.0.1:0
settled "$RUN2" cancelled
[ "$(count cleanup "$W2")" = 1 ] || fail "cleanup ran $(count cleanup "$W2") times after the offline cancel"
[ "$(count slow "$W2")" = 1 ] || fail "slow ran $(count slow "$W2") times after the offline cancel"
stop_dev
"$MOOR" runs | grep "$RUN2" | grep -q cancelled || fail "moor runs: $("$MOOR" runs)"
pass "moor cancel with no host: takes effect on the next start, cleanup once"
