#!/usr/bin/env bash
# Issue 7 items 9 and 31 against a real moor dev.
# 9: a webhook's respondWith header with CR/LF, or a content type with CR/LF,
#    injects nothing and answers 500 (the C writer refuses the response; the
#    client is not left without a reply).
# 31: headers over the limit are 431 however they are padded; HTTP/9.9 is 505
#    and a request line without a version is 400, never answered as HTTP/1.1.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
start_dev "$T/example" 127.0.0.1:0
PORT=$(port_of "$URL")

webhook_url() { # RUN -> the URL the run's progress event carries ("" if the run failed first)
  sse "$1" "$T/sse.$1"
  wait_for grep -qE '^event: (progress|run.failed)$' "$T/sse.$1"
  grep -A1 '^event: progress$' "$T/sse.$1" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p'
}
# deliver URL HEADERS_FILE: POST to the webhook; CODE is its status. A run that
# refused the respondWith headers itself (no URL) counts as refused: 500.
deliver() {
  if [ -z "$1" ]; then CODE=500; : >"$2"; return; fi
  CODE=$(curl -s -D "$2" -o "$2.body" -w '%{http_code}' --max-time 5 -X POST --data-binary 'x' "$1") || CODE=000
}

# A CRLF in an extra header.
call webhook_respond '{"headers": {"X-A": "1\r\nSet-Cookie: injected=1"}}'
WH=$(webhook_url "$RUN")
deliver "$WH" "$T/h1"
grep -qi 'injected' "$T/h1" && fail "a header was injected: $(cat "$T/h1")"
[ "$CODE" = 500 ] || fail "CRLF in a respondWith header: expected 500, got $CODE: $(cat "$T/h1" "$T/h1.body")"
[ -z "$WH" ] || grep -q '"error":{"code":' "$T/h1.body" || fail "500 without a JSON error: $(cat "$T/h1.body")"
pass "CRLF in a respondWith header: 500, nothing injected"

# A CRLF in the content type.
call webhook_respond '{"headers": {"Content-Type": "text/plain\r\nSet-Cookie: injected=2"}}'
WH=$(webhook_url "$RUN")
deliver "$WH" "$T/h2"
grep -qi 'injected' "$T/h2" && fail "a header was injected: $(cat "$T/h2")"
[ "$CODE" = 500 ] || fail "CRLF in content-type: expected 500, got $CODE: $(cat "$T/h2" "$T/h2.body")"
pass "CRLF in a respondWith content type: 500, nothing injected"

# A bare LF, and a header name that is not a token.
call webhook_respond '{"headers": {"X-B": "1\nSet-Cookie: injected=3"}, "deliveries": 2}'
WH=$(webhook_url "$RUN")
deliver "$WH" "$T/h3"
grep -qi 'injected' "$T/h3" && fail "a header was injected: $(cat "$T/h3")"
[ "$CODE" = 500 ] || fail "LF in a header: expected 500, got $CODE"
call webhook_respond '{"headers": {"Bad Name:": "v"}}'
WH=$(webhook_url "$RUN")
deliver "$WH" "$T/h5"
[ "$CODE" = 500 ] || fail "a header name that is not a token: expected 500, got $CODE"
# A good header still goes out.
call webhook_respond '{"headers": {"X-Good": "yes"}}'
WH=$(webhook_url "$RUN")
[ -n "$WH" ] || fail "no webhook URL for a good header"
deliver "$WH" "$T/h4"
[ "$CODE" = 200 ] && grep -qi '^X-Good: yes' "$T/h4" || fail "a good respondWith header: $CODE $(cat "$T/h4")"
pass "bare LF and a bad header name: 500; a good header goes out"

