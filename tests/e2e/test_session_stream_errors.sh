#!/usr/bin/env bash
# Broken model streams over the real libcurl path, for both providers, against
# the fake model server (tests/fake/scripts/streams.lua): a stream cut in the
# middle (the connection dropped) is retried as a dropped reply is, and the log
# says the text streamed so far is void (message.restarted, reason retry); an
# event that is not JSON and a stream that ends before its end fail the turn
# with a clear bad_response error; the session goes on.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
"$FAKE_MODEL" --script "$MOOR_SRC/tests/fake/scripts/streams.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" \
  >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
FAKE_URL=$(head -1 "$T/fake.out")
export OPENAI_BASE_URL="$FAKE_URL/v1" ANTHROPIC_BASE_URL="$FAKE_URL" ANTHROPIC_API_KEY="sk-ant-test-key"

# say SID TEXT: send a message and wait until that turn ends.
say() {
  local before
  before=$("$MOOR" logs "$1" | grep -cE ' turn\.(completed|failed) ' || true)
  req POST "/v1/sessions/$1" "{\"message\": \"$2\"}"
  [ "$CODE" = 202 ] || fail "message: $CODE $BODY"
  turn_over() { [ "$("$MOOR" logs "$1" | grep -cE ' turn\.(completed|failed) ' || true)" -gt "$before" ]; }
  wait_for turn_over "$1"
}
last_turn() { "$MOOR" logs "$1" | grep -E ' turn\.(completed|failed) ' | tail -1; }
requests_with() { grep -c "$1" "$T/model.jsonl" || true; }

for provider in openai anthropic; do
  cp -r "$T/example" "$T/ex_$provider"
  sed -i "s|model = \"openai/gpt-5.5\"|model = \"$provider/fake\"|" "$T/ex_$provider/agent.lua"
  export MOOR_DB="$T/$provider.db"
  start_dev "$T/ex_$provider" 127.0.0.1:0
  req POST /v1/sessions '{}'
  SID=$(field sessionId)
  [ -n "$SID" ] || fail "no sessionId: $BODY"

  say "$SID" "please cut $provider"
  last_turn "$SID" | grep -q 'turn.completed' || fail "$provider cut: $(last_turn "$SID")"
  "$MOOR" logs "$SID" | grep -q '"text":"an answer that streams whole the second time"' \
    || fail "$provider cut: $("$MOOR" logs "$SID")"
  [ "$(requests_with "please cut $provider")" = 2 ] || fail "$provider cut: $(requests_with "please cut $provider") requests"
  "$MOOR" logs "$SID" | grep ' message.restarted ' | grep -q '"reason":"retry"' \
    || fail "$provider cut: no message.restarted: $("$MOOR" logs "$SID")"

  say "$SID" "badstream $provider"
  last_turn "$SID" | grep -q 'turn.failed.*bad_response.*event stream that has an event whose data is not a JSON object: {oops' \
    || fail "$provider badstream: $(last_turn "$SID")"
  [ "$(requests_with "badstream $provider")" = 1 ] || fail "$provider badstream: retried"

  say "$SID" "unfinished $provider"
  last_turn "$SID" | grep -q 'turn.failed.*bad_response.*ended before .*cut short' \
    || fail "$provider unfinished: $(last_turn "$SID")"

  say "$SID" "hello again"
  last_turn "$SID" | grep -q 'turn.completed' || fail "$provider: the session should still work: $(last_turn "$SID")"
  stop_dev
done
kill "$FAKE_PID"
pass "broken streams (cut mid-way, garbage, ended early) for both providers: retried or a clear bad_response, session kept"
