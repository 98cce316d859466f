#!/usr/bin/env bash
# Every error status of the HTTP API, each with its JSON {"error":{code,
# message}}: 400 (bad JSON on each JSON route, refused input, malformed HTTP,
# an option never offered, free text where it is not allowed), 401 (bearer
# token), 404 (unknown run, input, hook, webhook, route), 405, 408 (a stalled
# request), 409 (an answered or withdrawn question, a settled run), 413, 431;
# and `moor dev` refuses a non-loopback address without MOOR_API_TOKEN.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0 --body-limit 1000
PORT=$(port_of "$URL")

# Tool calls.
req POST /v1/tools/nosuch/calls '{}'
expect_error 404 not_found "unknown tool"
# Built-in tools (moor__*) are not callable from outside: 404 as unknown.
req POST /v1/tools/moor__session/calls '{}'
expect_error 404 not_found "the built-in moor__session"
req POST /v1/tools/moor__final_output/calls '{}'
expect_error 404 not_found "a reserved name"
req POST /v1/tools/moor%5F%5Fsession/calls '{}'
expect_error 404 not_found "the built-in moor__session, percent-encoded"
req POST /v1/tools/deploy/calls '{"service":'
expect_error 400 bad_json "call with bad JSON"
req POST /v1/tools/deploy/calls '{"service":"Not A Name!"}'
expect_error 400 invalid_input "refused input"
printf '%s' "$BODY" | grep -q 'service' || fail "invalid_input message lacks the field path: $BODY"
req POST /v1/tools/deploy/calls '{"service":42}'
expect_error 400 invalid_input "a number for a string"
req GET /v1/runs
expect 200 "list runs"
[ "$BODY" = '{"runs":[]}' ] || fail "refused calls started runs: $BODY"

# A session whose first message is not a non-empty string: the client's
# error (400, not 500), and no session is left behind.
req POST /v1/sessions '{"message":""}'
expect_error 400 bad_request "a session with an empty first message"
req GET /v1/runs
[ "$BODY" = '{"runs":[]}' ] || fail "a refused session was started: $BODY"

# Unknown things and routes.
req GET /v1/runs/run_nope
expect_error 404 not_found "unknown run"
req GET /v1/runs/run_nope/events
expect_error 404 not_found "events of an unknown run"
req POST /v1/runs/run_nope/cancel
expect_error 404 not_found "cancel an unknown run"
req POST /v1/inputs/req_nope '{"optionId":"approve"}'
expect_error 404 not_found "unknown input"
req POST /v1/hooks/nope '{"a":1}'
expect_error 404 not_found "unknown hook token"
req POST /.well-known/workflow/v1/webhook/nope '{"a":1}'
expect_error 404 not_found "unknown webhook token"
unknown_webhook=$BODY
req GET /.well-known/workflow/v1/webhook/nope
expect_error 404 not_found "GET on an unknown webhook token"
req GET /v1/nope
expect_error 404 not_found "unknown /v1 route"
req GET /nope
expect_error 404 not_found "unknown route"

# Methods.
req DELETE /v1/runs
expect_error 405 method_not_allowed "DELETE /v1/runs"
curl -s -D "$T/h" -o /dev/null -X DELETE "$URL/v1/runs"
grep -qi '^Allow: GET' "$T/h" || fail "405 without Allow: GET: $(cat "$T/h")"
req GET /v1/tools/deploy/calls
expect_error 405 method_not_allowed "GET a calls route"
req GET /v1/inputs/req_x
expect_error 405 method_not_allowed "GET an input"
req GET /v1/runs/run_x/cancel
expect_error 405 method_not_allowed "GET a cancel route"
pass "400/404/405 on calls, runs, inputs, hooks, webhooks and routes"

