#!/usr/bin/env bash
# The CLI for people (issue 14 item 7): `moor inputs` lists the pending
# questions with their request ids; `moor call` parked without a terminal
# says the request id it waits on; on a terminal it shows what a long wait
# is ("waiting: sleep until HH:MM:SS (3s)", "waiting: question req_...") and
# how to come back after Ctrl-C; `moor resume` on a terminal shows what every
# run waits on before a long sleep; `moor runs --status waiting|completed|...`,
# `--tool NAME`, `--limit N` and `--json` on every listing. (`script` gives a
# command a pseudo-terminal.)
. "$(dirname "$0")/lib.sh"
cd "$T"
cat >"$T/agent/tools/ask_once.lua" <<'LUA'
local moor = require "moor"
return moor.defineWorkflowTool {
  description = "Test tool: one question, no deadline.",
  inputSchema = moor.schema.object { prompt = moor.schema.optional(moor.schema.string()) },
  execute = function(input, ctx)
    local a = ctx.ask { prompt = input.prompt or "Go?", options = { { id = "approve", label = "Go" }, { id = "no", label = "No" } } }
    return { answer = a.optionId }
  end,
}
LUA
cat >"$T/agent/tools/nap_then_ask.lua" <<'LUA'
local moor = require "moor"
return moor.defineWorkflowTool {
  description = "Test tool: a 3 s sleep, then a question.",
  inputSchema = moor.schema.object {},
  execute = function(_, ctx)
    moor.sleep("3s")
    local a = ctx.ask { prompt = "Ship it?", options = { { id = "yes", label = "Yes" }, { id = "no", label = "No" } } }
    return { answer = a.optionId }
  end,
}
LUA

# No questions yet.

"$MOOR" call three_steps "{\"witness\":\"$T/w\",\"sleep\":\"0s\"}" >/dev/null 2>&1 || fail "three_steps failed"
[ "$("$MOOR" inputs)" = "no pending questions" ] || fail "inputs with none pending: $("$MOOR" inputs)"
[ "$("$MOOR" inputs --json)" = "[]" ] || fail "inputs --json with none pending: $("$MOOR" inputs --json)"

# Parked without a terminal: the request id it waits on, and how to answer.
set +e
"$MOOR" call ask_once '{"prompt":"Deploy v2?\nreally"}' </dev/null >"$T/out1" 2>"$T/err1"; st=$?
set -e
[ $st = 1 ] || fail "a parked call exited $st: $(cat "$T/err1")"
ask=$(run_id_from "$T/err1")
req=$(sed -n 's/^waiting: question \(req_[0-9a-f_]*\)$/\1/p' "$T/err1")
[ -n "$req" ] || fail "moor call did not print the request id it waits on: $(cat "$T/err1")"
grep -qF "answer it: moor answer $req OPTION (or --text TEXT)" "$T/err1" || fail "no answer hint: $(cat "$T/err1")"

# moor inputs: that request, its run and tool, the prompt's first line.
"$MOOR" inputs >"$T/inputs" || fail "moor inputs exited $?"
head -1 "$T/inputs" | grep -q '^REQUEST  *RUN  *TOOL  *KIND  *PROMPT$' || fail "no header: $(cat "$T/inputs")"
grep -q "^$req  *$ask  *ask_once  *question  *Deploy v2?$" "$T/inputs" || fail "the question is not listed: $(cat "$T/inputs")"
"$MOOR" inputs --json >"$T/inputs.json"
lua5.4 - "$T/inputs.json" "$req" "$ask" <<'LUA' || fail "moor inputs --json: $(cat "$T/inputs.json")"
local f = io.open(arg[1]); local t = f:read("a"); f:close()
local n = select(2, t:gsub("\"requestId\":", ""))
assert(n == 1, "one input expected: " .. t)
for _, k in ipairs { '"requestId":"' .. arg[2] .. '"', '"runId":"' .. arg[3] .. '"', '"tool":"ask_once"',
  '"kind":"question"', '"prompt":"Deploy v2?\\nreally"', '"created":"20' } do
  assert(t:find(k, 1, true), "inputs --json lacks " .. k .. ": " .. t)
end
LUA

# A hook waiter, and a sleeper whose host was killed mid-sleep.
"$MOOR" call hook_wait '{"token":"order-7"}' </dev/null >/dev/null 2>&1 || true
hook=$("$MOOR" runs --tool hook_wait --json | sed -n 's/.*"id":"\(run_[0-9a-f]*\)".*/\1/p')
"$MOOR" call sleep_then_hold "{\"witness\":\"$T/w2\",\"sleep\":\"12s\",\"hold\":0}" </dev/null >/dev/null 2>"$T/err3" &
pid=$!
wait_for grep -q '^run run_' "$T/err3"
sleeper=$(run_id_from "$T/err3")
wait_for sh -c "'$MOOR' logs '$sleeper' | grep -q timer.scheduled"
kill -9 $pid; wait $pid 2>/dev/null || true
done_run=$("$MOOR" runs --status completed --json | sed -n 's/.*"id":"\(run_[0-9a-f]*\)".*/\1/p')
[ -n "$done_run" ] || fail "runs --status completed --json: $("$MOOR" runs --status completed --json)"

