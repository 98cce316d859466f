#!/usr/bin/env bash
# A hostile web page next to a token-less `moor dev` on loopback (issue 7,
# item 1): a browser "simple request" (text/plain POST, foreign Origin) and a
# DNS-rebinding page (Host: evil.example:PORT, same-origin to the browser) are
# refused before anything runs or is read; no CORS is granted (an OPTIONS
# preflight gets no Access-Control-* header); proper requests still work, on
# 127.0.0.1, localhost and the configured $MOOR_PUBLIC_URL host. Webhooks keep
# accepting any content type, Origin and Host (their token is the capability).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

export MOOR_PUBLIC_URL=https://moor.example.com
start_dev "$T/example" 127.0.0.1:0
PORT=$(port_of "$URL")

# raw_req METHOD PATH HEADERS... : curl with exactly the given headers, no
# Content-Type of its own; sets CODE, BODY and $T/h (response headers).
raw_req() {
  local method=$1 path=$2
  shift 2
  CODE=$(curl -s -D "$T/h" -o "$T/resp" -w '%{http_code}' --max-time 10 -X "$method" "$@" "$URL$path") || CODE=000
  BODY=$(cat "$T/resp" 2>/dev/null || true)
}
no_cors() {
  if grep -qi '^access-control-' "$T/h"; then fail "$1 granted CORS: $(cat "$T/h")"; fi
}

# A run with a pending approval for the page to go after.
call deploy '{"service":"web","escalateAfter":"1h"}'
A=$RUN
wait_for test -n "$(pending_request "$A")"
REQ=$(pending_request "$A")

# 1. A simple request from a foreign page: text/plain, Origin: evil.
raw_req POST /v1/tools/deploy/calls -H 'Content-Type: text/plain' -H 'Origin: http://evil.example' \
  --data-binary '{"service":"pwned"}'
expect_error 403 forbidden_origin "text/plain POST with a foreign Origin"
no_cors "a refused simple request"
raw_req POST "/v1/inputs/$REQ" -H 'Content-Type: text/plain' -H 'Origin: http://evil.example' \
  --data-binary '{"optionId":"approve"}'
expect_error 403 forbidden_origin "approval by a text/plain POST with a foreign Origin"
raw_req POST "/v1/inputs/$REQ" -H 'Origin: null' -H 'Content-Type: application/json' \
  --data-binary '{"optionId":"approve"}'
expect_error 403 forbidden_origin "Origin: null (a sandboxed page)"
raw_req GET /v1/inputs -H 'Origin: http://evil.example'
expect_error 403 forbidden_origin "GET /v1/inputs from a foreign Origin"
# Even without an Origin, text/plain (or no type at all) is refused on API POSTs.
raw_req POST /v1/tools/deploy/calls -H 'Content-Type: text/plain' --data-binary '{"service":"pwned"}'
expect_error 415 unsupported_media_type "text/plain POST without an Origin"
printf '%s' "$BODY" | grep -q 'application/json' || fail "415 does not say what to send: $BODY"
raw_req POST "/v1/runs/$A/cancel"
expect_error 415 unsupported_media_type "a cancel POST with no Content-Type"
raw_req POST /v1/tools/deploy/calls -H 'Content-Type: application/x-www-form-urlencoded' --data 'service=pwned'
expect_error 415 unsupported_media_type "a form POST"
pass "foreign Origin 403, non-JSON POSTs 415"

# 2. DNS rebinding: the page's own name resolves to 127.0.0.1, so the browser
#    sends Host: evil.example:PORT (and, being same-origin, a matching Origin).
raw_req GET /v1/inputs -H "Host: evil.example:$PORT"
expect_error 421 misdirected_request "GET /v1/inputs with a rebinding Host"
printf '%s' "$BODY" | grep -q "127.0.0.1:$PORT" || fail "421 does not name the served address: $BODY"
printf '%s' "$BODY" | grep -q "$REQ" && fail "the 421 leaked the pending input: $BODY"
raw_req POST "/v1/inputs/$REQ" -H "Host: evil.example:$PORT" -H "Origin: http://evil.example:$PORT" \
  -H 'Content-Type: application/json' --data-binary '{"optionId":"approve"}'
