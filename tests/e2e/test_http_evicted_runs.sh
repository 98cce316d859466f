#!/usr/bin/env bash
# Eviction over HTTP (issue 13): `moor dev` with MOOR_EVICT_IDLE_MS=0 evicts
# every parked run at the end of a round. A deploy parked on its approval
# leaves memory while its SSE stream stays open; the answer over POST
# /v1/inputs/{id} loads it from its log: the stream shows input.resolved and
# run.completed, the result is the approved one, and each step ran once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

export MOOR_EVICT_IDLE_MS=0
start_dev "$T/example" 127.0.0.1:0
call deploy '{"service":"web"}'
sse "$RUN" "$T/sse1"
wait_for grep -q '^event: input.requested$' "$T/sse1"
data=$(grep -A1 '^event: input.requested$' "$T/sse1" | sed -n 's/^data: //p')
REQ=$(field requestId "$data")
case $REQ in req_*) ;; *) fail "no requestId in input.requested: $data" ;; esac
sleep 0.3 # (a few rounds: the parked run is evicted)
[ "$(status "$RUN")" = running ] || fail "the evicted run is not running: $BODY"
[ "$(pending_request "$RUN")" = "$REQ" ] || fail "GET /v1/inputs does not list $REQ: $BODY"
req POST "/v1/inputs/$REQ" '{"optionId":"approve"}'
expect 200 "answer approve"
settled "$RUN" completed
run_body "$RUN" | grep -qF '"result":{"deployed":true,"url":"https://web.example.internal"}' \
  || fail "wrong result: $BODY"
wait $SSE_PID || fail "the SSE stream did not end cleanly after run.completed"
grep -A1 '^event: input.resolved$' "$T/sse1" | grep -qF '"outcome":"answered"' || fail "no input.resolved: $(cat "$T/sse1")"
[ "$(grep '^event: ' "$T/sse1" | tail -1)" = "event: run.completed" ] || fail "stream did not end at run.completed"
[ "$(count "plan web" "$WITNESS")" = 1 ] || fail "plan ran $(count "plan web" "$WITNESS") times"
[ "$(count "apply web" "$WITNESS")" = 1 ] || fail "apply ran $(count "apply web" "$WITNESS") times"
stop_dev
pass "evicted deploy: stream kept, answered over HTTP, loaded from its log, completed; plan once, apply once"