# --status waiting: the three parked runs, not the completed one.
"$MOOR" runs --status waiting >"$T/waiting"
for r in "$ask" "$hook" "$sleeper"; do grep -q "^$r " "$T/waiting" || fail "$r is not listed as waiting: $(cat "$T/waiting")"; done
grep -q "^$done_run " "$T/waiting" && fail "a completed run is listed as waiting"
[ "$(wc -l <"$T/waiting")" = 4 ] || fail "runs --status waiting: $(cat "$T/waiting")"
"$MOOR" runs --status completed | grep -q "^$done_run .* completed " || fail "runs --status completed: $("$MOOR" runs --status completed)"
[ "$("$MOOR" runs --status completed | wc -l)" = 2 ] || fail "runs --status completed lists others"
# --tool, --limit (the newest N, oldest first) and --json together.
[ "$("$MOOR" runs --tool ask_once | tail -n +2 | cut -d' ' -f1)" = "$ask" ] || fail "runs --tool ask_once: $("$MOOR" runs --tool ask_once)"
[ "$("$MOOR" runs --tool nothing_such | wc -l)" = 1 ] || fail "runs --tool of no run lists some"
[ "$("$MOOR" runs --limit 1 | tail -n +2 | cut -d' ' -f1)" = "$sleeper" ] || fail "runs --limit 1: $("$MOOR" runs --limit 1)"
[ "$("$MOOR" runs --limit 2 | tail -n +2 | cut -d' ' -f1 | tr '\n' ' ')" = "$hook $sleeper " ] || fail "runs --limit 2: $("$MOOR" runs --limit 2)"
j=$("$MOOR" runs --status waiting --tool hook_wait --limit 5 --json)
case $j in "[{\"id\":\"$hook\","*"\"status\":\"running\""*"}]") ;; *) fail "runs --status waiting --tool hook_wait --json: $j" ;; esac
[ "$(printf '%s' "$j" | grep -o '"id":' | wc -l)" = 1 ] || fail "more than one run: $j"
# Bad values: exit 2 and what is wanted.
set +e
"$MOOR" runs --status sleeping >/dev/null 2>"$T/bad1"; s1=$?
"$MOOR" runs --limit 0 >/dev/null 2>"$T/bad2"; s2=$?
"$MOOR" runs --limit ten >/dev/null 2>"$T/bad3"; s3=$?
"$MOOR" inputs extra >/dev/null 2>"$T/bad4"; s4=$?
set -e
[ $s1 = 2 ] && grep -q "status must be running, waiting, completed, failed or cancelled, not 'sleeping'" "$T/bad1" \
  || fail "runs --status sleeping: $s1 $(cat "$T/bad1")"
[ $s2 = 2 ] && grep -q "limit must be a number of runs (1 or more), not '0'" "$T/bad2" || fail "--limit 0: $s2 $(cat "$T/bad2")"
[ $s3 = 2 ] && grep -q "not 'ten'" "$T/bad3" || fail "--limit ten: $s3 $(cat "$T/bad3")"
[ $s4 = 2 ] && grep -q "inputs takes no arguments" "$T/bad4" || fail "inputs extra: $s4 $(cat "$T/bad4")"

# moor resume on a terminal: before sleeping until the sleeper's timer, it
# says what every run waits on; the sleeper then finishes.
script -qefc "$MOOR resume" "$T/ts1" >"$T/resume.tty" 2>&1 </dev/null || fail "resume: $(cat "$T/resume.tty")"
tr -d '\r' <"$T/resume.tty" >"$T/resume.txt"
grep -q "^$sleeper (sleep_then_hold) waits on a sleep until [0-9:]* ([0-9]*s)$" "$T/resume.txt" \
  || fail "resume on a terminal did not show the sleep: $(cat "$T/resume.txt")"
grep -q "^$ask (ask_once) waits on a question $req" "$T/resume.txt" || fail "resume: no question: $(cat "$T/resume.txt")"
grep -qF "(Ctrl-C stops; the runs stay recorded and 'moor resume' picks them up)" "$T/resume.txt" \
  || fail "resume: no Ctrl-C hint: $(cat "$T/resume.txt")"
grep -q "^$sleeper completed" "$T/resume.txt" || fail "the sleeper did not complete: $(cat "$T/resume.txt")"

# moor call on a terminal: the sleep, then the question, each as it begins.
{ sleep 5; printf 'yes\n'; sleep 1; } |
  script -qefc "$MOOR call nap_then_ask" "$T/ts2" >"$T/call.tty" 2>&1 || fail "call on a terminal: $(cat "$T/call.tty")"
tr -d '\r' <"$T/call.tty" >"$T/call.txt"
grep -q '^waiting: sleep until [0-9][0-9]:[0-9][0-9]:[0-9][0-9] ([23]s)$' "$T/call.txt" || fail "no sleep line: $(cat "$T/call.txt")"
grep -q '^waiting: question req_[0-9a-f_]*$' "$T/call.txt" || fail "no question line: $(cat "$T/call.txt")"
[ "$(grep -c "Ctrl-C leaves the run recorded as it is; 'moor resume' or 'moor dev' picks it up" "$T/call.txt")" = 2 ] \
  || fail "no Ctrl-C hint for each wait: $(cat "$T/call.txt")"
grep -q '"answer":"yes"' "$T/call.txt" || fail "not answered: $(cat "$T/call.txt")"
pass "moor inputs, waiting lines on and off a terminal, runs --status/--tool/--limit/--json"
