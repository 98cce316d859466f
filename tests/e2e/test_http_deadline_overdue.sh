#!/usr/bin/env bash
# deploy's approve-with-deadline when the deadlines fall due while the host
# is down (killed with kill -9):
#  1. the escalation falls due while down: the restarted host fires it at
#     once (on-call paged once), then approve: deployed.
#  2. both deadlines pass across a restart: {deployed:false, reason:"timed
#     out"}, and the question is withdrawn (409 to a late answer).
# The witness file is watched without requests to the server.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0
call deploy '{"service":"two","escalateAfter":"2s"}'
R2=$RUN
wait_for test -n "$(pending_request "$R2")"
kill_dev
sleep 2.5 # the escalation falls due while nothing runs
[ "$(count "page two" "$WITNESS")" = 0 ] || fail "paged while the host was down"
start_dev "$T/example" 127.0.0.1:0
i=0
until grep -qx "page two" "$WITNESS"; do
  i=$((i + 1))
  [ $i -le 50 ] || fail "the overdue escalation did not fire within 5 s of the restart"
  sleep 0.1
done
[ "$(status "$R2")" = running ] || fail "run two settled without an answer: $BODY"
REQ2=$(pending_request "$R2")
req POST "/v1/inputs/$REQ2" '{"optionId":"approve"}'
expect 200 "approve run two"
settled "$R2" completed
run_body "$R2" | grep -qF '"deployed":true' || fail "run two: $BODY"
for what in plan page apply; do
  [ "$(count "$what two" "$WITNESS")" = 1 ] || fail "$what two ran $(count "$what two" "$WITNESS") times"
done
pass "a deadline that fell due while the host was down fires once on start"

call deploy '{"service":"three","escalateAfter":"1s","giveUpAfter":"1s"}'
R3=$RUN
wait_for grep -qx "page three" "$WITNESS"
REQ3=$(pending_request "$R3")
kill_dev
sleep 1.2
start_dev "$T/example" 127.0.0.1:0
settled "$R3" completed
run_body "$R3" | grep -qF '"result":{"deployed":false,"reason":"timed out"}' || fail "run three: $BODY"
req POST "/v1/inputs/$REQ3" '{"optionId":"approve"}'
expect_error 409 already_resolved "approve after the run gave up"
[ "$(count "apply three" "$WITNESS")" = 0 ] || fail "a timed-out deploy applied"
[ "$(count "page three" "$WITNESS")" = 1 ] || fail "paged $(count "page three" "$WITNESS") times"
stop_dev
pass "both deadlines across a restart: timed out, the question withdrawn (409)"