# A question: bad answers are refused and it stays open; then answered.
call deploy '{"service":"api","escalateAfter":"1h"}'
A=$RUN
wait_for test -n "$(pending_request "$A")"
REQ=$(pending_request "$A")
req POST "/v1/inputs/$REQ" '{"optionId":'
expect_error 400 bad_json "answer with bad JSON"
req POST "/v1/inputs/$REQ" ''
expect_error 400 bad_json "answer with no body"
req POST "/v1/inputs/$REQ" '{"optionId":"yolo"}'
expect_error 400 invalid_option "an option never offered"
printf '%s' "$BODY" | grep -q 'approve, cancel' || fail "invalid_option should list the offered ids: $BODY"
[ "$(pending_request "$A")" = "$REQ" ] || fail "the question closed after an invalid option"
req POST "/v1/inputs/$REQ" '{"text":"ship it"}'
expect_error 400 freeform_not_allowed "free text where it is not allowed"
req POST "/v1/inputs/$REQ" '{}'
expect_error 400 bad_request "an answer with neither optionId nor text"
req POST "/v1/inputs/$REQ" '["approve"]'
expect_error 400 bad_request "an answer that is not an object"
[ "$(pending_request "$A")" = "$REQ" ] || fail "the question closed after refused answers"
req POST "/v1/inputs/$REQ" '{"optionId":"approve"}'
expect 200 "a valid answer after refused ones"
settled "$A" completed
run_body "$A" | grep -qF '"result":{"deployed":true,"url":"https://api.example.internal"}' || fail "result: $BODY"
req POST "/v1/inputs/$REQ" '{"optionId":"approve"}'
expect_error 409 already_resolved "answer an answered question"
req POST "/v1/inputs/$REQ" '{"optionId":"cancel"}'
expect_error 409 already_resolved "change an answered question"
req POST "/v1/runs/$A/cancel"
expect_error 409 already_settled "cancel a completed run"
run_body "$A" | grep -q '"status":"completed"' || fail "a refused cancel changed the run: $BODY"
pass "400 invalid_option/freeform/bad_json leave the question open; 409 after the answer"

# A withdrawn question: the run is cancelled while it waits.
call deploy '{"service":"db","escalateAfter":"1h"}'
B=$RUN
wait_for test -n "$(pending_request "$B")"
REQ_B=$(pending_request "$B")
req POST "/v1/runs/$B/cancel"
expect 202 "cancel a run parked on a question"
settled "$B" cancelled
req GET /v1/inputs
printf '%s' "$BODY" | grep -q "$REQ_B" && fail "a withdrawn question is still listed: $BODY"
req POST "/v1/inputs/$REQ_B" '{"optionId":"approve"}'
expect_error 409 already_resolved "answer a withdrawn question"
printf '%s' "$BODY" | grep -q 'withdrawn' || fail "409 should say the question was withdrawn: $BODY"
curl -s --max-time 10 "$URL/v1/runs/$B/events" >"$T/b.sse"
grep -A1 '^event: input.resolved$' "$T/b.sse" | grep -qF '"outcome":"cancelled"' \
  || fail "no input.resolved with outcome cancelled: $(cat "$T/b.sse")"
[ "$(count "apply db" "$WITNESS")" = 0 ] || fail "a cancelled deploy applied"
pass "409 for a withdrawn question; input.resolved says cancelled"

# Hooks: bad JSON, delivery, then closed.
call hook_wait '{"token":"order-77"}'
H=$RUN
wait_for grep -q 'hook.created' <("$MOOR" logs "$H")
req POST /v1/hooks/order-77 '{"paid":'
expect_error 400 bad_json "hook delivery with bad JSON"
req POST /v1/hooks/order-77 ''
expect_error 400 bad_json "hook delivery with no body"
req POST /v1/hooks/order-77 '{"paid":true,"amount":12.5}'
expect 202 "hook delivery"
settled "$H" completed
run_body "$H" | grep -qF '"result":{"got":{"amount":12.5,"paid":true}}' || fail "hook result: $BODY"
req POST /v1/hooks/order-77 '{"paid":true}'
expect_error 404 not_found "delivery to a closed hook"
closed_hook=$BODY
req POST /v1/hooks/nope '{"paid":true}'
[ "$BODY" = "$closed_hook" ] || fail "unknown and closed tokens answer differently: $BODY vs $closed_hook"
[ "$unknown_webhook" = "$closed_hook" ] || fail "unknown webhook and closed hook differ: $unknown_webhook"
pass "hooks: 400 bad JSON, 202 delivered, 404 once closed (same answer as an unknown token)"

