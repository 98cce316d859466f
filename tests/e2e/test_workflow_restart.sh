#!/usr/bin/env bash
# Issue 10, "What it must show": the seed's fan-out program in Lua over the
# real libcurl path against the fake model server. The root model calls the
# `workflow` tool with a program that runs two ctx.agent calls in ctx.all
# (one per subagent) and combines their replies; each subagent's model calls
# a tool that asks the person a question, so both children park. While both
# questions are pending the host is killed with -9 and restarted on the same
# database; the questions are answered (one with POST /v1/inputs/{id}, one
# with inputResponses on the root session) and the program's result reaches
# the root model in one <task_result> block, with each child session opened
# exactly once and no step run twice. A second session is killed with one
# child answered and the other parked; a third runs ctx.race of the two,
# killed while both are parked. Then `moor call workflow` from the
# command line: a result on stdout, and a syntax error with its line.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
COUNTER="$T/counter.log"
export MOOR_WF_COUNTER="$COUNTER"

# The agent: a root agent with the workflow tool, and two hidden subagents,
# alpha and beta, each with one tool, ask_person: a step (a counter line),
# a question to the person, another step (a second counter line).
W="$T/wagent"
mkdir -p "$W/tools" "$W/subagents/alpha/tools" "$W/subagents/beta/tools"
cat >"$W/agent.lua" <<'LUA'
local moor = require "moor"
return moor.defineAgent {
  model = "openai/fake-root",
  instructions = "You run workflows; a program may call the subagents alpha and beta.",
}
LUA
echo 'return require("moor.tools.workflow") { maxSubagents = 4 }' >"$W/tools/workflow.lua"
for who in alpha beta; do
  cat >"$W/subagents/$who/agent.lua" <<LUA
local moor = require "moor"
return moor.defineAgent {
  model = "openai/fake-$who",
  description = "The $who specialist",
  instructions = "You are $who; ask the person when you must choose.",
  tool = false,
}
LUA
  cat >"$W/subagents/$who/tools/ask_person.lua" <<LUA
local moor = require "moor"
local s = moor.schema

local function mark(line)
  local f = assert(io.open(assert(os.getenv("MOOR_WF_COUNTER")), "a"))
  f:write(line, "\n")
  f:close()
  return line
end
local before = moor.step("before", function(q) return mark("asked $who " .. q) end)
local after = moor.step("after", function(a) return mark("answered $who " .. a) end)

return moor.defineWorkflowTool {
  description = "Ask the person to choose.",
  inputSchema = s.object { question = s.string() },
  execute = function(input, ctx)
    before(input.question)
    local a = ctx.ask { prompt = "$who: " .. input.question, display = "select",
      options = { { id = "eu", label = "EU" }, { id = "us", label = "US" },
                  { id = "small", label = "Small" }, { id = "large", label = "Large" } } }
    if a.status ~= "answered" then return { answer = a.status } end -- (withdrawn: its turn was cancelled)
    after(a.optionId)
    return { answer = a.optionId }
  end,
}
LUA
done

