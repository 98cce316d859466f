#!/usr/bin/env bash
# deploy through `moor dev` with curl only: start it with POST
# /v1/tools/deploy/calls, read input.requested (and its requestId) from the
# run's SSE stream, kill -9 the host, restart it, approve with POST
# /v1/inputs/{id}: the run completes with the approved result, and the plan
# step ran exactly once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0
call deploy '{"service":"web"}'
sse "$RUN" "$T/sse1"
wait_for grep -q '^event: input.requested$' "$T/sse1"
# The stream: ids are the log's seqs, in order, each event's data a JSON object.
grep -q '^id: 1$' "$T/sse1" || fail "stream has no id 1: $(cat "$T/sse1")"
head -3 "$T/sse1" | grep -q "^data: {\"runId\":\"$RUN\",\"seq\":1,\"kind\":\"run.started\"" \
  || fail "first event is not run.started: $(head -3 "$T/sse1")"
data=$(grep -A1 '^event: input.requested$' "$T/sse1" | sed -n 's/^data: //p')
REQ=$(field requestId "$data")
case $REQ in req_*) ;; *) fail "no requestId in input.requested: $data" ;; esac
printf '%s' "$data" | grep -q '"options":\[{"id":"approve"' || fail "question has no approve option: $data"
printf '%s' "$data" | grep -q "\"toolName\":\"deploy\"" || fail "input.requested lacks toolName: $data"
[ "$(pending_request "$RUN")" = "$REQ" ] || fail "GET /v1/inputs does not list $REQ: $BODY"
[ "$(count "plan web" "$WITNESS")" = 1 ] || fail "plan ran $(count "plan web" "$WITNESS") times before the kill"

kill_dev
wait $SSE_PID 2>/dev/null || true # the stream ends with the host
[ "$(count "apply web" "$WITNESS")" = 0 ] || fail "applied before approval"

start_dev "$T/example" 127.0.0.1:0
[ "$(status "$RUN")" = running ] || fail "run not running after restart: $BODY"
[ "$(pending_request "$RUN")" = "$REQ" ] || fail "the question did not survive the restart: $BODY"
# A fresh stream resumes after Last-Event-ID: nothing at or before it again.
last=$(grep '^id: ' "$T/sse1" | tail -1 | cut -d' ' -f2)
sse "$RUN" "$T/sse2" -H "Last-Event-ID: $last"
sleep 0.3
req POST "/v1/inputs/$REQ" '{"optionId":"approve"}'
expect 200 "answer approve"
[ "$(field outcome)" = answered ] || fail "answer response: $BODY"
settled "$RUN" completed
run_body "$RUN" | grep -qF '"result":{"deployed":true,"url":"https://web.example.internal"}' \
  || fail "wrong result: $BODY"
wait $SSE_PID || fail "the SSE stream did not end cleanly after run.completed"
grep -q '^event: input.resolved$' "$T/sse2" || fail "no input.resolved on the stream: $(cat "$T/sse2")"
grep -A1 '^event: input.resolved$' "$T/sse2" | grep -qF '"outcome":"answered"' || fail "input.resolved outcome"
[ "$(grep '^event: ' "$T/sse2" | tail -1)" = "event: run.completed" ] || fail "stream did not end at run.completed"
first=$(grep '^id: ' "$T/sse2" | head -1 | cut -d' ' -f2)
[ "$first" -gt "$last" ] || fail "Last-Event-ID $last replayed event $first"
[ "$(count "plan web" "$WITNESS")" = 1 ] || fail "plan ran $(count "plan web" "$WITNESS") times"
[ "$(count "apply web" "$WITNESS")" = 1 ] || fail "apply ran $(count "apply web" "$WITNESS") times"
req GET /v1/inputs
printf '%s' "$BODY" | grep -q "$REQ" && fail "answered question still pending: $BODY"
stop_dev
pass "deploy: question read from SSE, host killed, restarted, approved, deployed; plan once, apply once"
