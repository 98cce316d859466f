#!/usr/bin/env bash
# deploy's approve-with-deadline (ctx.ask raced against moor.timer) across
# kill -9: the deadline passes (on-call paged), kill -9, restart, approve:
# deployed; plan, page and apply each ran once, as without a restart.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0
call deploy '{"service":"one","escalateAfter":"1s"}'
R1=$RUN
wait_for grep -qx "page one" "$WITNESS" 2>/dev/null
REQ1=$(pending_request "$R1")
[ -n "$REQ1" ] || fail "no pending question for $R1"
kill_dev

start_dev "$T/example" 127.0.0.1:0
[ "$(pending_request "$R1")" = "$REQ1" ] || fail "the question did not survive the restart"
req POST "/v1/inputs/$REQ1" '{"optionId":"approve"}'
expect 200 "approve after the deadline and a restart"
settled "$R1" completed
run_body "$R1" | grep -qF '"result":{"deployed":true,"url":"https://one.example.internal"}' || fail "result: $BODY"
for what in plan page apply; do
  [ "$(count "$what one" "$WITNESS")" = 1 ] || fail "$what ran $(count "$what one" "$WITNESS") times: $(cat "$WITNESS")"
done
stop_dev
pass "deadline passed, kill -9, restart, approve: deployed; plan, page, apply once each"
