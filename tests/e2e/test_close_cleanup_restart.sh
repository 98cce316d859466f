#!/usr/bin/env bash
# Cleanup in a to-be-closed variable (issue 7, item 15): its __close runs a
# cleanup step and a slow step when the body raises, and when the body is
# cancelled while parked. The host is killed with kill -9 inside the slow
# step and restarted: the replay answers the cleanup step from the log (it
# ran exactly once), re-runs the interrupted slow step (at-least-once), and
# the run ends as the body left it: failed with its error, or cancelled.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

# (a) the body raises
W1="$T/witness-raise"
start_dev "$T/example" 127.0.0.1:0
call close_cleanup "{\"witness\":\"$W1\",\"mode\":\"raise\"}"
R1=$RUN
wait_for grep -qx "slow:start" "$W1" 2>/dev/null
[ "$(count cleanup "$W1")" = 1 ] || fail "raise: cleanup ran $(count cleanup "$W1") times before the kill"
kill_dev
[ "$(count slow "$W1")" = 0 ] || fail "raise: the slow step finished before the kill"

# (b) the body is cancelled while parked on a webhook
W2="$T/witness-park"
start_dev "$T/example" 127.0.0.1:0
call close_cleanup "{\"witness\":\"$W2\",\"mode\":\"park\"}"
R2=$RUN
sse "$R2" "$T/sse"
wait_for grep -q '^event: progress$' "$T/sse"
req POST "/v1/runs/$R2/cancel"
expect 202 "cancel a parked run"
wait_for grep -qx "slow:start" "$W2" 2>/dev/null
[ "$(count cleanup "$W2")" = 1 ] || fail "park: cleanup ran $(count cleanup "$W2") times before the kill"
kill_dev
wait $SSE_PID 2>/dev/null || true
[ "$(count slow "$W2")" = 0 ] || fail "park: the slow step finished before the kill"
# (the second host also resumed (a); whether it finished there or its slow
# step was cut short by this kill, the counts below hold)

start_dev "$T/example" 127.0.0.1:0
settled "$R1" failed
run_body "$R1" | grep -qF 'the body failed after its work' || fail "raise: the run's error: $BODY"
settled "$R2" cancelled
for W in "$W1" "$W2"; do
  [ "$(count cleanup "$W")" = 1 ] || fail "cleanup ran $(count cleanup "$W") times: $(cat "$W")"
  [ "$(count slow "$W")" = 1 ] || fail "slow finished $(count slow "$W") times: $(cat "$W")"
done
[ "$(count work "$W1")" = 1 ] || fail "raise: the work step ran $(count work "$W1") times"
for R in "$R1" "$R2"; do
  curl -s --max-time 10 "$URL/v1/runs/$R/events" >"$T/all"
  [ "$(grep -A1 '^event: step.result$' "$T/all" | grep -c '"name":"cleanup"')" = 1 ] || fail "$R: cleanup recorded $(grep -A1 '^event: step.result$' "$T/all" | grep -c '"name":"cleanup"') times"
  [ "$(grep -A1 '^event: step.result$' "$T/all" | grep -c '"name":"slow"')" = 1 ] || fail "$R: slow not recorded once"
done
stop_dev
pass "to-be-closed cleanup: one durable cleanup step across a kill -9, for a raising and a cancelled body"
