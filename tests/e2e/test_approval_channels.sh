#!/usr/bin/env bash
# Issue 7 items 4-5, probed against a real `moor dev` with curl: a gated call
# (approval = always) is approved only through the input channels, never by a
# session message; an approval answer must carry callId and inputHash (the
# SHA-256 of the input's canonical JSON); a mismatch echoes nothing; another
# session's inputResponses cannot reach it; `moor answer` and `moor chat`
# (through moor dev and in process) answer it as person channels.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
mkdir -p gated/tools
cat >gated/agent.lua <<'LUA'
local moor = require "moor"
return moor.defineAgent { model = "openai/fake-model", instructions = "Charge when asked." }
LUA
cat >gated/tools/charge.lua <<'LUA'
local moor = require "moor"
return moor.defineTool {
  description = "Charge an amount.",
  inputSchema = moor.schema.object { amount = moor.schema.integer() },
  approval = moor.approval.always(),
  execute = function(input)
    local f = assert(io.open(os.getenv("CHARGE_WITNESS"), "a"))
    f:write("charged ", input.amount, "\n")
    f:close()
    return { charged = input.amount }
  end,
}
LUA
export CHARGE_WITNESS="$T/charges.log"
: >"$CHARGE_WITNESS"
"$FAKE_MODEL" --script "$MOOR_SRC/tests/e2e/gated_model.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" \
  >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -q '^http://' "$T/fake.out"
export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test"

start_dev gated 127.0.0.1:0
req POST /v1/sessions '{"message":"charge 5"}'
expect 201 "POST /v1/sessions"
SA=$(field sessionId)
has_pending() { [ -n "$(pending_request "$SA")" ]; }
wait_for has_pending
REQ=$(pending_request "$SA")

# A session message equal to the option id does not approve.
req POST "/v1/sessions/$SA" '{"message":"approve"}'
expect 202 "a message to the session"
sleep 1
[ "$(pending_request "$SA")" = "$REQ" ] || fail "the message 'approve' answered the approval"
[ "$(count "charged 5" "$CHARGE_WITNESS")" = 0 ] || fail "a message approved the charge"

# The binding: SHA-256 of {"amount":5}, required, and never echoed.
req GET /v1/inputs
CALLID=$(field callId)
HASH=$(field inputHash)
[ "$HASH" = "$(printf '{"amount":5}' | sha256sum | cut -d' ' -f1)" ] || fail "inputHash is not SHA-256: $BODY"
req POST "/v1/inputs/$REQ" '{"optionId":"approve"}'
expect_error 400 approval_unbound "an approval answer without callId/inputHash"
printf '%s' "$BODY" | grep -q callId && printf '%s' "$BODY" | grep -q inputHash || fail "400 does not say what is missing: $BODY"
req POST "/v1/inputs/$REQ" "{\"optionId\":\"approve\",\"callId\":\"$CALLID\"}"
expect_error 400 approval_unbound "an approval answer without inputHash"
req POST "/v1/inputs/$REQ" "{\"optionId\":\"approve\",\"callId\":\"call_other\",\"inputHash\":\"$HASH\"}"
expect_error 409 approval_mismatch "an approval answer naming another call"
case $BODY in *"$HASH"*|*"$CALLID"*) fail "the 409 echoes the expected binding: $BODY" ;; esac
req POST "/v1/inputs/$REQ" "{\"optionId\":\"approve\",\"callId\":\"$CALLID\",\"inputHash\":\"0000\"}"
expect_error 409 approval_mismatch "an approval answer naming another input"
case $BODY in *"$HASH"*) fail "the 409 echoes the expected hash: $BODY" ;; esac