# The models, told apart by the request's model, each decided by what the
# request carries (a repeated request would get the same answer). Root: the
# result block -> the final text; the receipt -> "Working on it."; else the
# workflow call. A child: its tool's result -> "<who> chose <answer>"; else
# the ask_person call.
cat >"$T/model.lua" <<'LUA'
-- P: "second: " or "race: " in the second and third sessions (their
-- person's message starts so), which the program passes on to the
-- children, so no request repeats. "race: " runs RACE.
local RACE = [[
local v, i = ctx.race {
  function() return ctx.agent("alpha", { message = "race: pick a region" }) end,
  function() return ctx.agent("beta", { message = "race: pick a size" }) end,
}
return { first = i, value = v }
]]
local PROGRAM = [[
local r = ctx.all {
  function() return ctx.agent("alpha", { message = "%spick a region" }) end,
  function() return ctx.agent("beta", { message = "%spick a size" }) end,
}
print("both replied")
return r[1] .. " + " .. r[2]
]]
return function(req)
  local model, body = req.json.model, req.body
  local said = fake.last_user_text(req) or ""
  local p = said:match("^second: ") or said:match("^race: ") or ""
  if model == "fake-root" then
    if body:find('<task_result id=', 1, true) then return fake.text("Both answered.") end
    if body:find('Started task workflow-', 1, true) then return fake.text("Working on it.") end
    local lua = p == "race: " and RACE or PROGRAM:format(p, p)
    return fake.tool_calls({ { id = "call_wf_1", name = "workflow", arguments = { lua = lua } } })
  end
  local who = model:match("^fake%-(%a+)$")
  for _, r in ipairs(fake.tool_results(req)) do
    if r.name == "ask_person" then return fake.text(who .. " chose " .. fake.json.decode(r.content).answer) end
  end
  local q = p .. (who == "alpha" and "region?" or "size?")
  return fake.tool_calls({ { id = "call_ask_" .. who, name = "ask_person", arguments = { question = q } } })
end
LUA

"$FAKE_MODEL" --script "$T/model.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" \
  >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test-workflow-key"

# requests [MODEL]: how many model requests the fake server saw (for MODEL).
requests() {
  if [ $# = 0 ]; then grep -c . "$T/model.jsonl" 2>/dev/null || true
  else jq -c --arg m "$1" 'select((.body | fromjson | .model) == $m)' "$T/model.jsonl" 2>/dev/null | grep -c . || true; fi
}
# root_request K [WORDS]: the body of the root model's K-th request (of the
# session whose person's message has WORDS), as JSON.
root_request() {
  jq -c --arg w "${2-pick a region and a size}" \
    'select((.body | fromjson | .model) == "fake-root") | .body | select(contains($w)) | fromjson' \
    "$T/model.jsonl" | sed -n "$1p"
}
seen() { jq -c '{n, messages: (.body | fromjson | [.model, (.messages | map({role, content}))])}' "$T/model.jsonl"; }
lines() { grep -c . "$COUNTER" 2>/dev/null || true; }
# inputs_json: GET /v1/inputs's body; n_inputs: how many are pending.
inputs_json() { req GET /v1/inputs; expect 200 "GET /v1/inputs"; printf '%s' "$BODY"; }
n_inputs() { inputs_json | jq '.inputs | length'; }
two_inputs() { [ "$(n_inputs)" = 2 ]; }
# request_for WHO [QUESTION]: the requestId of WHO's pending question.
request_for() {
  inputs_json | jq -r --arg p "$1: ${2-}" '.inputs[] | select(.request.prompt | startswith($p)) | .requestId'
}
one_input() { [ "$(n_inputs)" = 1 ]; }
# runs_of TOOL: how many runs of TOOL GET /v1/runs lists.
runs_of() {
  req GET /v1/runs
  expect 200 "GET /v1/runs"
  printf '%s' "$BODY" | jq --arg t "$1" '[.runs[] | select(.tool == $t)] | length'
}

start_dev "$W" 127.0.0.1:0
req POST /v1/sessions '{"message": "pick a region and a size"}'
expect 201 "POST /v1/sessions"
SID=$(field sessionId)
[ -n "$SID" ] || fail "no sessionId in $BODY"
curl -s -N --max-time 60 "$URL/v1/sessions/$SID/stream" >"$T/stream" &
CURL_PID=$!

# Both children park on their questions (the root turn is held meanwhile).
wait_for two_inputs
wait_for grep -q '^event: turn.held' "$T/stream"
RA=$(request_for alpha)
RB=$(request_for beta)
[ -n "$RA" ] && [ -n "$RB" ] && [ "$RA" != "$RB" ] || fail "the two questions: $(inputs_json)"
inputs_json | jq -e --arg s "$SID" '[.inputs[] | select(.sessionId == $s)] | length == 2' >/dev/null \
  || fail "the questions are not shown on the root session: $(inputs_json)"
[ "$(count "asked alpha region?" "$COUNTER")" = 1 ] && [ "$(count "asked beta size?" "$COUNTER")" = 1 ] \
  && [ "$(lines)" = 2 ] || fail "before the kill, the counter: $(cat "$COUNTER" 2>&1)"
RECEIPT=$(root_request 2 | jq -r '.messages[] | select(.role == "tool") | .content')
printf '%s\n' "$RECEIPT" | grep -Eqx \
  'Started task workflow-[0-9abcdefghjkmnpqrstvwxyz]{6}\. Its result will arrive in a <task_result> message\.' \
  || fail "the workflow call's tool message is not the receipt: '$RECEIPT'"
TASK_ID=$(printf '%s' "$RECEIPT" | sed -n 's/^Started task \(workflow-[0-9a-z]*\)\..*/\1/p')
[ "$(requests fake-root)" = 2 ] && [ "$(requests fake-alpha)" = 1 ] && [ "$(requests fake-beta)" = 1 ] \
  || fail "model requests before the kill: $(seen)"
[ "$(runs_of moor__session)" = 3 ] || fail "sessions before the kill (root + 2 children): $BODY"
! grep -q '<task_result id=' "$T/model.jsonl" || fail "a result reached the model before the answers"

kill_dev
wait "$CURL_PID" 2>/dev/null || true
start_dev "$W" 127.0.0.1:0

# After the restart the same two questions are pending; answer them.
wait_for two_inputs
[ "$(request_for alpha)" = "$RA" ] && [ "$(request_for beta)" = "$RB" ] \
  || fail "the questions changed across the restart: $RA $RB -> $(inputs_json)"
req POST "/v1/inputs/$RA" '{"optionId": "eu"}'
expect 200 "POST /v1/inputs/$RA"
req POST "/v1/sessions/$SID" "{\"inputResponses\": [{\"requestId\": \"$RB\", \"optionId\": \"large\"}]}"
expect 202 "inputResponses for $RB"

done_turn() {
  curl -s --max-time 2 "$URL/v1/sessions/$SID" >"$T/session.json" || true
  grep -qF '"text":"Both answered."' "$T/session.json"
}
wait_for done_turn
curl -s -N --max-time 2 "$URL/v1/sessions/$SID/stream" >"$T/stream2" || true
[ "$(n_inputs)" = 0 ] || fail "questions left pending: $(inputs_json)"

# The program's result reached the root model once, in its third request,
# as one completed workflow block with both replies combined and the output.
[ "$(requests fake-root)" = 3 ] || fail "root model requests: $(seen)"
for k in 1 2; do
  [ "$(root_request $k | grep -o '<task_result id=' | wc -l)" = 0 ] || fail "root request $k carries a result"
done
LAST=$(root_request 3)
[ "$(printf '%s' "$LAST" | jq -r '.messages[].content // empty' | grep -o '<task_result id=' | wc -l)" = 1 ] \
  || fail "the results the model read: $(printf '%s' "$LAST" | jq .messages)"
BLOCK="<task_result id=\"$TASK_ID\" tool=\"workflow\" status=\"completed\">"
RESULT=$(printf '%s' "$LAST" | jq -r '.messages[] | select(.role == "user") | .content' | grep -F -A3 "$BLOCK") \
  || fail "no $BLOCK in the last root request: $(printf '%s' "$LAST" | jq .messages)"
printf '%s' "$RESULT" | grep -qF '"result":"alpha chose eu + beta chose large"' \
  || fail "the block lacks the combined replies: $RESULT"
printf '%s' "$RESULT" | grep -qF 'both replied' || fail "the block lacks the program's output: $RESULT"

# Each child session was opened exactly once: three sessions in all, two
# agent.started on the root's stream (one per child), each child model asked
# twice (the tool call, then the reply), each ask_person run once.
[ "$(runs_of moor__session)" = 3 ] || fail "sessions (root + 2 children): $BODY"
for who in alpha beta; do
  [ "$(runs_of "$who.ask_person")" = 1 ] || fail "$who.ask_person runs: $BODY"
  [ "$(requests "fake-$who")" = 2 ] || fail "$who's model requests: $(seen)"
  n=$(grep -A1 '^event: agent.started$' "$T/stream2" | grep -c "\"name\":\"$who\"" || true)
  [ "$n" = 1 ] || fail "$n agent.started for $who on the root stream: $(grep -A1 '^event: agent.started' "$T/stream2")"
done
[ "$(grep -c '^event: agent.started$' "$T/stream2" || true)" = 2 ] || fail "agent.started events: $(cat "$T/stream2")"
for kind in task.started task.settled task.result; do
  n=$(grep -c "^event: $kind\$" "$T/stream2" || true)
  [ "$n" = 1 ] || fail "$n $kind events on the stream (1 expected): $(cat "$T/stream2")"
done

# Nothing ran twice: each step once, no model request repeated.
for line in "asked alpha region?" "asked beta size?" "answered alpha eu" "answered beta large"; do
  [ "$(count "$line" "$COUNTER")" = 1 ] || fail "'$line' in the counter: $(cat "$COUNTER")"
done
[ "$(lines)" = 4 ] || fail "counter: $(cat "$COUNTER")"
[ "$(requests)" = 7 ] || fail "model requests: $(seen)"
[ "$(sort "$T/model.jsonl" | sed 's/"n":[0-9]*//' | uniq -d | wc -l)" = 0 ] || fail "a model request repeated"

# A second session, killed with one child answered and the other parked:
# after the restart the program replays, the first reply comes from the
# log (alpha's session is not asked again) and the second goes live.
req POST /v1/sessions '{"message": "second: choose a region and a size"}'
expect 201 "POST /v1/sessions (the second)"
SID2=$(field sessionId)
wait_for two_inputs
RA2=$(request_for alpha "second: ")
RB2=$(request_for beta "second: ")
[ -n "$RA2" ] && [ -n "$RB2" ] || fail "the second session's questions: $(inputs_json)"
req POST "/v1/inputs/$RA2" '{"optionId": "us"}'
expect 200 "POST /v1/inputs/$RA2"
# alpha's child session ends its turn with its reply (delivered to the
# workflow's call) before the kill.
curl -s -N --max-time 2 "$URL/v1/sessions/$SID2/stream" >"$T/stream3" || true
ACHILD=$(grep -A1 '^event: agent.started$' "$T/stream3" | grep '"name":"alpha"' \
  | sed -n 's/.*"sessionId":"\(run_[0-9a-f]*\)".*/\1/p' | head -1)
[ -n "$ACHILD" ] || fail "no agent.started for alpha in the second session: $(cat "$T/stream3")"
alpha_replied() {
  curl -s --max-time 2 "$URL/v1/sessions/$ACHILD" >"$T/child.json" || true
  grep -qF '"text":"alpha chose us"' "$T/child.json"
}
wait_for alpha_replied
wait_for one_input
kill_dev
start_dev "$W" 127.0.0.1:0
wait_for one_input
[ "$(request_for beta "second: ")" = "$RB2" ] || fail "beta's question after the restart: $(inputs_json)"
req POST "/v1/inputs/$RB2" '{"optionId": "small"}'
expect 200 "POST /v1/inputs/$RB2"
done_turn2() {
  curl -s --max-time 2 "$URL/v1/sessions/$SID2" >"$T/session2.json" || true
  grep -qF '"text":"Both answered."' "$T/session2.json"
}
wait_for done_turn2
W2="second: choose a region and a size"
RESULT2=$(root_request 3 "$W2" | jq -r '.messages[] | select(.role == "user") | .content' \
  | grep -F -A3 'tool="workflow" status="completed">') || fail "no completed block: $(root_request 3 "$W2")"
printf '%s' "$RESULT2" | grep -qF '"result":"alpha chose us + beta chose small"' \
  || fail "the second block lacks the combined replies: $RESULT2"
[ -z "$(root_request 4 "$W2")" ] || fail "the second session's root model was asked a fourth time: $(seen)"
[ "$(runs_of moor__session)" = 6 ] || fail "sessions after the second (2 roots + 4 children): $BODY"
for who in alpha beta; do
  [ "$(runs_of "$who.ask_person")" = 2 ] || fail "$who.ask_person runs: $BODY"
  [ "$(requests "fake-$who")" = 4 ] || fail "$who's model requests: $(seen)"
done
for line in "asked alpha second: region?" "asked beta second: size?" "answered alpha us" "answered beta small"; do
  [ "$(count "$line" "$COUNTER")" = 1 ] || fail "'$line' in the counter: $(cat "$COUNTER")"
done
[ "$(lines)" = 8 ] || fail "counter: $(cat "$COUNTER")"
[ "$(requests)" = 14 ] || fail "model requests: $(seen)"
[ "$(sort "$T/model.jsonl" | sed 's/"n":[0-9]*//' | uniq -d | wc -l)" = 0 ] || fail "a model request repeated"

# A third session: ctx.race of the two, both parked, killed and restarted;
# alpha's answer wins the race, the program ends with it, and beta's
# question is withdrawn, on the root session's stream too (which showed it).
req POST /v1/sessions '{"message": "race: pick one"}'
expect 201 "POST /v1/sessions (the third)"
SID3=$(field sessionId)
wait_for two_inputs
RA3=$(request_for alpha "race: ")
RB3=$(request_for beta "race: ")
[ -n "$RA3" ] && [ -n "$RB3" ] || fail "the third session's questions: $(inputs_json)"
kill_dev
start_dev "$W" 127.0.0.1:0
wait_for two_inputs
req POST "/v1/inputs/$RA3" '{"optionId": "small"}'
expect 200 "POST /v1/inputs/$RA3"
done_turn3() {
  curl -s --max-time 2 "$URL/v1/sessions/$SID3" >"$T/session3.json" || true
  grep -qF '"text":"Both answered."' "$T/session3.json"
}
wait_for done_turn3
W3="race: pick one"
RESULT3=$(root_request 3 "$W3" | jq -r '.messages[] | select(.role == "user") | .content' \
  | grep -F -A3 'tool="workflow" status="completed">') || fail "no completed block: $(root_request 3 "$W3")"
printf '%s' "$RESULT3" | grep -qF '"result":{"first":1,"value":"alpha chose small"}' \
  || fail "the race's block: $RESULT3"
no_inputs() { [ "$(n_inputs)" = 0 ]; }
wait_for no_inputs
withdrawn() {
  curl -s -N --max-time 2 "$URL/v1/sessions/$SID3/stream" >"$T/stream3" || true
  grep -A1 '^event: input.resolved$' "$T/stream3" | grep -F "\"requestId\":\"$RB3\"" | grep -qF '"outcome":"cancelled"'
}
wait_for withdrawn
[ "$(count "answered alpha small" "$COUNTER")" = 1 ] || fail "alpha's step in the race: $(cat "$COUNTER")"
! grep -q "^answered beta" <(grep -v "^answered beta \(large\|small\)$" "$COUNTER") \
  || fail "beta's withdrawn question ran its step: $(cat "$COUNTER")"
[ "$(sort "$T/model.jsonl" | sed 's/"n":[0-9]*//' | uniq -d | wc -l)" = 0 ] || fail "a model request repeated"
stop_dev
kill "$FAKE_PID"
wait "$FAKE_PID" || fail "the fake model server exited $?: $(cat "$T/fake.err")"

# From the command line: the receipt on stderr, the result on stdout.
st=0
"$MOOR" call workflow '{"lua": "return 1 + 1"}' --agent "$W" --db "$T/cli.db" </dev/null \
  >"$T/cli.out" 2>"$T/cli.err" || st=$?
[ $st = 0 ] || fail "moor call workflow exited $st: $(cat "$T/cli.err")"
[ "$(cat "$T/cli.out")" = '{"output":"","result":2}' ] || fail "moor call workflow printed: $(cat "$T/cli.out")"
grep -Eqx 'Started task workflow-[0-9a-z]{6}\. Its result will arrive in a <task_result> message\.' "$T/cli.err" \
  || fail "no receipt on stderr: $(cat "$T/cli.err")"
# A syntax error: exit 1, the line in the message, which names the program.
st=0
"$MOOR" call workflow '{"lua": "local x = 1\nreturn ("}' --agent "$W" --db "$T/cli.db" </dev/null \
  >"$T/cli2.out" 2>"$T/cli2.err" || st=$?
[ $st = 1 ] || fail "a syntax error exited $st: $(cat "$T/cli2.err")"
[ ! -s "$T/cli2.out" ] || fail "a syntax error printed a result: $(cat "$T/cli2.out")"
grep -qF '"message":"program:2: ' "$T/cli2.err" || fail "the syntax error lacks 'program:2:': $(cat "$T/cli2.err")"
pass "workflow: ctx.all of two children parked on questions -> kill -9 -> restart -> answers -> one completed <task_result> with both replies, each child session once, each step once; the same killed between the answers; ctx.race across a restart; moor call workflow"
