#!/usr/bin/env bash
# Issue 7 items 6 and 30 against a real moor dev:
# - with MOOR_API_TOKEN set, a /v1 request with a missing or wrong bearer is
#   answered 401 at headers-complete, before its body is sent or read;
# - a connection that sends nothing is closed within a few seconds;
# - connections are capped per peer and in all: idle ones give way to new
#   ones, and when every one is busy a new one gets 503 at once (no hang);
# - SSE streams are capped per run (429);
# - with a low soft RLIMIT_NOFILE inherited, many held idle connections do
#   not stop a new request from being answered (item 30).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
export MOOR_API_TOKEN="limits-test-token-0123456789abcdefXYZ"
API_TOKEN=$MOOR_API_TOKEN
REAL_MOOR=$MOOR
# moor dev started with a soft RLIMIT_NOFILE of 200 (the host raises it itself)
printf '#!/bin/sh\nulimit -Sn 200\nexec "%s" "$@"\n' "$REAL_MOOR" >"$T/lowfd.sh"
chmod +x "$T/lowfd.sh"
MOOR=$T/lowfd.sh
export MOOR_MAX_CONNECTIONS=40 MOOR_MAX_CONNECTIONS_PER_PEER=20
start_dev "$T/example" 127.0.0.1:0
MOOR=$REAL_MOOR
PORT=$(port_of "$URL")
HOSTPORT=127.0.0.1:$PORT
elapsed_ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# --- Auth before the body: the body is never sent, the answer comes at once.
for auth in "" "Authorization: Bearer wrong\r\n" "Authorization: Bearer ${API_TOKEN}x\r\n" \
            "Authorization: Bearer ${API_TOKEN:0:10}\r\n" "Authorization: bearer ${API_TOKEN}\r\n"; do
  t0=$(date +%s%N)
  raw "$PORT" "POST /v1/tools/deploy/calls HTTP/1.1\r\nHost: $HOSTPORT\r\nContent-Type: application/json\r\n${auth}Content-Length: 900000\r\n\r\n" 3 >"$T/auth"
  ms=$(elapsed_ms "$t0")
  head -1 "$T/auth" | grep -q '^HTTP/1.1 401 ' || fail "a /v1 POST with '${auth%\\r\\n}' and no body yet: $(head -c 200 "$T/auth")"
  grep -qi '^WWW-Authenticate: Bearer' "$T/auth" || fail "401 without WWW-Authenticate: $(cat "$T/auth")"
  [ "$ms" -lt 2500 ] || fail "401 took $ms ms: the server waited for the body"
done
raw "$PORT" "POST /v1/hooks/x HTTP/1.1\r\nHost: $HOSTPORT\r\nExpect: 100-continue\r\nContent-Length: 500000\r\n\r\n" 3 >"$T/auth2"
head -1 "$T/auth2" | grep -q '^HTTP/1.1 401 ' || fail "Expect: 100-continue without a token: $(head -1 "$T/auth2")"
grep -q '100 Continue' "$T/auth2" && fail "100 Continue sent to a client without the token"
req GET /v1/runs
expect 200 "the right token"
pass "401 at headers-complete for a missing or wrong bearer, before the body"

# --- A silent connection is dropped within a few seconds (default 5 s).
t0=$(date +%s%N)
( exec 3<>"/dev/tcp/127.0.0.1/$PORT"; timeout 15 cat <&3 >/dev/null ) || true
ms=$(elapsed_ms "$t0")
[ "$ms" -lt 8000 ] || fail "a silent connection was held $ms ms"
[ "$ms" -gt 3000 ] || fail "a silent connection was closed after only $ms ms"
pass "a connection that sends nothing is closed after ${ms} ms"

# --- Idle connections give way: hold 250 from 127.0.0.1 (per-peer cap 20, in
# all 40, soft NOFILE inherited 200), then a new request is still answered.
held=()
for _ in $(seq 1 250); do
  exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
  held+=("$fd")
done
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs") || code=000
[ "$code" = 200 ] || fail "a new request while 250 idle connections are held: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --interface 127.0.0.2 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs") || code=000
[ "$code" = 200 ] || fail "a request from another peer while idle connections are held: $code"
for fd in "${held[@]}"; do exec {fd}<&-; done
pass "held idle connections over the caps give way to new requests"

