#!/usr/bin/env bash
# A webhook's await raced against a timer (moor.async(webhook.await, webhook)
# in moor.race), across a kill -9: when the timer wins, the await that lost
# has no record in the log, and the restarted host must replay the same
# winner; when the webhook wins, likewise. Each witnessed step runs once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
W="$T/witness"

start_dev "$T/example" 127.0.0.1:0
# The timer wins; kill -9 during the sleep that follows.
call webhook_race "{\"witness\":\"$W\",\"timer\":\"300ms\",\"sleep\":\"2s\"}"
RUN_T=$RUN
wait_for grep -qx "after 2" "$W" 2>/dev/null
# The webhook wins; kill -9 during the sleep that follows.
call webhook_race "{\"witness\":\"$W.2\",\"timer\":\"1h\",\"sleep\":\"2s\"}"
RUN_W=$RUN
sse "$RUN_W" "$T/sse"
wait_for grep -q '^event: progress$' "$T/sse"
WH=$(grep -A1 '^event: progress$' "$T/sse" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p')
code=$(curl -s -o "$T/wh" -w '%{http_code}' -X PUT --data-binary 'hello' "$WH")
[ "$code" = 202 ] || fail "delivery got $code: $(cat "$T/wh")"
[ "$(cat "$T/wh")" = '{"ok":true}' ] || fail "webhook response: $(cat "$T/wh")"
wait_for grep -qx "after 1" "$W.2" 2>/dev/null
sleep 0.2
kill_dev
wait $SSE_PID 2>/dev/null || true

start_dev "$T/example" 127.0.0.1:0
settled "$RUN_W" completed
run_body "$RUN_W" | grep -qF '"result":{"winner":1}' || fail "webhook run: $BODY"
[ "$(count "after 1" "$W.2")" = 1 ] || fail "step after ran $(count "after 1" "$W.2") times (webhook won)"
pass "webhook won the race: same winner after kill -9"
settled "$RUN_T" completed
run_body "$RUN_T" | grep -qF '"result":{"winner":2}' || fail "timer run: $BODY"
[ "$(count "after 2" "$W")" = 1 ] || fail "step after ran $(count "after 2" "$W") times (timer won)"
stop_dev
pass "webhook raced against a timer: the same winner after a kill -9, each step once"