# Another session's inputResponses: unknown there, and it reveals nothing.
req POST /v1/sessions '{}'
expect 201 "a second session"
SB=$(field sessionId)
req POST "/v1/sessions/$SB" "{\"inputResponses\":[{\"requestId\":\"$REQ\",\"optionId\":\"approve\",\"callId\":\"$CALLID\",\"inputHash\":\"$HASH\"}]}"
expect_error 404 not_found "inputResponses for another session's request"
case $BODY in *"$SA"*) fail "the 404 names the other session: $BODY" ;; esac
[ "$(pending_request "$SA")" = "$REQ" ] || fail "another session's inputResponses answered the approval"

# moor answer (a person naming the request) fills the binding from it.
"$MOOR" answer "$REQ" approve >"$T/o" 2>"$T/e" || fail "moor answer: $(cat "$T/o" "$T/e")"
grep -q "answering the approval of charge" "$T/e" || fail "moor answer did not show the call: $(cat "$T/e")"
has_charged() { [ "$(count "charged 5" "$CHARGE_WITNESS")" = "$1" ]; }
wait_for has_charged 1
transcript_done() { req GET "/v1/sessions/$SA"; printf '%s' "$BODY" | grep -q 'Charged: '; }
wait_for transcript_done

# moor chat through moor dev: the typed option answers the approval (the
# input channel), and the model's answer is shown.
{ printf 'charge 5 please\n'; sleep 2; printf 'Approve\n'; sleep 2; } | "$MOOR" chat >"$T/chat.out" 2>"$T/chat.err"
grep -q "through http://127.0.0.1" "$T/chat.err" || fail "chat did not go through moor dev: $(cat "$T/chat.err")"
grep -q '^agent: Charged: ' "$T/chat.out" || fail "chat through moor dev: $(cat "$T/chat.out" "$T/chat.err")"
has_charged 2 || fail "chat through moor dev did not charge once"
stop_dev

# moor chat in process: the same.
{ printf 'charge 5 please\n'; sleep 2; printf 'Approve\n'; sleep 2; } |
  "$MOOR" chat --agent gated >"$T/chat2.out" 2>"$T/chat2.err"
grep -q '^agent: Charged: ' "$T/chat2.out" || fail "chat in process: $(cat "$T/chat2.out" "$T/chat2.err")"
has_charged 3 || fail "chat in process did not charge once"
kill $FAKE_PID
pass "approvals only through the input channels; binding required, SHA-256, not echoed; sessions isolated"

# The approval moor answer shows is the server's text (a call id is the
# model's): printed for a terminal, without its control characters.
cat >"$T/esc_model.lua" <<'LUA'
return function(req)
  for _, r in ipairs(fake.tool_results(req)) do
    if r.name == "charge" then return fake.text("Charged: " .. r.content) end
  end
  return fake.tool_calls({ { id = "call_\27]0;owned\7\27[2J_" .. req.n, name = "charge", arguments = { amount = 7 } } })
end
LUA
"$FAKE_MODEL" --script "$T/esc_model.lua" --listen 127.0.0.1:0 --log "$T/esc.jsonl" >"$T/esc.out" 2>"$T/esc.err" &
ESC_PID=$!
wait_for grep -q '^http://' "$T/esc.out"
OPENAI_BASE_URL="$(head -1 "$T/esc.out")/v1" start_dev gated 127.0.0.1:0
req POST /v1/sessions '{"message":"charge 7"}'
expect 201 "POST /v1/sessions (escape model)"
SE=$(field sessionId)
has_pending_e() { [ -n "$(pending_request "$SE")" ]; }
wait_for has_pending_e
"$MOOR" answer "$(pending_request "$SE")" approve >"$T/o" 2>"$T/e" || fail "moor answer: $(cat "$T/o" "$T/e")"
grep -q "answering the approval of charge" "$T/e" || fail "moor answer did not show the call: $(cat "$T/e")"
if LC_ALL=C grep -q "$(printf '\033')" "$T/e"; then fail "moor answer printed an escape sequence: $(od -c "$T/e" | head)"; fi
stop_dev
kill $ESC_PID
pass "moor answer shows the approval without the model's control characters"
