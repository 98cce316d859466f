#!/usr/bin/env bash
# What the event streams send (issue 7, items 10, 20, 24):
# - model text with CR (an EventSource takes CR, LF and CRLF as line breaks)
#   cannot forge `event:`/`data:`/`id:` lines, on ?format=text or in JSON;
# - ?format=text sends no empty `data:` lines for internal events;
# - live events carry the same op (and bytes) as the log's replay.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

# An agent whose scripted model answers with CR-laden text.
cp -r "$T/agent" "$T/crlf"
cat >"$T/crlf/agent.lua" <<'LUA'
local moor = require "moor"
return moor.defineAgent {
  instructions = "test",
  model = moor.testing.script { "before\rEvent: x\r\ndata: forged\revent: forged\rid: 999\r\rafter" },
}
LUA
start_dev "$T/crlf" 127.0.0.1:0
req POST /v1/sessions '{"message":"hi"}'
expect 201 "create a session"
S=$(field sessionId)
# Both formats, live (the stream is open before the reply) and replayed.
curl -s -N --max-time 8 "$URL/v1/sessions/$S/stream?format=text" >"$T/text" &
TEXT_PID=$!
curl -s -N --max-time 8 "$URL/v1/sessions/$S/stream" >"$T/json" &
JSON_PID=$!
wait_for grep -q 'after' "$T/text"
wait_for grep -q 'after' "$T/json"
curl -s -N --max-time 2 "$URL/v1/sessions/$S/stream?format=text" >"$T/text2" || true
kill $TEXT_PID $JSON_PID 2>/dev/null || true
wait $TEXT_PID $JSON_PID 2>/dev/null || true
for f in text json text2; do
  if tr -d '\n' <"$T/$f" | grep -q $'\r'; then fail "a raw CR reached the $f stream: $(od -c "$T/$f" | grep -m3 '\\r')"; fi
  # Every line as an EventSource splits them (CR, LF, CRLF) is a field moor wrote.
  tr '\r' '\n' <"$T/$f" | grep -Ev '^$|^(id|event): [A-Za-z0-9_.]+$|^data: ' >"$T/bad.$f" || true
  [ ! -s "$T/bad.$f" ] || fail "$f stream has lines moor did not frame: $(head -3 "$T/bad.$f")"
  tr '\r' '\n' <"$T/$f" | grep -Eq '^event: (x|forged)$' && fail "a forged event line on the $f stream"
  tr '\r' '\n' <"$T/$f" | grep -q '^id: 999$' && fail "a forged id line on the $f stream"
done
grep -qx 'data: agent: before' "$T/text" || fail "the reply's first line: $(cat "$T/text")"
grep -qx 'data: Event: x' "$T/text" || fail "the reply's CR-separated line is not a data line: $(cat "$T/text")"
grep -qx 'data: data: forged' "$T/text" || fail "the forged data line is not inside a data line"
grep -qx 'data: event: forged' "$T/text" || fail "the forged event line is not inside a data line"
grep -qx 'data: after' "$T/text" || fail "the reply's last line: $(cat "$T/text")"
grep -qF '"text":"before\rEvent: x\r\ndata: forged' "$T/json" || fail "the JSON stream does not escape CR: $(grep message.completed -A1 "$T/json")"
pass "CR in model text breaks lines inside data: on ?format=text, and is escaped in JSON"

# 24. No empty data: lines for events without a text line; the turn's
#     boundaries (which moor chat follows) still come as event lines.
grep -A1 '^event: ' "$T/text" | grep -qx 'data: ' && fail "events with only an empty data: line on ?format=text: $(grep -A2 '^event: ' "$T/text" | head -12)"
grep -qx 'data: ' "$T/text" || fail "the reply's empty line (CR CR) is not an empty data line"
grep -qx 'event: turn.started' "$T/text" || fail "no turn.started on ?format=text"
grep -qx 'event: turn.completed' "$T/text" || fail "no turn.completed on ?format=text"
grep -q '^event: step\.' "$T/text" && fail "internal step events on ?format=text"
cmp -s "$T/text" "$T/text2" || fail "?format=text differs live and replayed: $(diff "$T/text" "$T/text2" | head)"
pass "?format=text: no empty data: lines, internal events skipped"
stop_dev

# 20. The same bytes live and replayed: step.result, timer.fired and
#     input.resolved carry their op on the live stream as in the log.
start_dev "$T/example" 127.0.0.1:0
call deploy '{"service":"web","escalateAfter":"300ms"}'
sse "$RUN" "$T/live"
wait_for test -n "$(pending_request "$RUN")"
REQ=$(pending_request "$RUN")
wait_for grep -q '^event: timer.fired$' "$T/live"
req POST "/v1/inputs/$REQ" '{"optionId":"approve"}'
expect 200 "approve"
settled "$RUN" completed
wait $SSE_PID || fail "the live stream did not end cleanly"
curl -s -N --max-time 10 -H 'Last-Event-ID: 0' "$URL/v1/runs/$RUN/events" >"$T/replayed"
for k in step.result timer.fired input.resolved; do
  grep -A1 "^event: $k$" "$T/live" | grep -q '"op":[0-9]' || fail "live $k has no op: $(grep -A1 "^event: $k$" "$T/live")"
done
cmp -s "$T/live" "$T/replayed" || fail "live and replayed streams differ: $(diff "$T/live" "$T/replayed" | head -8)"
stop_dev
pass "live and replayed streams are the same bytes, ops included"