# --- Busy connections: 20 open SSE streams from 127.0.0.1 fill its cap.
call hook_wait '{"token": "limits-hold"}'
HOLD=$RUN
pids=()
nstreams=0
# open_stream RUN SOURCE_ADDRESS: an SSE client in the background, its output in $T/stream.N
open_stream() {
  nstreams=$((nstreams + 1))
  curl -sN --max-time 60 --interface "$2" -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs/$1/events" \
    >"$T/stream.$nstreams" 2>&1 &
  pids+=($!)
}
# streams_open: every stream opened so far has received its first event
streams_open() {
  local i
  for i in $(seq 1 "$nstreams"); do [ -s "$T/stream.$i" ] || return 1; done
}
for _ in $(seq 1 20); do open_stream "$HOLD" 127.0.0.1; done
wait_for streams_open
t0=$(date +%s%N)
code=$(curl -s -o "$T/busy" -w '%{http_code}' --max-time 5 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs") || code=000
ms=$(elapsed_ms "$t0")
[ "$code" = 503 ] || fail "a 21st busy connection from one peer: expected 503, got $code after $ms ms"
[ "$ms" -lt 2000 ] || fail "the refusal took $ms ms"
grep -q '"code":"too_many_connections"' "$T/busy" || fail "503 body: $(cat "$T/busy")"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --interface 127.0.0.2 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs") || code=000
[ "$code" = 200 ] || fail "another peer under its cap: $code"
pass "per-peer cap: busy connections refused with 503 at once, other peers served"

# --- SSE streams per run: 20 from .2 too would be 40 on one run (cap 32 by default).
for _ in $(seq 1 12); do open_stream "$HOLD" 127.0.0.2; done
wait_for streams_open
code=$(curl -s -o "$T/sse429" -w '%{http_code}' --max-time 3 --interface 127.0.0.3 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs/$HOLD/events") || code=000
[ "$code" = 429 ] || fail "a 33rd stream on one run: expected 429, got $code"
grep -q '"code":"too_many_streams"' "$T/sse429" || fail "429 body: $(cat "$T/sse429")"
pass "SSE streams per run capped: 429"

# --- The global cap: 32 streams + 8 more busy connections = 40.
req POST /v1/tools/hook_wait/calls '{"token": "limits-hold-2"}' --interface 127.0.0.5
expect 201 "a call from a peer under its cap"
HOLD2=$(field runId)
for _ in $(seq 1 8); do open_stream "$HOLD2" 127.0.0.3; done
wait_for streams_open
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --interface 127.0.0.4 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs") || code=000
[ "$code" = 503 ] || fail "over the global cap with every connection busy: expected 503, got $code"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
ok=
for _ in $(seq 1 30); do
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs") || code=000
  [ "$code" = 200 ] && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] || fail "after the streams closed, requests are not served again: $code"
pass "global cap: 503 when every connection is busy; served again once they close"
stop_dev

# --- 0 (or nonsense) is the default, as for every limit here: streams still open.
for v in 0 -3 x; do
  MOOR_MAX_STREAMS_PER_RUN=$v start_dev "$T/example" 127.0.0.1:0
  req POST /v1/tools/hook_wait/calls "{\"token\": \"limits-zero-$v\"}"
  expect 201 "a call to stream"
  code=$(curl -s -o "$T/sse0" -w '%{http_code}' --max-time 1 -H "Authorization: Bearer $API_TOKEN" \
    "$URL/v1/runs/$(field runId)/events") || true
  [ "$code" = 200 ] || fail "MOOR_MAX_STREAMS_PER_RUN=$v: a first stream got $code: $(cat "$T/sse0")"
  stop_dev
done
pass "MOOR_MAX_STREAMS_PER_RUN=0 (or not a positive number) is the default"

# --- A negative limit is not "no limit" (strtoul would wrap -1 to the maximum).
MOOR_BODY_LIMIT=-1 start_dev "$T/example" 127.0.0.1:0
head -c 2000000 /dev/zero >"$T/2mb"
code=$(curl -s -o "$T/neg" -w '%{http_code}' --max-time 10 --data-binary @"$T/2mb" \
  "$URL/.well-known/workflow/v1/webhook/nope") || code=000
[ "$code" = 413 ] || fail "MOOR_BODY_LIMIT=-1: a 2 MB body got $code, not 413 (the 1 MiB default)"
stop_dev
pass "MOOR_BODY_LIMIT=-1 is the default, not unlimited"
set +e
"$MOOR" dev --agent "$T/example" --listen 127.0.0.1:0 --body-limit -1 >"$T/neg.out" 2>"$T/neg.err" &
NPID=$!
for _ in $(seq 1 50); do kill -0 "$NPID" 2>/dev/null || break; sleep 0.1; done
kill -9 "$NPID" 2>/dev/null
wait "$NPID"; st=$?
set -e
[ "$st" = 2 ] || fail "--body-limit -1: exit $st, not a usage error: $(cat "$T/neg.out" "$T/neg.err")"
pass "--body-limit -1 is a usage error"
