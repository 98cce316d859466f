#!/usr/bin/env bash
# moor chat prints the model's text as it streams, in process and through a
# running moor dev: part of the answer is on the screen while the model is
# still sending the rest, and the whole answer ends up on one "agent: " line,
# shown once (message.completed does not print it again).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5"|model = "openai/fake-model"|' example/agent.lua
cat >"$T/slow.lua" <<'LUA'
return function()
  local r = fake.text("Streaming, piece by piece, to the terminal.")
  r.chunk, r.interval = 3, 150 -- 15 pieces over about 2 s
  return r
end
LUA
"$FAKE_MODEL" --script "$T/slow.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test"
FULL='agent: Streaming, piece by piece, to the terminal.'

# chat_streams OUT: run moor chat with a message on a held-open pipe; while the
# answer streams, OUT shows its start but not its end; then the whole line once.
chat_streams() {
  local out=$1
  rm -f "$T/in"
  mkfifo "$T/in"
  "$MOOR" chat --agent example <"$T/in" >"$out" 2>"$out.err" &
  local chat_pid=$!
  exec 3>"$T/in"
  printf 'hello\n' >&3
  waited() { grep -q '^agent: Str' "$out" && return 0; kill -0 "$chat_pid" 2>/dev/null || fail "chat ended: $(cat "$out" "$out.err")"; return 1; }
  wait_for waited
  ! grep -qF "$FULL" "$out" || fail "the answer came whole, not streamed: $(cat "$out")"
  wait_for grep -qF "$FULL" "$out"
  sleep 0.3
  exec 3>&-
  wait "$chat_pid" || fail "moor chat failed: $(cat "$out.err")"
  [ "$(grep -cxF "$FULL" "$out")" = 1 ] || fail "the answer is not one line, once: $(cat "$out")"
  [ "$(grep -c '^agent: ' "$out")" = 1 ] || fail "the answer is shown twice: $(cat "$out")"
}

chat_streams "$T/chat.out"
start_dev example 127.0.0.1:0
chat_streams "$T/chat2.out"
grep -q "through http://127.0.0.1" "$T/chat2.out.err" || fail "chat did not go through moor dev: $(cat "$T/chat2.out.err")"
stop_dev
kill $FAKE_PID
pass "moor chat prints the model's text as it streams (in process and through moor dev), once"
