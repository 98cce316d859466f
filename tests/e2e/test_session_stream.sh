#!/usr/bin/env bash
# Streamed model text over the real libcurl path, for both providers, against
# the fake model server (which streams when asked): message.delta events reach
# the session's stream before message.completed and add up to the recorded
# text; tool-call arguments split across chunks are assembled; deltas are
# never recorded; a kill -9 of moor dev mid-stream re-asks the model exactly
# once, and the log says so (message.restarted).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"

cat >"$T/stream.lua" <<'LUA'
local slow = {} -- slow requests per API
return function(req)
  assert(req.json.stream == true, "moor asked for no stream")
  local user = fake.last_user_text(req) or ""
  if user:find("slow", 1, true) then
    slow[req.api] = (slow[req.api] or 0) + 1
    local r = fake.text("Slow answer, streamed in small pieces: é, ü and done.")
    r.chunk, r.interval = 2, slow[req.api] == 1 and 300 or 5 -- the first one takes seconds: moor is killed in it
    return r
  end
  for _, t in ipairs(fake.tool_results(req)) do
    local r = fake.text("Counted: " .. t.content .. " (streamed, with ünïcode)")
    r.chunk, r.interval = 3, 15
    return r
  end
  return fake.tool_calls({ { id = "call_wc", name = "word_count", arguments = { text = "a b c d" } } })
end
LUA

# check_stream FILE: every message.completed on the SSE stream in FILE comes
# after its turn's message.delta events, whose text adds up to its text; prints
# the number of deltas checked.
cat >"$T/check.lua" <<'LUA'
local cjson = require "cjson"
local deltas, checked, completed, event = {}, 0, 0, nil
for line in io.lines(arg[1]) do
  local e = line:match("^event: (.*)$")
  if e then event = e end
  local d = line:match("^data: (.*)$")
  if d and event then
    local v = cjson.decode(d)
    local p = v.payload
    if event == "message.delta" then
      assert(v.seq == cjson.null, "a delta with a seq: " .. d)
      deltas[p.turnId] = (deltas[p.turnId] or "") .. p.text
      checked = checked + 1
    elseif event == "message.completed" then
      completed = completed + 1
      local got = deltas[p.turnId]
      if got ~= p.text then
        error(("turn %s: the deltas before message.completed add up to %q, its text is %q"):format(
          p.turnId, tostring(got), p.text))
      end
    end
  end
  if line == "" then event = nil end
end
assert(completed > 0, "no message.completed on the stream")
print(checked)
LUA

"$FAKE_MODEL" --script "$T/stream.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
FAKE_URL=$(head -1 "$T/fake.out")
export OPENAI_BASE_URL="$FAKE_URL/v1" ANTHROPIC_BASE_URL="$FAKE_URL" ANTHROPIC_API_KEY="sk-ant-test-key"

requests() { if [ -f "$T/model.jsonl" ]; then grep -c . "$T/model.jsonl" || true; else echo 0; fi; }
session_has() { curl -s --max-time 2 "$URL/v1/sessions/$SID" | grep -qF "$1"; }
new_session() {
  req POST /v1/sessions '{}'
  expect 201 "POST /v1/sessions"
  SID=$(field sessionId)
  [ -n "$SID" ] || fail "no sessionId in $BODY"
}

