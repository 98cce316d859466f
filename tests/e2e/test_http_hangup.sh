#!/usr/bin/env bash
# Issue 7 item 14: a client hang-up must not kill `moor dev` (SIGPIPE, exit
# 141). Many SSE clients hang up while a run's events flow, and one
# connection pipelines 2,000 requests to an unknown webhook, reads 100 bytes
# and closes; with MOOR_API_TOKEN set. The host must stay alive and answer.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
export MOOR_API_TOKEN="hangup-test-token-0123456789abcdef"
API_TOKEN=$MOOR_API_TOKEN
start_dev "$T/example" 127.0.0.1:0
PORT=$(port_of "$URL")
alive() { kill -0 "$DEV_PID" 2>/dev/null || fail "moor dev died ($1): $(wait "$DEV_PID"; echo "exit $?") $(tail -3 "$T/dev.err")"; }

# 1. Pipelined requests to an unknown webhook on one connection; read 100 bytes, close.
probe=$T/pipelined.txt
for _ in $(seq 1 2000); do
  printf 'POST /.well-known/workflow/v1/webhook/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}'
done >"$probe"
for round in 1 2 3; do
  exec 3<>"/dev/tcp/127.0.0.1/$PORT"
  cat "$probe" >&3 &
  writer=$!
  head -c 100 <&3 >/dev/null || true
  exec 3<&- 3>&-
  kill "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
  sleep 0.3
  alive "pipelined round $round"
done
req GET /v1/runs
expect 200 "after the pipelined hang-ups"
pass "2,000 pipelined requests, hang-up after 100 bytes: host alive"

# 2. SSE clients hang up while events flow.
call chatter '{"rounds": 150, "burst": 5, "pause": "20ms"}'
pids=()
for wave in 1 2 3 4; do
  for _ in $(seq 1 12); do
    curl -sN --max-time "0.$((RANDOM % 9 + 1))" -H "Authorization: Bearer $API_TOKEN" \
      "$URL/v1/runs/$RUN/events" >/dev/null 2>&1 &
    pids+=($!)
  done
  # and some that die hard (RST) mid-stream
  for _ in $(seq 1 4); do
    curl -sN --max-time 5 -H "Authorization: Bearer $API_TOKEN" "$URL/v1/runs/$RUN/events" >/dev/null 2>&1 &
    p=$!
    sleep 0.1
    kill -9 "$p" 2>/dev/null || true
  done
  sleep 0.5
  alive "SSE hang-ups, wave $wave"
done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
alive "after every SSE client left"
req GET "/v1/runs/$RUN"
expect 200 "the run is still served"
req GET /v1/runs
expect 200 "list runs after the hang-ups"
stop_dev
pass "SSE clients hanging up mid-flow: host alive, still answering, clean exit"
