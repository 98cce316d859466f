#!/usr/bin/env bash
# A tools/call over `moor mcp` from a client without the elicitation
# capability: the ctx.ask stays open for the other channels (no
# elicitation/create is sent; `moor inputs` lists it through the HTTP API
# moor mcp serves on loopback). kill -9 of moor mcp while it waits; a
# restart resumes the run; `moor answer` answers it through the restarted
# process; the run completes and its result is readable (moor runs, logs).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mcp.sh"
cd "$T"
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
PID=
start_mcp() { # start_mcp N: moor mcp reading fifo $T/in.N (held open on fd 3), writing $T/out.N
  mkfifo "$T/in.$1"
  "$MOOR" mcp --agent "$MCP_AGENT" <"$T/in.$1" >"$T/out.$1" 2>>"$T/err" &
  PID=$!
  exec 3>"$T/in.$1"
  echo "$INIT" >&3
  wait_for grep -q '"id":1' "$T/out.$1"
}
pending() { "$MOOR" inputs --json 2>/dev/null | grep -o '"requestId":"req_[a-z0-9_]*"' | head -1 | cut -d'"' -f4; }
has_pending() { [ -n "$(pending)" ]; }

start_mcp 1
echo '{"jsonrpc":"2.0","method":"notifications/initialized"}' >&3
echo '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pick","arguments":{}}}' >&3
wait_for has_pending
REQ=$(pending)
sleep 0.3
grep -q 'elicitation/create' "$T/out.1" && fail "a client without the capability was sent an elicitation"
grep -q '"id":2' "$T/out.1" && fail "the call answered before its question was: $(cat "$T/out.1")"
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
exec 3>&-
RUN=$("$MOOR" runs --tool pick --json | grep -o '"id":"run_[0-9a-f]*"' | head -1 | cut -d'"' -f4)
[ -n "$RUN" ] || fail "no pick run: $("$MOOR" runs)"
"$MOOR" runs --tool pick --json | grep -q '"status":"running"' || fail "the run is not waiting: $("$MOOR" runs)"

start_mcp 2
[ "$(pending)" = "$REQ" ] || fail "after the restart the question is not pending: $("$MOOR" inputs)"
"$MOOR" answer "$REQ" blue >"$T/answer.out" 2>&1 || fail "moor answer failed: $(cat "$T/answer.out")"
wait_for sh -c "'$MOOR' runs --tool pick --json | grep -q '\"status\":\"completed\"'"
exec 3>&-
wait "$PID" 2>/dev/null || true
event_line "$RUN" run.completed | grep -qF '"optionId":"blue"' || fail "wrong result: $("$MOOR" logs "$RUN")"
"$MOOR" runs --tool pick --json | grep -q '"status":"completed"' || fail "not completed: $("$MOOR" runs)"
pass "kill -9 of moor mcp while a call waits on a question; the restart resumes it, moor answer answers, the run completes"
