#!/usr/bin/env bash
# Provider failures over the real libcurl path, against the fake model server:
# a 429 then success (retry-after honoured), a 500 (retried, then the turn
# fails), a timeout, a body that is not JSON, a 401, and an unknown model
# prefix at load. Each failure is a failed turn with a clear error, the
# session stays open, and the API key never reaches the log.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5",|model = "openai/fake-model", modelTimeout = "1s",|' example/agent.lua
grep -q 'modelTimeout' example/agent.lua || fail "could not point the agent at the fake model"

start_fake() { # SCRIPT LOG
  # emptied here, before the background job starts: else wait_for can read
  # the previous server's URL and head -1 the file the new one just truncated
  : >"$T/fake.out"
  "$FAKE_MODEL" --script "$MOOR_SRC/tests/fake/scripts/$1" --listen 127.0.0.1:0 --log "$2" >"$T/fake.out" 2>>"$T/fake.err" &
  FAKE_PID=$!
  : >"$T/fake.out.wait"
  wait_for grep -q '^http://' "$T/fake.out"
  export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test-SECRET-never-logged"
}

# say SID TEXT: send a message and wait until that turn ends; prints nothing.
say() {
  local before
  before=$("$MOOR" logs "$1" | grep -cE ' turn\.(completed|failed) ' || true)
  req POST "/v1/sessions/$1" "{\"message\": \"$2\"}"
  [ "$CODE" = 202 ] || fail "message: $CODE $BODY"
  turn_over() { [ "$("$MOOR" logs "$1" | grep -cE ' turn\.(completed|failed) ' || true)" -gt "$before" ]; }
  wait_for turn_over "$1"
}
last_turn() { "$MOOR" logs "$1" | grep -E ' turn\.(completed|failed) ' | tail -1; }

# 429 then success: one model step, two requests, the retry-after (1 s) waited.
start_fake flaky.lua "$T/flaky.jsonl"
start_dev example 127.0.0.1:0
req POST /v1/sessions '{}'
SID=$(echo "$BODY" | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')
t0=$(date +%s%N)
say "$SID" "hello"
elapsed=$(( ($(date +%s%N) - t0) / 1000000 ))
last_turn "$SID" | grep -q 'turn.completed' || fail "429 then success: $(last_turn "$SID")"
[ "$(grep -c . "$T/flaky.jsonl")" = 2 ] || fail "expected 2 requests (429, then 200): $(cat "$T/flaky.jsonl")"
[ "$elapsed" -ge 900 ] || fail "the retry-after of 1 s was not honoured ($elapsed ms)"
[ "$("$MOOR" logs "$SID" | grep -c ' step.result .* model ')" = 1 ] || fail "one model step expected"
stop_dev
kill "$FAKE_PID"

start_fake errors.lua "$T/errors.jsonl"
start_dev example 127.0.0.1:0
req POST /v1/sessions '{}'
SID=$(echo "$BODY" | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')

say "$SID" "please 500"
last_turn "$SID" | grep -q 'turn.failed.*server_error' || fail "500: $(last_turn "$SID")"
[ "$(grep -c 'please 500' "$T/errors.jsonl")" = 4 ] || fail "a 500 should be tried 4 times (1 + 3 retries)"

say "$SID" "be slow"
last_turn "$SID" | grep -q 'turn.failed.*timeout' || fail "timeout: $(last_turn "$SID")"

say "$SID" "send garbage"
last_turn "$SID" | grep -q 'turn.failed.*bad_response.*this is not JSON' || fail "garbage: $(last_turn "$SID")"

say "$SID" "a 401 please"
last_turn "$SID" | grep -q 'turn.failed.*auth.*OPENAI_API_KEY' || fail "401: $(last_turn "$SID")"

say "$SID" "hello again"
last_turn "$SID" | grep -q 'turn.completed' || fail "the session should still work: $(last_turn "$SID")"
"$MOOR" logs "$SID" | grep -q '"text":"you said: hello again"' || fail "no answer after the failures"
! grep -q SECRET "$T"/moor.db* "$T/errors.jsonl" "$T/dev.err" || fail "the API key leaked"
stop_dev
kill "$FAKE_PID"

# An unknown model prefix is a load error with the file and line.
sed -i 's|model = "openai/fake-model"|model = "nosuch/model"|' example/agent.lua
set +e
"$MOOR" call word_count '{"text": "x"}' --agent example 2>"$T/load.err"
st=$?
set -e
[ $st = 2 ] || fail "unknown prefix should fail the load (status $st)"
grep -q "example/agent.lua:[0-9]*: unknown model provider 'nosuch'" "$T/load.err" || fail "load error: $(cat "$T/load.err")"
pass "429 then success, 500, timeout, garbage, 401 and an unknown prefix: clear errors, session kept, key never logged"
