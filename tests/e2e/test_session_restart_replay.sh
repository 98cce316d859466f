#!/usr/bin/env bash
# An idle session whose last turn called a tool, after a real kill -9 and
# restart of moor dev: the replay publishes nothing it already published, so
# the transcript holds each answer once and the stream (from the start, and
# resumed with Last-Event-ID) has no event twice.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
# A scripted model (no model server): each message is one turn of two model
# steps, a plain tool call and then the answer.
mkdir -p "$T/sagent/tools"
cat >"$T/sagent/agent.lua" <<'LUA'
local moor = require "moor"
return moor.defineAgent {
  instructions = "test",
  model = moor.testing.script(function(turn)
    if turn.n % 2 == 1 then return { toolCalls = { { name = "echo", input = { n = turn.n } } } } end
    return ("answer %d"):format(turn.n // 2)
  end),
}
LUA
cat >"$T/sagent/tools/echo.lua" <<'LUA'
local moor = require "moor"
return moor.defineTool {
  description = "Echo n.",
  inputSchema = moor.schema.object { n = moor.schema.integer() },
  execute = function(input) return { n = input.n } end,
}
LUA

# count_in FILE PATTERN: lines of FILE matching the fixed string PATTERN.
count_in() { grep -cF -- "$2" "$1" || true; }

start_dev "$T/sagent" 127.0.0.1:0
req POST /v1/sessions '{"message": "first"}'
expect 201 "POST /v1/sessions"
SID=$(field sessionId)
[ -n "$SID" ] || fail "no sessionId in $BODY"
turn_done() {
  curl -s --max-time 2 "$URL/v1/sessions/$SID" >"$T/session.json" || true
  grep -qF "\"text\":\"answer $1\"" "$T/session.json"
}
wait_for turn_done 1
req POST "/v1/sessions/$SID" '{"message": "second"}'
expect 202 "a second message"
wait_for turn_done 2
curl -s --max-time 3 "$URL/v1/sessions/$SID/stream" >"$T/stream0" || true
N0=$(count_in "$T/stream0" 'event: ')
[ "$(count_in "$T/stream0" 'event: message.completed')" = 2 ] || fail "before the restart: $(cat "$T/stream0")"
LAST=$(sed -n 's/^id: //p' "$T/stream0" | tail -1)
[ -n "$LAST" ] || fail "no ids on the stream: $(cat "$T/stream0")"

for round in 1 2; do
  kill_dev
  start_dev "$T/sagent" 127.0.0.1:0
  # Let the replay run (and publish, if it would) before reading.
  curl -s --max-time 3 "$URL/v1/sessions/$SID/stream" >"$T/stream$round" || true
  curl -s --max-time 2 "$URL/v1/sessions/$SID" >"$T/session.json"
  for k in 1 2; do
    n=$(count_in "$T/session.json" "\"text\":\"answer $k\"")
    [ "$n" = 1 ] || fail "restart $round: the transcript shows 'answer $k' $n times: $(cat "$T/session.json")"
  done
  for kind in message.received message.completed turn.started turn.completed action.started action.result; do
    n=$(count_in "$T/stream$round" "event: $kind")
    [ "$n" = 2 ] || fail "restart $round: $n $kind events on the stream (2 expected): $(cat "$T/stream$round")"
  done
  [ "$(count_in "$T/stream$round" 'event: ')" = "$N0" ] || fail "restart $round: the stream grew: $(cat "$T/stream$round")"
  [ "$(sed -n 's/^id: //p' "$T/stream$round" | sort | uniq -d | wc -l)" = 0 ] || fail "an id repeats on the stream"
  # Resumed after the last event seen before the restart: nothing new.
  curl -s --max-time 2 -H "Last-Event-ID: $LAST" "$URL/v1/sessions/$SID/stream" >"$T/resumed$round" || true
  [ "$(count_in "$T/resumed$round" 'event: ')" = 0 ] || fail "restart $round: events after Last-Event-ID $LAST: $(cat "$T/resumed$round")"
done

# The session still works: a third turn answers once.
req POST "/v1/sessions/$SID" '{"message": "third"}'
expect 202 "a message after the restarts"
wait_for turn_done 3
[ "$(count_in "$T/session.json" '"text":"answer 3"')" = 1 ] || fail "answer 3 twice: $(cat "$T/session.json")"
[ "$(count_in "$T/session.json" '"text":"answer 2"')" = 1 ] || fail "answer 2 twice: $(cat "$T/session.json")"
stop_dev
pass "an idle session replayed after kill -9 (twice) publishes nothing again; the stream and Last-Event-ID agree"
