#!/usr/bin/env bash
# The tool file is edited between the kill and the resume so that its op
# order changes: the run fails with a non-determinism error naming the seq.
. "$(dirname "$0")/lib.sh"
cd "$T"
W="$T/witness"
"$MOOR" call three_steps "{\"witness\":\"$W\",\"sleep\":\"3s\"}" >"$T/out" 2>"$T/err" &
pid=$!
wait_for grep -qx two "$W" 2>/dev/null
sleep 0.3
kill -9 $pid
wait $pid 2>/dev/null || true
run=$(run_id_from "$T/err")
# Swap the first two steps: op 1 was recorded as step 'one', now it is 'two'.
sed -i 's/local a = one(input.witness)/local b0 = two(input.witness, 0)/' agent/tools/three_steps.lua
grep -q 'local b0 = two' agent/tools/three_steps.lua || fail "edit did not apply"
"$MOOR" resume >"$T/resume.out" 2>"$T/resume.err" || true
"$MOOR" runs | grep "$run" | grep -q failed || fail "run should have failed: $("$MOOR" runs)"
"$MOOR" logs "$run" | grep -q "non-determinism at seq 1: the log recorded step 'one' but the body now asks for step 'two'" \
  || fail "no non-determinism error naming seq 1: $("$MOOR" logs "$run")"
"$MOOR" logs "$run" | grep -q "run.note" || fail "the changed source was not noted"
[ "$(count three "$W")" = 0 ] || fail "step three ran after the divergence"
pass "edited tool fails the run with non-determinism at seq 1"
