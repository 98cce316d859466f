#!/usr/bin/env bash
# Issue 9, "What it must show": a session over the real libcurl path against
# the fake model server. The model calls a `task` tool and reads the receipt
# word for word; it answers the person while the task works; the person
# writes again and the model calls moor__task_wait; the host is killed with
# -9 while the task is parked on its sleep and restarted on the same
# database; the task's result then reaches the model exactly once (one
# <task_result> block, one task.settled event) and no step of the task ran
# twice.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
COUNTER="$T/counter.log"
export MOOR_TASK_COUNTER="$COUNTER"

# The agent: one task tool, `backfill`: a step (a counter line), a durable
# sleep, another step (a second counter line), then its result.
mkdir -p "$T/tagent/tools"
cat >"$T/tagent/agent.lua" <<'LUA'
local moor = require "moor"
return moor.defineAgent {
  model = "openai/fake-model",
  instructions = "You run backfills as tasks.",
}
LUA
cat >"$T/tagent/tools/backfill.lua" <<'LUA'
local moor = require "moor"
local s = moor.schema

local function mark(line)
  local f = assert(io.open(assert(os.getenv("MOOR_TASK_COUNTER")), "a"))
  f:write(line, "\n")
  f:close()
  return line
end
local first = moor.step("first", function(table_name) return mark("first " .. table_name) end)
local second = moor.step("second", function(table_name) return mark("second " .. table_name) end)

return moor.defineWorkflowTool {
  description = "Backfill a table (a long job: it runs as a task).",
  inputSchema = s.object { table = s.string() },
  task = function(input)
    first(input.table)
    moor.sleep("5s")
    second(input.table)
    return { backfilled = input.table, rows = 42 }
  end,
}
LUA

# The model, decided by what each request carries (so a repeated request
# would be answered the same way): the result block -> the final text; the
# person's second message -> moor__task_wait; the receipt -> "Working on it.";
# else the task call.
cat >"$T/model.lua" <<'LUA'
return function(req)
  local body = req.body
  if body:find('<task_result id=', 1, true) then return fake.text("The backfill finished: 42 rows.") end
  if body:find('is it done yet', 1, true) then
    return fake.tool_calls({ { id = "call_wait_1", name = "moor__task_wait", arguments = { timeoutSeconds = 120 } } })
  end
  if body:find('Started task backfill-', 1, true) then return fake.text("Working on it.") end
  return fake.tool_calls({ { id = "call_backfill_1", name = "backfill", arguments = { table = "orders" } } })
end
LUA

"$FAKE_MODEL" --script "$T/model.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" \
  >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test-task-key"

# requests: how many model requests the fake server saw.
requests() { grep -c . "$T/model.jsonl" 2>/dev/null || true; }
# request_json N: the body of model request N, as JSON.
request_json() { jq -c --argjson n "$1" 'select(.n == $n) | .body | fromjson' "$T/model.jsonl"; }
# stream_now FILE: the session's stream from its start (what is there now).
stream_now() { curl -s -N --max-time 2 "$URL/v1/sessions/$SID/stream" >"$1" || true; }
has_event() { grep -q "$1" "$T/stream"; }
lines() { grep -c . "$COUNTER" 2>/dev/null || true; }
# seen: what each model request carried (for failure messages).
seen() { jq -c '{n, messages: (.body | fromjson | .messages | map({role, content}))}' "$T/model.jsonl"; }

start_dev "$T/tagent" 127.0.0.1:0
req POST /v1/sessions '{"message": "please backfill the orders table"}'
expect 201 "POST /v1/sessions"
SID=$(field sessionId)
[ -n "$SID" ] || fail "no sessionId in $BODY"
# Follow the stream until the kill (which ends it; at most 60 s).
curl -s -N --max-time 60 "$URL/v1/sessions/$SID/stream" >"$T/stream" &
CURL_PID=$!

# The model called the task and answered the person: the turn is held
# while the task works (request 2 answered "Working on it.").
wait_for has_event '^event: turn.held'
[ "$(requests)" = 2 ] || fail "expected 2 model requests before the second message: $(seen)"
# The tool message the model received next is exactly the receipt.
RECEIPT=$(request_json 2 | jq -r '.messages[] | select(.role == "tool") | .content')
printf '%s\n' "$RECEIPT" | grep -Eqx \
  'Started task backfill-[0-9abcdefghjkmnpqrstvwxyz]{6}\. Its result will arrive in a <task_result> message\.' \
  || fail "the tool message is not the receipt: '$RECEIPT'"
[ "$(printf '%s\n' "$RECEIPT" | grep -c .)" = 1 ] || fail "more than one tool message: $RECEIPT"
TASK_ID=$(printf '%s' "$RECEIPT" | sed -n 's/^Started task \(backfill-[0-9a-z]*\)\..*/\1/p')
[ "$(request_json 2 | jq -r '.messages[] | select(.role == "tool") | .tool_call_id')" = call_backfill_1 ] \
  || fail "the receipt answers another call: $(request_json 2)"