# Framing headers are moor's: a respondWith Content-Length, Transfer-Encoding
# or Connection would go out next to moor's own and desync the caller's
# connection (two Content-Lengths; chunked framing over a sized body).
for name in Content-Length Transfer-Encoding Connection content-length; do
  case $name in [Cc]ontent-[Ll]ength) v=0 ;; Transfer-Encoding) v=chunked ;; *) v=keep-alive ;; esac
  call webhook_respond "{\"headers\": {\"$name\": \"$v\"}}"
  WH=$(webhook_url "$RUN")
  deliver "$WH" "$T/hf"
  n=$(grep -ci "^$name:" "$T/hf" || true)
  [ "$n" -le 1 ] || fail "respondWith $name went out next to moor's own: $(cat "$T/hf")"
  grep -qi '^transfer-encoding:' "$T/hf" && fail "respondWith Transfer-Encoding went out: $(cat "$T/hf")"
  [ "$CODE" = 500 ] || fail "respondWith $name: expected 500 (refused), got $CODE: $(cat "$T/hf")"
done
pass "respondWith cannot set Content-Length, Transfer-Encoding or Connection"

# A header value that is not a string or number (or a list for headers), a
# CR/LF, a bad name or a framing header is the author's mistake:
# createWebhook refuses it, so no delivery is recorded and then answered 500
# (which a sender retries, delivering it again).
for h in '{"X-A": true}' '{"X-A": ["a", "b"]}' '["x"]' '{"X-A": "1\r\nSet-Cookie: a=1"}' \
         '{"Content-Length": "0"}' '{"Bad Name": "v"}'; do
  call webhook_respond "{\"headers\": $h}"
  WH=$(webhook_url "$RUN")
  [ -z "$WH" ] || fail "createWebhook took respondWith.headers = $h (a URL: $WH)"
  settled "$RUN" failed
  run_body "$RUN" | grep -q 'respondWith' || fail "the run's error does not name respondWith: $BODY"
done
pass "createWebhook refuses respondWith headers moor could not write"

# Item 31: versions.
raw "$PORT" 'GET /v1/runs HTTP/9.9\r\nHost: x\r\n\r\n' >"$T/v1"
head -1 "$T/v1" | grep -q '^HTTP/1.1 505 ' || fail "HTTP/9.9: $(head -1 "$T/v1")"
grep -q '"code":"http_version_not_supported"' "$T/v1" || fail "505 body: $(cat "$T/v1")"
raw "$PORT" 'GET /v1/runs HTTP/2.0\r\nHost: x\r\n\r\n' >"$T/v2"
head -1 "$T/v2" | grep -q '^HTTP/1.1 505 ' || fail "HTTP/2.0 as text: $(head -1 "$T/v2")"
raw "$PORT" 'GET /v1/runs\r\nHost: x\r\n\r\n' >"$T/v3"
head -1 "$T/v3" | grep -q '^HTTP/1.1 400 ' || fail "no version: $(head -1 "$T/v3")"
grep -q '"code":"bad_request"' "$T/v3" || fail "400 body: $(cat "$T/v3")"
raw "$PORT" 'GET /v1/runs HTTP/1.0\r\n\r\n' >"$T/v4"
head -1 "$T/v4" | grep -q '^HTTP/1.1 200 ' || fail "HTTP/1.0 must still work: $(head -1 "$T/v4")"
pass "505 for HTTP/9.9 and HTTP/2.0, 400 without a version, HTTP/1.0 still served"

# Item 31: headers over the limit padded with whitespace (not passed to the
# header callbacks) are 431 too, not http-parser's 400 HPE_HEADER_OVERFLOW.
pad=$(head -c 90000 /dev/zero | tr '\0' ' ')
raw "$PORT" "GET /v1/runs HTTP/1.1\r\nHost: x\r\nX-Pad:${pad}a\r\n\r\n" >"$T/o1"
head -1 "$T/o1" | grep -q '^HTTP/1.1 431 ' || fail "padded headers: $(head -c 300 "$T/o1")"
grep -q '"code":"headers_too_large"' "$T/o1" || fail "431 body: $(cat "$T/o1")"
many=$(for i in $(seq 1 9000); do printf 'a%d:\r\n' "$i"; done)
raw "$PORT" "GET /v1/runs HTTP/1.1\r\n${many}\r\n\r\n" >"$T/o2"
head -1 "$T/o2" | grep -q '^HTTP/1.1 431 ' || fail "many empty headers: $(head -c 300 "$T/o2")"
pass "431 for headers over the limit, however they are padded"
req GET /v1/runs
expect 200 "still serving"
stop_dev
