#!/usr/bin/env bash
# `moor mcp` driven by the official MCP TypeScript SDK client over stdio
# (tests/mcp/client.mjs): initialize (2025-11-25), tools/list with the
# schemas and annotations as declared, a plain tool (which prints to stdout),
# invalid arguments, a failing and an unknown tool, an image part, a workflow
# with a progress token and its notifications, ctx.ask answered through the
# elicitation handler (accept with an option and with text, decline,
# cancel), and a cancelled call whose cleanup step runs once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mcp.sh"
cd "$T"
need_sdk
timeout 120 node "$MOOR_SRC/tests/mcp/client.mjs" "$SDK_MODULES" "$T/witness" stdio \
  "$MOOR" mcp --agent "$MCP_AGENT" --db "$DB" >"$T/client.out" 2>"$T/client.err" \
  || fail "the SDK client's checks over stdio: $(grep -v '^ok:' "$T/client.out"; tail -20 "$T/client.err")"
grep -q '^all MCP checks passed$' "$T/client.out" || fail "not all checks ran: $(cat "$T/client.out")"
# the tool's stray stdout went to stderr, not into the protocol
grep -q '^stray print from a tool$' "$T/client.err" || fail "the tool's print went nowhere: $(cat "$T/client.err")"
# the runs are durable runs like any: moor runs lists them
"$MOOR" runs --db "$DB" --tool counted --json | grep -q '"status":"completed"' || fail "counted's run is not recorded"
"$MOOR" runs --db "$DB" --tool wait_cleanup --json | grep -q '"status":"cancelled"' || fail "wait_cleanup's run not cancelled"
pass "the MCP SDK client drives moor mcp over stdio: $(grep -c '^ok:' "$T/client.out") checks"
