#!/usr/bin/env bash
# Large values (issue 7, item 18): over libcurl against the fake model, a
# 200 KB content part from a plain tool reaches the model and a 300 KB model
# answer completes the turn; a 1 MiB step result is kept in the blobs table
# and read back by the replay after a kill -9; a file written before the
# blobs table existed (schema 3) still replays; a result over
# $MOOR_MAX_RESULT fails with a message that names the limit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5"|model = "anthropic/claude-fake"|' example/agent.lua
cat >"$T/big.lua" <<'LUA'
return function(req)
  if #fake.tool_results(req) > 0 then
    local longest = 0
    for run in req.body:gmatch("[QUJD]+") do
      if #run > longest then longest = #run end
    end
    return fake.anthropic_text(("saw %d bytes "):format(longest) .. string.rep("A", 300000))
  end
  return fake.anthropic_tool_use({ { id = "toolu_1", name = "big_screenshot", input = { bytes = 200000 } } })
end
LUA
"$FAKE_MODEL" --script "$T/big.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export ANTHROPIC_BASE_URL="$(head -1 "$T/fake.out")" ANTHROPIC_API_KEY="sk-ant-test-key"

start_dev example 127.0.0.1:0
req POST /v1/sessions '{"message": "take a screenshot"}'
[ "$CODE" = 201 ] || fail "POST /v1/sessions: $CODE $BODY"
SID=$(echo "$BODY" | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')
answered() { curl -s --max-time 5 "$URL/v1/sessions/$SID" | grep -q '"text":"saw '; }
failed_turn() { curl -s --max-time 5 "$URL/v1/runs/$SID/events" | grep -q '^event: turn.failed$'; }
i=0
until answered; do
  failed_turn && fail "the turn failed: $(curl -s --max-time 5 "$URL/v1/runs/$SID/events" | grep -A1 '^event: turn.failed$')"
  i=$((i + 1)); [ $i -le 200 ] || fail "no answer: $(curl -s --max-time 5 "$URL/v1/sessions/$SID" | head -c 600)"
  sleep 0.1
done
curl -s --max-time 5 "$URL/v1/sessions/$SID" >"$T/session"
grep -q '"text":"saw 200000 bytes AAAA' "$T/session" || fail "the model did not get the 200 KB part: $(head -c 300 "$T/session")"
n=$(grep -o 'A\{1000,\}' "$T/session" | head -1 | tr -d '\n' | wc -c)
[ "$n" = 300000 ] || fail "the 300 KB answer came back as $n bytes"
[ "$(grep -c . "$T/model.jsonl")" = 2 ] || fail "model requests: $(grep -c . "$T/model.jsonl")"

# A 1 MiB step result, then a park; kill -9 and replay.
W="$T/witness"
call big_step "{\"witness\":\"$W\",\"bytes\":1048576}"
BIG=$RUN
sse "$BIG" "$T/sse"
wait_for grep -q '^event: progress$' "$T/sse"
[ "$(sqlite3 "$DB" "SELECT length(payload) FROM blobs WHERE run_id='$BIG'")" -gt 1048576 ] || fail "no blob row"
[ "$(sqlite3 "$DB" "SELECT length(payload) FROM events WHERE run_id='$BIG' AND kind='step.result'")" = 0 ] \
  || fail "the event row holds the payload"
kill_dev
wait $SSE_PID 2>/dev/null || true

start_dev example 127.0.0.1:0
curl -s --max-time 5 "$URL/v1/sessions/$SID" >"$T/session2"
n=$(grep -o '"text":"saw 200000 bytes A*"' "$T/session2" | head -1 | tr -d '\n' | wc -c)
[ "$n" = $((300000 + 26)) ] || fail "after the restart the answer reads as $n bytes: $(head -c 300 "$T/session2")"
curl -s --max-time 3 "$URL/v1/runs/$BIG/events" >"$T/events" || true # (the stream stays open)
n=$(grep -o 'z\{1000,\}' "$T/events" | head -1 | tr -d '\n' | wc -c)
[ "$n" = 1048576 ] || fail "the replayed event stream shows a $n-byte step result"
WH=$(grep -A1 '^event: progress$' "$T/events" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p' | head -1)
[ -n "$WH" ] || fail "no webhook url"
req POST "/${WH#http://*/}" '{}'
expect 202 "deliver to the webhook"
settled "$BIG" completed
run_body "$BIG" | grep -qF '"result":{"n":1048576,"tail":"zzz"}' || fail "result: $BODY"
[ "$(count big "$W")" = 1 ] || fail "the big step ran $(count big "$W") times"
[ "$(grep -c . "$T/model.jsonl")" = 2 ] || fail "the restart called the model again"
stop_dev

# A database from before the blobs table (schema 3) with a parked run.
call_parked() {
  call big_step "{\"witness\":\"$W.old\",\"bytes\":100}"
  OLD=$RUN
  wait_for grep -qx big "$W.old"
  wait_for sh -c "sqlite3 '$DB' \"SELECT 1 FROM events WHERE run_id='$OLD' AND kind='hook.created'\" | grep -q 1"
}
start_dev example 127.0.0.1:0
call_parked
kill_dev
[ "$(sqlite3 "$DB" "SELECT count(*) FROM blobs WHERE run_id='$OLD'")" = 0 ] || fail "a small value went to blobs"
sqlite3 "$DB" "DELETE FROM blobs; DROP VIEW event_log; DROP TABLE blobs; DROP TABLE harness_turns; PRAGMA user_version=3;"
start_dev example 127.0.0.1:0
[ "$(sqlite3 "$DB" "PRAGMA user_version")" = 6 ] || fail "not migrated: $(sqlite3 "$DB" "PRAGMA user_version")"
TOKEN=$(sqlite3 "$DB" "SELECT token FROM hooks WHERE run_id='$OLD'")
req POST "/.well-known/workflow/v1/webhook/$TOKEN" '{}'
expect 202 "deliver to the old run's webhook"
settled "$OLD" completed
[ "$(count big "$W.old")" = 1 ] || fail "the old run's step ran again"
stop_dev

# Over the limit: a clear failure.
MOOR_MAX_RESULT=512KiB start_dev example 127.0.0.1:0
call big_step "{\"witness\":\"$W.limit\",\"bytes\":600000}"
settled "$RUN" failed
run_body "$RUN" >"$T/limit"
grep -qF "is over the 524288-byte limit as JSON" "$T/limit" || fail "over the limit: $(cat "$T/limit")"
grep -qF 'MOOR_MAX_RESULT' "$T/limit" || fail "the message does not say how to raise the limit: $(cat "$T/limit")"
stop_dev
kill $FAKE_PID
pass "large values: 200 KB part to the model, 300 KB answer, 1 MiB step across kill -9, schema 3 file, the limit"