expect_error 421 misdirected_request "approve with a rebinding Host"
raw_req POST "/v1/inputs/$REQ" -H "Host: evil.example:$PORT" -H 'Content-Type: application/json' \
  --data-binary '{"optionId":"approve"}'
expect_error 421 misdirected_request "approve with a rebinding Host, no Origin"
raw_req GET /v1/runs -H "Host: 127.0.0.1:$((PORT == 65535 ? 1 : PORT + 1))"
expect_error 421 misdirected_request "the right host with another port"
raw_req GET "/v1/runs/$A/events" -H "Host: evil.example:$PORT"
expect_error 421 misdirected_request "an event stream with a rebinding Host"
# Two Host lines name two servers (a proxy in front may go by the first, the
# router by the last): 400, whichever comes first.
for hosts in "Host: evil.example:$PORT\r\nHost: 127.0.0.1:$PORT" "Host: 127.0.0.1:$PORT\r\nHost: evil.example:$PORT"; do
  raw "$PORT" "GET /v1/inputs HTTP/1.1\r\n$hosts\r\nConnection: close\r\n\r\n" >"$T/twohost"
  head -1 "$T/twohost" | grep -q '^HTTP/1.1 400 ' || fail "two Host headers: $(head -c 300 "$T/twohost")"
  grep -q "$REQ" "$T/twohost" && fail "two Host headers read the inputs: $(cat "$T/twohost")"
done
# "Host : evil" is no Host to a parser that keeps the space in the name, but
# may be one to a proxy in front: 400 (RFC 9112 5.1).
raw "$PORT" "GET /v1/inputs HTTP/1.1\r\nHost : evil.example:$PORT\r\nConnection: close\r\n\r\n" >"$T/sphost"
head -1 "$T/sphost" | grep -q '^HTTP/1.1 400 ' || fail "a space before the colon: $(head -c 300 "$T/sphost")"
grep -q "$REQ" "$T/sphost" && fail "'Host : evil' read the inputs: $(cat "$T/sphost")"
pass "rebinding Host 421 on reads, approvals and streams; two Host headers or 'Host :' 400"

# 3. Preflight: no grant, whatever the Origin.
for o in http://evil.example "http://127.0.0.1:$PORT"; do
  raw_req OPTIONS "/v1/inputs/$REQ" -H "Origin: $o" -H 'Access-Control-Request-Method: POST' \
    -H 'Access-Control-Request-Headers: content-type'
  case $CODE in 2*) fail "OPTIONS preflight from $o answered $CODE" ;; esac
  no_cors "an OPTIONS preflight from $o"
done
pass "OPTIONS preflights get no CORS grant"

# Nothing of the above ran, approved or cancelled anything.
[ "$(pending_request "$A")" = "$REQ" ] || fail "the question closed: $BODY"
[ "$(status "$A")" = running ] || fail "the run is no longer running"
req GET /v1/runs
printf '%s' "$BODY" | grep -o '"id":"run_' | wc -l | grep -qx 1 || fail "a refused call started a run: $BODY"
[ "$(count "apply web" "$WITNESS")" = 0 ] || fail "deploy applied"

# 4. Proper requests: loopback names of this port, the public host, and a
#    same-origin Origin; JSON with a charset parameter.
raw_req GET /v1/inputs -H "Host: localhost:$PORT"
expect 200 "Host: localhost:PORT"
raw_req GET /v1/inputs -H "Host: [::1]:$PORT"
expect 200 "Host: [::1]:PORT"
# Without MOOR_API_TOKEN the public host (a tunnel to this loopback port:
# anyone on the internet) is refused on the API; with it, served (below).
for h in moor.example.com moor.example.com:443 MOOR.example.com; do
  raw_req GET /v1/inputs -H "Host: $h"
  expect_error 421 misdirected_request "the public host $h without MOOR_API_TOKEN"
  printf '%s' "$BODY" | grep -q MOOR_API_TOKEN || fail "the 421 does not say what to set: $BODY"
  printf '%s' "$BODY" | grep -q "$REQ" && fail "the public host read the inputs: $BODY"
