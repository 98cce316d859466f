#!/usr/bin/env bash
# `moor call` on a terminal asks the run's questions in place: the prompt and
# its options are shown, a bad answer is refused and asked again, and a typed
# option id answers. (`script` gives the command a pseudo-terminal.)
. "$(dirname "$0")/lib.sh"
cd "$T"
cp -r "$MOOR_SRC/agent/tools/refund_order.lua" agent/tools/
cp -r "$MOOR_SRC/agent/lib" agent/lib
export MOOR_LEDGER="$T/ledger"
# Feed the terminal: first an answer that is not an option, then the option's number.
{ sleep 1; printf 'maybe\n'; sleep 0.5; printf '1\n'; sleep 1; } |
  script -qefc "$MOOR call refund_order '{\"orderId\":\"A-1\",\"amount\":12.5}'" "$T/typescript" >"$T/out" 2>&1 || true
tr -d '\r' <"$T/out" >"$T/clean"
grep -q 'Refund \$12.50 on order A-1?' "$T/clean" || fail "no prompt: $(cat "$T/clean")"
grep -q '1) Refund \[approve\]' "$T/clean" || fail "no numbered options: $(cat "$T/clean")"
grep -q "does not allow free text" "$T/clean" || fail "a bad answer was not refused: $(cat "$T/clean")"
grep -q '"refunded":true' "$T/clean" || fail "not refunded: $(cat "$T/clean")"
grep -q "A-1 12.50" "$T/ledger" || fail "no refund in the ledger"

# Without a terminal and with --no-input, the question is unavailable at once.
"$MOOR" call refund_order '{"orderId":"A-2","amount":1}' --no-input >"$T/out2" 2>"$T/err2" </dev/null
[ "$(tail -n 1 "$T/out2")" = '{"refunded":false,"status":"unavailable"}' ] || fail "no-input: $(cat "$T/out2" "$T/err2")"
pass "terminal questions answered in place; --no-input gives unavailable"
