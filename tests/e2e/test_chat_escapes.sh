#!/usr/bin/env bash
# Terminal escapes (issue 7, item 10): text from a model reaches `moor chat`
# (in process and through moor dev), `moor logs` and `moor call`'s progress
# with its control characters removed: no OSC retitle, no clear-screen, no
# bell, no CR overwrite, no C1 CSI.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
mkdir -p esc/tools
cat >esc/agent.lua <<'LUA'
local moor = require "moor"
return moor.defineAgent {
  model = moor.testing.script(function()
    return "hello \27]0;pwned\7\27[2J world\r\194\155 31m tail"
  end),
  instructions = "test",
}
LUA
cat >esc/tools/noisy.lua <<'LUA'
local moor = require "moor"
return moor.defineTool {
  description = "progress with escapes",
  inputSchema = moor.schema.object {},
  execute = function()
    coroutine.yield({ text = "\27]0;pwned\7" })
    return { ok = true }
  end,
}
LUA
# has_escapes FILE: ESC, BEL, CR or a C1 CSI (U+009B as UTF-8) anywhere in it
has_escapes() { LC_ALL=C grep -q $'[\x1b\x07\r]\|\xc2\x9b' "$1"; }

printf 'hi\n' | "$MOOR" chat --agent esc >"$T/chat.out" 2>"$T/chat.err" || fail "chat: $(cat "$T/chat.err")"
grep -q '^agent: hello .*world' "$T/chat.out" || fail "no reply shown: $(cat -A "$T/chat.out")"
! has_escapes "$T/chat.out" || fail "moor chat printed control characters: $(cat -A "$T/chat.out")"
grep -q '^agent: hello \]0;pwned\[2J world 31m tail$' "$T/chat.out" || fail "the text around them: $(cat -A "$T/chat.out")"

start_dev esc 127.0.0.1:0
printf 'hi\n' | "$MOOR" chat --agent esc >"$T/chat2.out" 2>"$T/chat2.err" || fail "chat via dev: $(cat "$T/chat2.err")"
grep -q "through http://127.0.0.1" "$T/chat2.err" || fail "chat did not go through moor dev: $(cat "$T/chat2.err")"
grep -q '^agent: hello .*world' "$T/chat2.out" || fail "no reply shown via dev: $(cat -A "$T/chat2.out")"
! has_escapes "$T/chat2.out" || fail "moor chat through dev printed control characters: $(cat -A "$T/chat2.out")"
stop_dev

sid=$("$MOOR" runs --json | sed -n 's/.*"id":"\([a-z]*_[0-9a-f]*\)".*/\1/p' | head -1)
[ -n "$sid" ] || fail "no session run: $("$MOOR" runs)"
for id in $("$MOOR" runs --json | grep -o '"id":"[^"]*"' | cut -d'"' -f4); do
  "$MOOR" logs "$id" >>"$T/logs.out"
done
! has_escapes "$T/logs.out" || fail "moor logs printed control characters: $(cat -A "$T/logs.out")"

"$MOOR" call noisy '{}' --agent esc >"$T/call.out" 2>"$T/call.err" || fail "call: $(cat "$T/call.err")"
grep -q '^progress:' "$T/call.err" || fail "no progress line: $(cat -A "$T/call.err")"
! has_escapes "$T/call.err" || fail "moor call printed control characters: $(cat -A "$T/call.err")"
pass "no control characters from model text or progress reach the terminal"