for provider in openai anthropic; do
  cp -r "$T/example" "$T/ex_$provider"
  sed -i "s|model = \"openai/gpt-5.5\"|model = \"$provider/fake-$provider\"|" "$T/ex_$provider/agent.lua"
  grep -q "model = \"$provider/fake-$provider\"" "$T/ex_$provider/agent.lua" || fail "cannot set the model"
  export MOOR_DB="$T/$provider.db"

  # 1. A turn with a tool call (arguments in pieces) and a streamed answer,
  # watched live on the session's stream.
  start_dev "$T/ex_$provider" 127.0.0.1:0
  new_session
  curl -sN --max-time 30 "$URL/v1/sessions/$SID/stream" >"$T/live_$provider" 2>/dev/null &
  STREAM_PID=$!
  sleep 0.3
  before=$(requests)
  req POST "/v1/sessions/$SID" '{"message": "count a b c d"}'
  expect 202 "the message"
  wait_for session_has '"text":"Counted: '
  session_has 'Counted: {\"chars\":7,\"lines\":1,\"words\":4} (streamed, with ünïcode)' \
    || fail "$provider: the tool did not get the assembled arguments: $(curl -s "$URL/v1/sessions/$SID")"
  [ $(($(requests) - before)) = 2 ] || fail "$provider: $(($(requests) - before)) model requests (2 expected)"
  wait_for grep -q '^event: turn.completed' "$T/live_$provider"
  kill "$STREAM_PID" 2>/dev/null || true
  wait "$STREAM_PID" 2>/dev/null || true
  n=$(lua5.4 "$T/check.lua" "$T/live_$provider") || fail "$provider: $(cat "$T/live_$provider")"
  [ "$n" -ge 5 ] || fail "$provider: only $n deltas: $(cat "$T/live_$provider")"
  first_delta=$(grep -n '^event: message.delta' "$T/live_$provider" | head -1 | cut -d: -f1)
  completed=$(grep -n '^event: message.completed' "$T/live_$provider" | head -1 | cut -d: -f1)
  [ "$first_delta" -lt "$completed" ] || fail "$provider: message.completed before the deltas"
  # Deltas are live only: the recorded stream (read afterwards) has none, and the same text once.
  curl -s --max-time 3 "$URL/v1/sessions/$SID/stream" >"$T/after_$provider" || true
  ! grep -q '^event: message.delta' "$T/after_$provider" || fail "$provider: a delta was recorded"
  [ "$(grep -c '^event: message.completed' "$T/after_$provider")" = 1 ] || fail "$provider: $(cat "$T/after_$provider")"

  # 2. kill -9 in the middle of a stream: after the restart the model is asked
  # once more (not twice), the answer is recorded once, and the log says so.
  new_session
  curl -sN --max-time 30 "$URL/v1/sessions/$SID/stream" >"$T/cut_$provider" 2>/dev/null &
  STREAM_PID=$!
  sleep 0.3
  before=$(requests)
  req POST "/v1/sessions/$SID" '{"message": "slow please"}'
  expect 202 "the slow message"
  wait_for grep -q '^event: message.delta' "$T/cut_$provider"
  sleep 0.5
  kill_dev
  kill "$STREAM_PID" 2>/dev/null || true
  wait "$STREAM_PID" 2>/dev/null || true
  ! grep -q '^event: message.completed' "$T/cut_$provider" || fail "$provider: the slow answer was not cut"
  [ $(($(requests) - before)) = 1 ] || fail "$provider: $(($(requests) - before)) requests before the kill"
  start_dev "$T/ex_$provider" 127.0.0.1:0
  wait_for session_has '"text":"Slow answer, streamed in small pieces: é, ü and done."'
  sleep 0.5
  [ $(($(requests) - before)) = 2 ] || fail "$provider: the model was asked $(($(requests) - before)) times (2 expected)"
  curl -s --max-time 3 "$URL/v1/sessions/$SID/stream" >"$T/replayed_$provider" || true
  [ "$(grep -c '^event: message.restarted' "$T/replayed_$provider")" = 1 ] \
    || fail "$provider: no message.restarted on the stream: $(cat "$T/replayed_$provider")"
  grep -q '"reason":"restart"' "$T/replayed_$provider" || fail "$provider: $(cat "$T/replayed_$provider")"
  [ "$(grep -c '^event: message.completed' "$T/replayed_$provider")" = 1 ] \
    || fail "$provider: the answer is not recorded once: $(cat "$T/replayed_$provider")"
  stop_dev
done
kill "$FAKE_PID"
pass "streamed model text (openai and anthropic over libcurl): deltas before message.completed add up to it, tool arguments assembled, a kill -9 mid-stream re-asks once"
