#!/usr/bin/env bash
# `moor mcp`'s protocol at the byte level: every line on stdout is one
# JSON-RPC 2.0 message, whatever a tool prints (its stray stdout, even a
# line that looks like JSON-RPC, goes to stderr); malformed JSON (-32700),
# an invalid request or a batch (-32600), an unknown method (-32601), an
# unsupported protocol version and an unknown tool (-32602) each get the
# specification's error; invalid arguments are an isError result naming the
# field; a notification gets no answer.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mcp.sh"
cd "$T"
command -v node >/dev/null || fail "node is needed (./.ci/deps installs it)"
{
  echo '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
  echo '{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
  echo '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  echo '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}'
  echo '{"jsonrpc":"2.0","id":4,"method":"tools/list"'
  echo '[{"jsonrpc":"2.0","id":5,"method":"ping"}]'
  echo '{"id":6,"method":"ping"}'
  echo '{"jsonrpc":"2.0","id":7,"method":"resources/teleport"}'
  echo '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"nope","arguments":{}}}'
  echo '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"message":"x","times":0}}}'
  echo '{"jsonrpc":"2.0","id":10,"method":"ping"}'
  sleep 3
} | timeout 30 "$MOOR" mcp --agent "$MCP_AGENT" >"$T/out" 2>"$T/err" || fail "moor mcp failed: $(cat "$T/err")"
grep -q '^stray print from a tool$' "$T/err" || fail "the tool's print did not reach stderr: $(cat "$T/err")"
grep -q '"id":999' "$T/err" || fail "the tool's JSON-looking line did not reach stderr"
node - "$T/out" <<'JS' || fail "the stream: $(cat "$T/out")"
const lines = require("fs").readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean);
const msgs = lines.map((l) => JSON.parse(l)); // every line parses: nothing but protocol on stdout
const byId = {};
let nulls = [];
for (const m of msgs) {
  if (m.jsonrpc !== "2.0") throw new Error("not JSON-RPC 2.0: " + JSON.stringify(m));
  if (m.id === null) nulls.push(m); else byId[m.id] = m;
}
const want = (c, what) => { if (!c) throw new Error(what); };
want(byId[1]?.error?.code === -32602 && byId[1].error.message === "Unsupported protocol version"
  && byId[1].error.data.requested === "1999-01-01" && byId[1].error.data.supported.includes("2025-11-25"),
  "an unknown version: -32602 Unsupported protocol version with the supported ones");
want(byId[2]?.result?.protocolVersion === "2025-06-18", "2025-06-18 is accepted");
want(byId[3]?.result?.structuredContent?.shout === "HI", "echo answered");
want(!byId[999], "the tool's line reached the protocol");
want(nulls.length === 3 && nulls[0].error.code === -32700 && nulls[1].error.code === -32600
  && nulls[2].error.code === -32600, "malformed JSON -32700, a batch and a message without jsonrpc -32600: "
  + JSON.stringify(nulls));
want(byId[7]?.error?.code === -32601, "an unknown method: -32601");
want(byId[8]?.error?.code === -32602 && /nope/.test(byId[8].error.message), "an unknown tool: -32602");
want(byId[9]?.result?.isError === true && /times/.test(byId[9].result.content[0].text), "invalid arguments: isError naming times");
want(byId[10]?.result && Object.keys(byId[10].result).length === 0, "ping");
want(msgs.length === 10, "one answer per request, none for the notification: " + msgs.length);
JS
# stdin that is a file (or /dev/null) is refused with the cause, not waited on
st=0
"$MOOR" mcp --agent "$MCP_AGENT" </dev/null >"$T/null.out" 2>"$T/null.err" || st=$?
[ $st = 1 ] && grep -q 'reads JSON-RPC messages from a pipe, a socket or a terminal on stdin, not a file' "$T/null.err" \
  || fail "moor mcp </dev/null: exit $st, $(cat "$T/null.err")"
[ ! -s "$T/null.out" ] || fail "moor mcp </dev/null wrote to stdout: $(cat "$T/null.out")"
pass "moor mcp's stdout is only protocol, and bad messages get the specification's errors"
