#!/usr/bin/env bash
# `moor answer` and `moor cancel` from another shell: through a running
# `moor dev` (found through the database's lock file), and straight into the
# database when no host runs (then `moor resume` finishes the run). And
# `moor call --no-input` on a tool that asks: unavailable at once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T/example"

# Through a running moor dev.
start_dev "$T/example" 127.0.0.1:0
call refund_order '{"orderId":"A-1","amount":12.5}'
R1=$RUN
wait_for test -n "$(pending_request "$R1")"
Q1=$(pending_request "$R1")
set +e
"$MOOR" answer "$Q1" maybe >"$T/o" 2>"$T/e"; st=$?
set -e
[ $st = 1 ] || fail "an option never offered: exit $st"
grep -q 'invalid_option' "$T/e" || fail "invalid option message: $(cat "$T/e")"
[ "$(pending_request "$R1")" = "$Q1" ] || fail "the question closed after a refused answer"
"$MOOR" answer "$Q1" approve >"$T/o" 2>"$T/e" || fail "moor answer through moor dev: $(cat "$T/e")"
grep -qF '"outcome":"answered"' "$T/o" || fail "moor answer output: $(cat "$T/o")"
settled "$R1" completed
run_body "$R1" | grep -qF '"refunded":true' || fail "R1: $BODY"
set +e
"$MOOR" answer "$Q1" approve >"$T/o" 2>"$T/e"; st=$?
set -e
[ $st = 1 ] && grep -q 'already_resolved' "$T/e" || fail "a second answer: exit $st, $(cat "$T/e")"
set +e
"$MOOR" answer req_nope approve >"$T/o" 2>"$T/e"; st=$?
set -e
[ $st = 1 ] && grep -q 'not_found' "$T/e" || fail "an unknown request: exit $st, $(cat "$T/e")"

call refund_order '{"orderId":"A-2","amount":3}'
R2=$RUN
wait_for test -n "$(pending_request "$R2")"
"$MOOR" cancel "$R2" >"$T/o" 2>"$T/e" || fail "moor cancel through moor dev: $(cat "$T/e")"
grep -qF '"status":"cancelling"' "$T/o" || fail "moor cancel output: $(cat "$T/o")"
settled "$R2" cancelled
set +e
"$MOOR" cancel "$R2" >"$T/o" 2>"$T/e"; st=$?
set -e
[ $st = 1 ] && grep -q 'already_settled' "$T/e" || fail "cancel a cancelled run: exit $st, $(cat "$T/e")"
set +e
"$MOOR" cancel run_nope >"$T/o" 2>"$T/e"; st=$?
set -e
[ $st = 1 ] || fail "cancel an unknown run: exit $st"

# Free text where the question allows it: none of the examples does, so
# --text is refused with the reason.
call refund_order '{"orderId":"A-3","amount":7}'
R3=$RUN
wait_for test -n "$(pending_request "$R3")"
Q3=$(pending_request "$R3")
set +e
"$MOOR" answer "$Q3" --text "yes please" >"$T/o" 2>"$T/e"; st=$?
set -e
[ $st = 1 ] && grep -q 'freeform_not_allowed' "$T/e" || fail "--text: exit $st, $(cat "$T/e")"
call refund_order '{"orderId":"A-4","amount":9}'
R4=$RUN
wait_for test -n "$(pending_request "$R4")"
Q4=$(pending_request "$R4")
stop_dev
pass "moor answer / moor cancel through a running moor dev (statuses and exits)"

# No host: straight into the database; moor resume finishes the runs.
"$MOOR" answer "$Q3" approve >"$T/o" 2>"$T/e" || fail "moor answer with no host: $(cat "$T/e")"
grep -qx "answered $Q3" "$T/o" || fail "moor answer output with no host: $(cat "$T/o")"
set +e
"$MOOR" answer "$Q3" deny >"$T/o" 2>"$T/e"; st=$?
"$MOOR" answer "$Q4" maybe >"$T/o2" 2>"$T/e2"; st2=$?
set -e
[ $st = 1 ] || fail "a second answer with no host: exit $st"
grep -q 'already answered' "$T/e" || fail "second answer message: $(cat "$T/e")"
[ $st2 = 1 ] && grep -q "never offered" "$T/e2" || fail "invalid option with no host: exit $st2, $(cat "$T/e2")"
"$MOOR" cancel "$R4" >"$T/o" 2>"$T/e" || fail "moor cancel with no host: $(cat "$T/e")"
grep -q "cancel requested for $R4" "$T/o" || fail "moor cancel output with no host: $(cat "$T/o")"
"$MOOR" runs | grep "$R3" | grep -q running || fail "R3 settled with no host"
"$MOOR" resume --agent "$T/example" >"$T/resume.out" 2>"$T/resume.err" || fail "moor resume: $(cat "$T/resume.err")"
grep -q "^$R3 completed {\"refundId\":\"refund-$R3:[0-9]*\",\"refunded\":true}$" "$T/resume.out" \
  || fail "resume should complete R3 refunded: $(cat "$T/resume.out" "$T/resume.err")"
"$MOOR" runs | grep "$R4" | grep -q cancelled || fail "R4 not cancelled after resume: $("$MOOR" runs)"
"$MOOR" logs "$R4" | grep -q 'input.resolved .*"outcome":"cancelled"' || fail "R4's question not withdrawn: $("$MOOR" logs "$R4")"
[ "$(grep -c ' A-3 7.00$' "$MOOR_LEDGER")" = 1 ] || fail "ledger: $(cat "$MOOR_LEDGER")"
grep -q ' A-4 ' "$MOOR_LEDGER" && fail "a cancelled refund was issued"
[ "$(grep -c ' A-1 12.50$' "$MOOR_LEDGER")" = 1 ] || fail "ledger for A-1: $(cat "$MOOR_LEDGER")"
pass "moor answer / moor cancel with no host; moor resume finishes both"

# A run with no channel for questions: unavailable at once.
"$MOOR" call refund_order '{"orderId":"A-5","amount":1}' --no-input --agent "$T/example" >"$T/o" 2>"$T/e" </dev/null \
  || fail "moor call --no-input: $(cat "$T/e")"
[ "$(tail -n 1 "$T/o")" = '{"refunded":false,"status":"unavailable"}' ] || fail "--no-input result: $(cat "$T/o")"
run5=$(run_id_from "$T/e")
"$MOOR" logs "$run5" | grep -q 'input.resolved .*"outcome":"unavailable"' \
  || fail "no input.resolved unavailable: $("$MOOR" logs "$run5")"
pass "moor call --no-input: ctx.ask is unavailable at once"