grep -q "\"taskId\":\"$TASK_ID\"" "$T/stream" || fail "no task.started for $TASK_ID: $(cat "$T/stream")"
wait_for grep -qx "first orders" "$COUNTER"
[ "$(count "first orders" "$COUNTER")" = 1 ] || fail "the first step: $(cat "$COUNTER" 2>&1)"
# The person reads the model's answer while the task works: on the stream
# and in the session's transcript.
grep -A1 '^event: message.completed$' "$T/stream" | grep -qF '"text":"Working on it."' \
  || fail "the answer given while the task works is not on the stream: $(cat "$T/stream")"
curl -s --max-time 2 "$URL/v1/sessions/$SID" >"$T/session.json" || true
grep -qF '"text":"Working on it."' "$T/session.json" || fail "not in the transcript: $(cat "$T/session.json")"

# The person writes again while the task works; the model calls
# moor__task_wait, which parks the turn.
req POST "/v1/sessions/$SID" '{"message": "is it done yet?"}'
expect 202 "the second message"
wait_for has_event '"toolName":"moor__task_wait"'
[ "$(requests)" = 3 ] || fail "expected 3 model requests: $(seen)"
# The task is parked on its sleep: its first step ran, its second not yet.
[ "$(lines)" = 1 ] || fail "the task was not parked on its sleep when killed (make the sleep longer?): $(cat "$COUNTER")"
! grep -q '<task_result id=' "$T/model.jsonl" || fail "a result reached the model before the task finished"

kill_dev
wait "$CURL_PID" 2>/dev/null || true
[ "$(lines)" = 1 ] || fail "the counter moved during the kill: $(cat "$COUNTER")"
start_dev "$T/tagent" 127.0.0.1:0

# The sleep ends (its deadline survived the restart), the second step runs,
# the wait returns and the model reads the result and answers.
done_turn() {
  curl -s --max-time 2 "$URL/v1/sessions/$SID" >"$T/session.json" || true
  grep -qF '"text":"The backfill finished: 42 rows."' "$T/session.json"
}
wait_for done_turn
stream_now "$T/stream2"
grep -q '^event: turn.completed' "$T/stream2" || fail "no turn.completed: $(cat "$T/stream2")"

# Each step of the task ran exactly once.
[ "$(count "first orders" "$COUNTER")" = 1 ] || fail "the first step ran again: $(cat "$COUNTER")"
[ "$(count "second orders" "$COUNTER")" = 1 ] || fail "the second step: $(cat "$COUNTER")"
[ "$(lines)" = 2 ] || fail "counter: $(cat "$COUNTER")"
# The person read each answer once, across the restart.
for text in "Working on it." "The backfill finished: 42 rows."; do
  [ "$(grep -oF "\"text\":\"$text\"" "$T/session.json" | wc -l)" = 1 ] || fail "'$text' in the transcript: $(cat "$T/session.json")"
done

# Four model requests, none repeated; only the last carries the result,
# once, as one block, after moor__task_wait's answer.
[ "$(requests)" = 4 ] || fail "model requests: $(seen)"
[ "$(sort "$T/model.jsonl" | sed 's/"n":[0-9]*//' | uniq -d | wc -l)" = 0 ] || fail "a model request repeated"
for n in 1 2 3; do
  [ "$(request_json $n | grep -o '<task_result id=' | wc -l)" = 0 ] || fail "request $n carries a result"
done
LAST=$(request_json 4)
BLOCK="<task_result id=\"$TASK_ID\" tool=\"backfill\" status=\"completed\">"
[ "$(printf '%s' "$LAST" | jq -r '.messages[].content // empty' | grep -o '<task_result id=' | wc -l)" = 1 ] \
  || fail "the results the model read: $(printf '%s' "$LAST" | jq .messages)"
RESULT=$(printf '%s' "$LAST" | jq -r '.messages[] | select(.role == "user") | .content' | grep -F -A1 "$BLOCK") \
  || fail "no $BLOCK in the last request: $(printf '%s' "$LAST" | jq .messages)"
printf '%s' "$RESULT" | grep -qF '"backfilled":"orders"' || fail "the result block lacks the output: $RESULT"
WAIT_TEXT=$(printf '%s' "$LAST" | jq -r '.messages[] | select(.role == "tool" and .tool_call_id == "call_wait_1") | .content')
printf '%s' "$WAIT_TEXT" | grep -qF "$TASK_ID completed; its result follows." \
  || fail "moor__task_wait's answer: '$WAIT_TEXT'"

# The stream: one task.started, one task.settled (completed), one task.result.
for kind in task.started task.settled task.result; do
  n=$(grep -c "^event: $kind\$" "$T/stream2" || true)
  [ "$n" = 1 ] || fail "$n $kind events on the stream (1 expected): $(cat "$T/stream2")"
done
grep -A1 '^event: task.settled$' "$T/stream2" | grep -q '"status":"completed"' \
  || fail "task.settled is not completed: $(grep -A1 '^event: task.settled' "$T/stream2")"
stop_dev
kill "$FAKE_PID"
wait "$FAKE_PID" || fail "the fake model server exited $?: $(cat "$T/fake.err")"
pass "session: task call -> receipt -> 'Working on it.' -> moor__task_wait -> kill -9 during the task's sleep -> restart -> one <task_result>, one task.settled, each step once"
