#!/usr/bin/env bash
# A session over the real libcurl path against the fake model server: the
# model asks for deploy, deploy asks for approval, the host is killed with -9
# while the question is open, restarted, the answer is posted with
# inputResponses, the turn finishes with the model's final text, and the fake
# server saw each model request exactly once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5"|model = "openai/fake-model"|' example/agent.lua
grep -q 'openai/fake-model' example/agent.lua || fail "could not point the agent at the fake model"

"$FAKE_MODEL" --script "$MOOR_SRC/tests/fake/scripts/deploy.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" \
  >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test-SECRET-never-logged"

start_dev example 127.0.0.1:0
req POST /v1/sessions '{"message": "please deploy api"}'
[ "$CODE" = 201 ] || fail "POST /v1/sessions: $CODE $BODY"
SID=$(echo "$BODY" | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')
[ -n "$SID" ] || fail "no sessionId in $BODY"

# Read the session's stream until the approval question appears.
curl -s -N --max-time 15 "$URL/v1/sessions/$SID/stream" >"$T/stream1" &
CURL_PID=$!
has_question() { grep -q '^event: input.requested' "$T/stream1" 2>/dev/null; }
wait_for has_question
kill $CURL_PID 2>/dev/null || true
REQ=$(grep -A1 '^event: input.requested' "$T/stream1" | sed -n 's/.*"requestId":"\([^"]*\)".*/\1/p' | head -1)
[ -n "$REQ" ] || fail "no requestId in the stream: $(cat "$T/stream1")"
[ "$(count "plan api" "$WITNESS")" = 1 ] || fail "plan ran $(count "plan api" "$WITNESS") times"
[ "$(grep -c . "$T/model.jsonl")" = 1 ] || fail "expected one model request so far: $(cat "$T/model.jsonl")"

kill_dev
start_dev example 127.0.0.1:0
req POST "/v1/sessions/$SID" "{\"inputResponses\": [{\"requestId\": \"$REQ\", \"optionId\": \"approve\"}]}"
[ "$CODE" = 202 ] || fail "inputResponses: $CODE $BODY"

done_turn() {
  curl -s --max-time 2 "$URL/v1/sessions/$SID" >"$T/session.json" || true
  grep -q '"text":"Deployed: ' "$T/session.json"
}
wait_for done_turn
grep -qF '\"deployed\":true' "$T/session.json" || fail "the final text lacks the tool result: $(cat "$T/session.json")"
[ "$(count "plan api" "$WITNESS")" = 1 ] || fail "plan ran $(count "plan api" "$WITNESS") times"
[ "$(count "apply api" "$WITNESS")" = 1 ] || fail "apply ran $(count "apply api" "$WITNESS") times"

# The fake server saw exactly two model requests, none repeated after the restart.
[ "$(grep -c . "$T/model.jsonl")" = 2 ] || fail "model requests: $(cat "$T/model.jsonl")"
[ "$(sort "$T/model.jsonl" | sed 's/"n":[0-9]*//' | uniq -d | wc -l)" = 0 ] || fail "a model request repeated"
# The key never reaches the log, the database or the stream.
curl -s --max-time 3 "$URL/v1/sessions/$SID/stream" >"$T/stream2" || true
! grep -q "SECRET" "$T/model.jsonl" "$T/stream2" "$T"/moor.db* || fail "the API key leaked"
grep -q '^event: message.completed' "$T/stream2" || fail "no message.completed on the stream"
stop_dev
kill $FAKE_PID
pass "session: model -> deploy -> approval -> kill -9 -> restart -> inputResponses -> final text; 2 model requests"