# Body limit (1000 bytes here): at the limit it reaches the route, over it 413.
pad() { head -c "$1" /dev/zero | tr '\0' a; }
body1000="{\"a\":\"$(pad 992)\"}"
[ ${#body1000} = 1000 ] || fail "test bug: body is ${#body1000} bytes"
req POST /v1/hooks/nope "$body1000"
expect_error 404 not_found "a body at the limit"
req POST /v1/hooks/nope "{\"a\":\"$(pad 993)\"}"
expect_error 413 body_too_large "a body one byte over the limit"
req POST /v1/tools/deploy/calls "{\"service\":\"$(pad 5000)\"}"
expect_error 413 body_too_large "a call over the limit"
req POST /.well-known/workflow/v1/webhook/nope "$(pad 2000)"
expect_error 413 body_too_large "a webhook delivery over the limit"

# Malformed HTTP, huge headers: answered, and the server goes on.
raw "$PORT" 'GARBAGE\r\n\r\n' >"$T/raw1"
head -1 "$T/raw1" | grep -q '^HTTP/1.1 400 ' || fail "malformed request: $(cat "$T/raw1")"
grep -q '{"error":{"code":"bad_request"' "$T/raw1" || fail "malformed request body: $(cat "$T/raw1")"
raw "$PORT" 'GET /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n' >"$T/raw2"
head -1 "$T/raw2" | grep -q '^HTTP/1.1 400 ' || fail "bad Content-Length: $(cat "$T/raw2")"
raw "$PORT" 'POST /v1/hooks/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n' >"$T/raw3"
head -1 "$T/raw3" | grep -q '^HTTP/1.1 400 ' || fail "bad chunk: $(cat "$T/raw3")"
req GET /v1/runs "" -H "X-Big: $(pad 70000)"
expect_error 431 headers_too_large "huge headers"
req GET /v1/runs
expect 200 "the server still answers after bad requests"
stop_dev
pass "413 over the body limit (not at it), 400 malformed HTTP, 431 huge headers"

# A stalled request: 408 once MOOR_HTTP_TIMEOUT_MS has passed, then closed.
MOOR_HTTP_TIMEOUT_MS=300 start_dev "$T/example" 127.0.0.1:0
PORT=$(port_of "$URL")
t0=$(date +%s%3N)
raw "$PORT" 'POST /v1/hooks/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"par' 10 >"$T/raw4"
t1=$(date +%s%3N)
head -1 "$T/raw4" | grep -q '^HTTP/1.1 408 ' || fail "stalled body: $(cat "$T/raw4")"
grep -q '"code":"request_timeout"' "$T/raw4" || fail "408 body: $(cat "$T/raw4")"
[ $((t1 - t0)) -ge 250 ] && [ $((t1 - t0)) -lt 5000 ] || fail "408 came after $((t1 - t0)) ms, not ~300"
raw "$PORT" 'GET /v1/runs HTTP/1.1\r\nHost: x\r\n' 10 >"$T/raw5"
head -1 "$T/raw5" | grep -q '^HTTP/1.1 408 ' || fail "stalled headers: $(cat "$T/raw5")"
req GET /v1/runs
expect 200 "a complete request on the same server"
stop_dev
pass "408 for a request stalled in its body or headers"

# A bearer token: every /v1 route needs it; webhooks are addressed by token.
export MOOR_API_TOKEN=s3cret-token-for-tests
start_dev "$T/example" 127.0.0.1:0
req GET /v1/runs
expect_error 401 unauthorized "no Authorization"
curl -s -D "$T/h" -o /dev/null "$URL/v1/runs"
grep -qi '^WWW-Authenticate: Bearer' "$T/h" || fail "401 without WWW-Authenticate: $(cat "$T/h")"
req GET /v1/runs "" -H "Authorization: Bearer wrong"
expect_error 401 unauthorized "a wrong token"
req GET /v1/runs "" -H "Authorization: Bearer ${MOOR_API_TOKEN%?}"
expect_error 401 unauthorized "the token less its last character"
req GET /v1/runs "" -H "Authorization: Bearer ${MOOR_API_TOKEN}x"
expect_error 401 unauthorized "the token and one more character"
req GET /v1/runs "" -H "Authorization: Bearer ${MOOR_API_TOKEN}${MOOR_API_TOKEN}"
expect_error 401 unauthorized "the token twice"
req POST /v1/tools/deploy/calls '{"service":"x"}'
expect_error 401 unauthorized "a call without the token"
req POST /v1/inputs/req_x '{"optionId":"a"}'
expect_error 401 unauthorized "an answer without the token"
req POST /v1/hooks/nope '{}'
expect_error 401 unauthorized "a hook without the token"
req POST /.well-known/workflow/v1/webhook/nope '{}'
expect_error 404 not_found "a webhook needs no bearer token"
API_TOKEN=$MOOR_API_TOKEN
req GET /v1/runs
expect 200 "the right token"
printf '%s' "$BODY" | grep -q "$A" || fail "runs with the token: $BODY"
call deploy '{"service":"cache","escalateAfter":"1h"}'
C=$RUN
wait_for test -n "$(pending_request "$C")"
# The CLI sends the token from the environment to the running moor dev.
"$MOOR" cancel "$C" >"$T/c.out" 2>"$T/c.err" || fail "moor cancel through a token server: $(cat "$T/c.err")"
settled "$C" cancelled
API_TOKEN=
req GET "/v1/runs/$C"
expect_error 401 unauthorized "a run without the token"
stop_dev
pass "401 on every /v1 route without the bearer token; the CLI sends it"

# A non-loopback address: refused without a token, served with one.
unset MOOR_API_TOKEN
set +e
timeout -s KILL 10 "$MOOR" dev --agent "$T/example" --listen 0.0.0.0:0 >"$T/nl.out" 2>"$T/nl.err"
st=$?
set -e
[ $st = 2 ] || fail "moor dev --listen 0.0.0.0:0 without a token exited $st"
grep -q 'MOOR_API_TOKEN' "$T/nl.err" || fail "refusal does not mention MOOR_API_TOKEN: $(cat "$T/nl.err")"
[ -s "$T/nl.out" ] && fail "printed a URL although it refused: $(cat "$T/nl.out")"
# A token shorter than 32 characters is refused too (exit 2, saying why).
set +e
MOOR_API_TOKEN=0123456789abcdef0123456789abcde timeout -s KILL 10 \
  "$MOOR" dev --agent "$T/example" --listen 0.0.0.0:0 >"$T/nl.out" 2>"$T/nl.err"
st=$?
set -e
[ $st = 2 ] || fail "moor dev --listen 0.0.0.0:0 with a 31-character token exited $st"
grep -q 'MOOR_API_TOKEN has 31 characters and needs at least 32' "$T/nl.err" \
  || fail "the short-token refusal does not say why: $(cat "$T/nl.err")"
[ -s "$T/nl.out" ] && fail "printed a URL although it refused a short token: $(cat "$T/nl.out")"
NL_TOKEN=0123456789abcdef0123456789abcdef
MOOR_API_TOKEN=$NL_TOKEN "$MOOR" dev --agent "$T/example" --listen 0.0.0.0:0 >"$T/nl.out" 2>"$T/nl.err" &
DEV_PID=$!
wait_for grep -q '^http://' "$T/nl.out"
nl_port=$(port_of "$(head -1 "$T/nl.out")")
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nl_port/v1/runs")
[ "$code" = 401 ] || fail "non-loopback server without the token answered $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $NL_TOKEN" "http://127.0.0.1:$nl_port/v1/runs")
[ "$code" = 200 ] || fail "non-loopback server with the token answered $code"
# A wildcard listen answers to any Host (the token guards it), but an Origin
# must still be the Host it is sent to.
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $NL_TOKEN" -H "Host: moor.lan:$nl_port" \
  "http://127.0.0.1:$nl_port/v1/runs")
[ "$code" = 200 ] || fail "a wildcard listen refused the Host moor.lan: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $NL_TOKEN" -H "Host: moor.lan:$nl_port" \
  -H "Origin: http://evil.example:$nl_port" "http://127.0.0.1:$nl_port/v1/runs")
[ "$code" = 403 ] || fail "a wildcard listen took a foreign Origin: $code"
stop_dev
pass "a non-loopback --listen needs a MOOR_API_TOKEN of 32 characters or more (exit 2 without it)"
