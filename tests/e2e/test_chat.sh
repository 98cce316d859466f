#!/usr/bin/env bash
# moor chat: a session in the terminal against the fake model server over
# libcurl. The model calls deploy, deploy asks for approval, the typed "Deploy"
# (the option's label) answers the sole question, and the final text is shown.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5"|model = "openai/fake-model"|' example/agent.lua
"$FAKE_MODEL" --script "$MOOR_SRC/tests/fake/scripts/deploy.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" \
  >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test"

{ printf 'deploy the api please\n'; sleep 2; printf 'Deploy\n'; sleep 2; } |
  "$MOOR" chat --agent example >"$T/chat.out" 2>"$T/chat.err"
grep -q -- '-> deploy {"service":"api"}' "$T/chat.out" || fail "no tool call shown: $(cat "$T/chat.out" "$T/chat.err")"
grep -q '^? Deploy api?' "$T/chat.out" || fail "no question shown: $(cat "$T/chat.out")"
grep -q '<- deploy: {"deployed":true' "$T/chat.out" || fail "no tool result: $(cat "$T/chat.out")"
grep -q '^agent: Deployed: ' "$T/chat.out" || fail "no final text: $(cat "$T/chat.out")"
[ "$(count "apply api" "$WITNESS")" = 1 ] || fail "apply ran $(count "apply api" "$WITNESS") times"

# The same through a running moor dev (found from the database's lock).
start_dev example 127.0.0.1:0
{ printf 'deploy the api please\n'; sleep 2; printf 'Deploy\n'; sleep 2; } |
  "$MOOR" chat --agent example >"$T/chat2.out" 2>"$T/chat2.err"
grep -q "through http://127.0.0.1" "$T/chat2.err" || fail "chat did not go through moor dev: $(cat "$T/chat2.err")"
grep -q -- '-> deploy {"service":"api"}' "$T/chat2.out" || fail "no tool call shown: $(cat "$T/chat2.out" "$T/chat2.err")"
grep -q '^? Deploy api?' "$T/chat2.out" || fail "no question shown: $(cat "$T/chat2.out")"
grep -q '^agent: Deployed: ' "$T/chat2.out" || fail "no final text: $(cat "$T/chat2.out")"
[ "$(count "apply api" "$WITNESS")" = 2 ] || fail "the second deploy did not apply once"
stop_dev
kill $FAKE_PID
pass "moor chat, in process and through moor dev: tool call, question answered by a typed label, final text"
