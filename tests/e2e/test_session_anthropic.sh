#!/usr/bin/env bash
# A session with an anthropic/ model over libcurl against the fake server's
# Messages API: a tool call (word_count) and the final text, with the key sent
# as x-api-key and never logged.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5"|model = "anthropic/claude-fake"|' example/agent.lua
cat >"$T/count.lua" <<'LUA'
return function(req)
  for _, r in ipairs(fake.tool_results(req)) do
    return fake.anthropic_text("Counted: " .. r.content)
  end
  return fake.anthropic_tool_use({ { id = "toolu_1", name = "word_count", input = { text = "a b c" } } })
end
LUA
"$FAKE_MODEL" --script "$T/count.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export ANTHROPIC_BASE_URL="$(head -1 "$T/fake.out")" ANTHROPIC_API_KEY="sk-ant-test-SECRET"
start_dev example 127.0.0.1:0
req POST /v1/sessions '{"message": "count a b c"}'
[ "$CODE" = 201 ] || fail "POST /v1/sessions: $CODE $BODY"
SID=$(echo "$BODY" | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')
answered() { curl -s --max-time 2 "$URL/v1/sessions/$SID" | grep -q '"text":"Counted: '; }
wait_for answered
curl -s "$URL/v1/sessions/$SID" | grep -qF 'Counted: {\"chars\":5,\"lines\":1,\"words\":3}' || fail "$(curl -s "$URL/v1/sessions/$SID")"
grep -q '"path":"/v1/messages"' "$T/model.jsonl" || fail "not the Messages API"
grep -q '"x-api-key":"<redacted' "$T/model.jsonl" || fail "no x-api-key header sent"
[ "$(grep -c . "$T/model.jsonl")" = 2 ] || fail "model requests: $(grep -c . "$T/model.jsonl")"
! grep -q SECRET "$T"/moor.db* "$T/dev.err" || fail "the key leaked"
stop_dev
kill $FAKE_PID
pass "anthropic/ session over libcurl: tool_use, tool_result, final text"
