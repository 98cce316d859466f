#!/usr/bin/env bash
# A body parked on a webhook inside pcall is cancelled with POST
# /v1/runs/{id}/cancel: its cleanup step runs, then a slow step; the host is
# killed with kill -9 inside the slow step (the grace period) and restarted:
# the run ends cancelled and the cleanup step ran exactly once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
W="$T/witness"

start_dev "$T/example" 127.0.0.1:0
call cancel_cleanup "{\"witness\":\"$W\",\"hold\":3}"
sse "$RUN" "$T/sse"
wait_for grep -q '^event: progress$' "$T/sse"
WH=$(grep -A1 '^event: progress$' "$T/sse" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p')
[ -n "$WH" ] || fail "no webhook url in progress: $(cat "$T/sse")"
req POST "/v1/runs/$RUN/cancel"
expect 202 "cancel a parked run"
wait_for grep -qx "slow:start" "$W" 2>/dev/null
[ "$(count cleanup "$W")" = 1 ] || fail "cleanup ran $(count cleanup "$W") times before the kill"
kill_dev
wait $SSE_PID 2>/dev/null || true
[ "$(count slow "$W")" = 0 ] || fail "the slow step finished before the kill"

start_dev "$T/example" 127.0.0.1:0
settled "$RUN" cancelled
run_body "$RUN" | grep -qF '"error":{"code":"Cancelled"' || fail "cancelled run's error: $BODY"
[ "$(count cleanup "$W")" = 1 ] || fail "cleanup ran $(count cleanup "$W") times"
[ "$(count slow:start "$W")" = 2 ] || fail "the interrupted slow step should re-run once (at-least-once): $(cat "$W")"
[ "$(count slow "$W")" = 1 ] || fail "slow finished $(count slow "$W") times"
curl -s --max-time 10 "$URL/v1/runs/$RUN/events" >"$T/all"
[ "$(grep '^event: ' "$T/all" | tail -1)" = "event: run.cancelled" ] || fail "log does not end at run.cancelled"
[ "$(grep -c '^event: run.cancel$' "$T/all")" = 1 ] || fail "the cancel was recorded more than once"
[ "$(grep -A1 '^event: step.result$' "$T/all" | grep -c '"name":"cleanup"')" = 1 ] || fail "cleanup recorded twice"
# The webhook closed with the run; a second cancel is a conflict.
# (the restarted host has another port: the path is what matters)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{}' "$URL/${WH#http://*/}") || true
[ "$code" = 404 ] || fail "delivery to a cancelled run's webhook got $code"
req POST "/v1/runs/$RUN/cancel"
expect_error 409 already_settled "cancel a cancelled run"
stop_dev
pass "cancel over HTTP: cleanup once across a kill -9 in the grace period; run cancelled"
