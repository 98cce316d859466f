#!/usr/bin/env bash
# Invalid UTF-8 (issue 7, item 27): a request body that is not UTF-8 is
# refused (400 bad_json, with the byte offset); bytes from outside that are
# not JSON's business (a webhook body in Latin-1) and an author's non-UTF-8
# Lua string are recorded with U+FFFD in place of each bad byte, so
# GET /v1/runs/{id}, the SSE stream and `moor logs --json` stay valid JSON.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
cat >"$T/example/tools/utf8_probe.lua" <<'LUA'
local moor = require "moor"
return moor.defineWorkflowTool {
  description = "Test tool: returns a webhook's body beside a Latin-1 string of its own.",
  inputSchema = moor.schema.object {},
  execute = function()
    local wh = moor.createWebhook()
    coroutine.yield { url = wh.url }
    local request = wh:await()
    return { body = request.body, own = "caf\233", ["k\255"] = 1 }
  end,
}
LUA
# valid_json FILE: FILE is UTF-8 and JSON (each line, with --lines; SSE data lines with --sse)
valid_json() {
  python3 - "$@" <<'PY'
import json, sys
mode, path = (sys.argv[1], sys.argv[2]) if len(sys.argv) > 2 else ("--whole", sys.argv[1])
text = open(path, "rb").read().decode("utf-8")  # strict: raises on invalid UTF-8
if mode == "--sse":
    for line in text.splitlines():
        if line.startswith("data: "):
            json.loads(line[6:])
else:
    json.loads(text)
PY
}
start_dev example 127.0.0.1:0

# A call whose input is not UTF-8: 400 bad_json naming the byte.
CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary $'{"witness":"caf\xe9","sleep":"0s"}' "$URL/v1/tools/three_steps/calls")
BODY=$(cat "$T/resp")
expect_error 400 bad_json "a body with invalid UTF-8"
printf '%s' "$BODY" | grep -q "invalid UTF-8 in string" || fail "message: $BODY"
printf '%s' "$BODY" | grep -q "byte 15" || fail "no byte offset: $BODY"
valid_json "$T/resp" || fail "the 400 itself is not valid JSON"
"$MOOR" runs --json | grep -q three_steps && fail "a run was started from the refused body"

# A webhook body in Latin-1 and an author's own Latin-1 string.
call utf8_probe '{}'
wait_for sh -c "'$MOOR' logs $RUN --json | grep -q '\"url\":'"
hook=$("$MOOR" logs "$RUN" --json | grep -o '"url":"[^"]*"' | head -1 | cut -d'"' -f4)
[ -n "$hook" ] || fail "no webhook url in the log"
hook_path="/${hook#http://*/}"
CODE=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Content-Type: text/plain' \
  --data-binary $'na\xefve \xff' "$URL$hook_path")
[ "$CODE" = 202 ] || fail "the Latin-1 webhook delivery got $CODE: $(cat "$T/resp")"
settled "$RUN" completed
curl -s "$URL/v1/runs/$RUN" >"$T/run.json"
valid_json "$T/run.json" || fail "GET /v1/runs/$RUN is not valid UTF-8 JSON: $(cat -A "$T/run.json")"
grep -qF $'"body":"na\xef\xbf\xbdve \xef\xbf\xbd"' "$T/run.json" || fail "webhook body not with U+FFFD: $(cat "$T/run.json")"
grep -qF $'"own":"caf\xef\xbf\xbd"' "$T/run.json" || fail "own string not with U+FFFD: $(cat "$T/run.json")"
curl -s -N --max-time 3 "$URL/v1/runs/$RUN/events" >"$T/sse.txt" || true
grep -q '^data: ' "$T/sse.txt" || fail "no SSE events: $(cat "$T/sse.txt")"
valid_json --sse "$T/sse.txt" || fail "the SSE stream has invalid JSON: $(cat -A "$T/sse.txt")"
"$MOOR" logs "$RUN" --json >"$T/logs.json"
valid_json "$T/logs.json" || fail "moor logs --json is not valid UTF-8 JSON"
stop_dev
pass "invalid UTF-8 refused in requests (400 with the byte), replaced by U+FFFD in what is recorded"
