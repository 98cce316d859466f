#!/usr/bin/env bash
# MCP's streamable HTTP transport at /mcp in `moor dev` (with MOOR_API_TOKEN
# set): the official SDK client runs the same checks as over stdio
# (tests/mcp/client.mjs, with the Mcp-Session-Id the server gives); curl
# probes what the specification requires of the endpoint: a foreign Origin
# is 403, no token 401, no session id 400, an unknown one 404, GET 405,
# DELETE ends a session (404 after); past MOOR_MCP_MAX_SESSIONS the least
# recently used idle session is ended to make room.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
. "$(dirname "$0")/mcp.sh"
cd "$T"
need_sdk
export MOOR_API_TOKEN=mcp-http-test-token-0123456789abcdef0123
start_dev "$MCP_AGENT" 127.0.0.1:0
timeout 120 node "$MOOR_SRC/tests/mcp/client.mjs" "$SDK_MODULES" "$T/witness" http "$URL/mcp" "$MOOR_API_TOKEN" \
  >"$T/client.out" 2>"$T/client.err" \
  || fail "the SDK client's checks over streamable HTTP: $(grep -v '^ok:' "$T/client.out"; tail -20 "$T/client.err")"
grep -q '^all MCP checks passed$' "$T/client.out" || fail "not all checks ran: $(cat "$T/client.out")"

AUTH="Authorization: Bearer $MOOR_API_TOKEN"
J="Content-Type: application/json"
A="Accept: application/json, text/event-stream"
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
code() { curl -s -o "$T/body" -w '%{http_code}' "$@"; }
[ "$(code -X POST -H "$AUTH" -H "$J" -H "$A" -H 'Origin: http://evil.example' -d "$INIT" "$URL/mcp")" = 403 ] \
  || fail "a foreign Origin on /mcp is not refused: $(cat "$T/body")"
[ "$(code -X POST -H "$J" -H "$A" -d "$INIT" "$URL/mcp")" = 401 ] || fail "/mcp without the token: $(cat "$T/body")"
[ "$(code -X POST -H "$AUTH" -H "$J" -H "$A" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "$URL/mcp")" = 400 ] \
  || fail "no Mcp-Session-Id: $(cat "$T/body")"
[ "$(code -X POST -H "$AUTH" -H "$J" -H "$A" -H 'Mcp-Session-Id: nope' -d '{"jsonrpc":"2.0","id":2,"method":"ping"}' \
  "$URL/mcp")" = 404 ] || fail "an unknown Mcp-Session-Id: $(cat "$T/body")"
[ "$(code -H "$AUTH" -H 'Accept: text/event-stream' "$URL/mcp")" = 405 ] || fail "GET /mcp: $(cat "$T/body")"
# a session from our own Origin (the server's own address is same-origin)
curl -s -D "$T/h" -o "$T/body" -X POST -H "$AUTH" -H "$J" -H "$A" -H "Origin: $URL" -d "$INIT" "$URL/mcp"
SID=$(tr -d '\r' <"$T/h" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
[ -n "$SID" ] || fail "initialize gave no Mcp-Session-Id: $(cat "$T/h" "$T/body")"
grep -q '"protocolVersion":"2025-11-25"' "$T/body" || fail "initialize: $(cat "$T/body")"
[ "$(code -X POST -H "$AUTH" -H "$J" -H "$A" -H "Mcp-Session-Id: $SID" -d '{"jsonrpc":"2.0","id":2,"method":"nope/nope"}' \
  "$URL/mcp")" = 200 ] && grep -q '"code":-32601' "$T/body" || fail "an unknown method over HTTP: $(cat "$T/body")"
[ "$(code -X DELETE -H "$AUTH" -H "Mcp-Session-Id: $SID" "$URL/mcp")" = 200 ] || fail "DELETE /mcp: $(cat "$T/body")"
[ "$(code -X POST -H "$AUTH" -H "$J" -H "$A" -H "Mcp-Session-Id: $SID" -d '{"jsonrpc":"2.0","id":3,"method":"ping"}' \
  "$URL/mcp")" = 404 ] || fail "a deleted session still answers: $(cat "$T/body")"
stop_dev

# MOOR_MCP_MAX_SESSIONS=2: a third initialize ends the least recently used idle session (404 after), not the others
MOOR_MCP_MAX_SESSIONS=2 start_dev "$MCP_AGENT" 127.0.0.1:0
init_sid() {
  curl -s -D "$T/h" -o "$T/body" -X POST -H "$AUTH" -H "$J" -H "$A" -d "$INIT" "$URL/mcp"
  tr -d '\r' <"$T/h" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p'
}
ping_sid() { code -X POST -H "$AUTH" -H "$J" -H "$A" -H "Mcp-Session-Id: $1" -d '{"jsonrpc":"2.0","id":9,"method":"ping"}' "$URL/mcp"; }
S1=$(init_sid); S2=$(init_sid)
[ "$(ping_sid "$S1")" = 200 ] || fail "session 1: $(cat "$T/body")" # (S2 is now the least recently used)
S3=$(init_sid)
[ -n "$S3" ] || fail "a session past the cap was refused: $(cat "$T/body")"
[ "$(ping_sid "$S2")" = 404 ] || fail "the least recently used session was not the one ended"
[ "$(ping_sid "$S1")" = 200 ] && [ "$(ping_sid "$S3")" = 200 ] || fail "a recently used session was ended"
stop_dev
pass "streamable HTTP at /mcp: the SDK client's checks, the Origin check, the token, sessions"