done
raw_req POST /v1/tools/deploy/calls -H "Host: moor.example.com" -H 'Content-Type: application/json' \
  --data-binary '{"service":"tunnel"}'
expect_error 421 misdirected_request "a call through the public host without MOOR_API_TOKEN"
raw_req GET /v1/inputs -H "Origin: http://localhost:$PORT"
expect 200 "a same-server Origin"
raw_req POST "/v1/inputs/$REQ" -H "Origin: http://127.0.0.1:$PORT" \
  -H 'Content-Type: Application/JSON; charset=utf-8' --data-binary '{"optionId":"approve"}'
expect 200 "a proper approval"
no_cors "a proper approval"
settled "$A" completed
[ "$(count "apply web" "$WITNESS")" = 1 ] || fail "deploy did not apply once"
pass "loopback names and same-server origins are served; the public host only with a token"

# 5. Webhooks: any content type, any Origin, any Host (a public URL through a
#    proxy or tunnel); the token is the capability.
call webhook_race "{\"witness\":\"$T/w\",\"timer\":\"1h\",\"sleep\":\"1ms\"}"
sse "$RUN" "$T/sse"
wait_for grep -q '^event: progress$' "$T/sse"
WH=$(grep -A1 '^event: progress$' "$T/sse" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p')
case $WH in https://moor.example.com/.well-known/workflow/v1/webhook/*) ;;
  *) fail "the webhook URL is not under MOOR_PUBLIC_URL: $WH" ;; esac
raw_req POST "/${WH#https://*/}" -H 'Content-Type: text/plain' -H 'Origin: https://sender.example' \
  -H 'Host: hooks.tunnel.example' --data-binary 'hello'
expect 202 "a text/plain webhook delivery with a foreign Origin and Host"
settled "$RUN" completed
stop_dev

# With MOOR_API_TOKEN the public host and origin are the API's (a client
# through the tunnel sends the token).
MOOR_API_TOKEN=guard-test-token-0123456789abcdef0123 start_dev "$T/example" 127.0.0.1:0
raw_req GET /v1/inputs -H "Host: moor.example.com" -H "Origin: https://moor.example.com" \
  -H "Authorization: Bearer guard-test-token-0123456789abcdef0123"
expect 200 "the public host and origin with MOOR_API_TOKEN"
raw_req GET /v1/inputs -H "Host: moor.example.com"
expect_error 401 unauthorized "the public host with MOOR_API_TOKEN but none sent"
stop_dev

# A public URL that is this server's own loopback address stays served
# without a token (it is no tunnel).
LPORT=$PORT
MOOR_PUBLIC_URL=http://localhost:$LPORT start_dev "$T/example" "127.0.0.1:$LPORT"
raw_req GET /v1/runs -H "Host: localhost:$LPORT"
expect 200 "MOOR_PUBLIC_URL=http://localhost:PORT, Host: localhost:PORT, no token"
stop_dev

# A malformed MOOR_PUBLIC_URL is refused at start (exit 2), saying what it needs.
for bad in 'ftp://x.example' 'https://x.example/hooks' 'not a url'; do
  set +e
  MOOR_PUBLIC_URL=$bad timeout -s KILL 10 "$MOOR" dev --agent "$T/example" --listen 127.0.0.1:0 \
    >"$T/pu.out" 2>"$T/pu.err"
  st=$?
  set -e
  [ $st = 2 ] || fail "MOOR_PUBLIC_URL='$bad' exited $st: $(cat "$T/pu.err")"
  grep -q "MOOR_PUBLIC_URL must be http(s)://host\[:port\]" "$T/pu.err" || fail "refusal of '$bad': $(cat "$T/pu.err")"
  [ "$(wc -l <"$T/pu.err")" -le 2 ] || fail "the refusal is not a short message: $(cat "$T/pu.err")"
done
pass "browser guard: foreign Origin, non-JSON POSTs and rebinding Hosts refused; no CORS; webhooks open"
