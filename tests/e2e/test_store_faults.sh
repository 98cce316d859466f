#!/usr/bin/env bash
# Storage faults (issue 7, items 25, 26, 28), injected with the faultfs shim
# (tests/fault/faultfs.c): while $MOOR_FAULT_TRIGGER exists every write to the
# -wal file fails with ENOSPC, as on a full disk.
#  - moor dev refuses to start on a database it cannot write (and on an
#    immutable one), with the cause;
#  - a call answered with an error (503) left no run behind, not even after a
#    restart, and later writes are whole transactions again;
#  - a commit failing inside the engine's round neither stops moor dev nor
#    loses the run: reads are served, writes answer 503, and the run goes on
#    when space returns; stopped while failing, moor dev exits non-zero.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${MOOR_FAULT_SHIM:?MOOR_FAULT_SHIM must name the faultfs shim}"
cd "$T"
export MOOR_FAULT_TRIGGER="$T/disk-full"
PRELOAD="${MOOR_PRELOAD_FIRST:+$MOOR_PRELOAD_FIRST:}$MOOR_FAULT_SHIM"

# start_faulty: start_dev with the shim preloaded into moor dev only.
start_faulty() {
  : >"$T/dev.out"
  LD_PRELOAD="$PRELOAD" "$MOOR" dev --agent agent --listen 127.0.0.1:0 >"$T/dev.out" 2>>"$T/dev.err" &
  DEV_PID=$!
  wait_for grep -q '^http://' "$T/dev.out"
  URL=$(head -1 "$T/dev.out")
}
ran() { [ -e "$T/$1" ]; }

# The database exists (schema written) before the disk fills up.
"$MOOR" call three_steps "{\"witness\":\"$T/w0\",\"sleep\":\"0s\"}" >/dev/null 2>&1 || fail "first call"

# 28: a full disk at start: refused with the cause, non-zero.
touch "$MOOR_FAULT_TRIGGER"
set +e
LD_PRELOAD="$PRELOAD" timeout 20 "$MOOR" dev --agent agent --listen 127.0.0.1:0 >"$T/out" 2>"$T/err"; st=$?
set -e
[ $st != 0 ] && [ $st != 124 ] || fail "moor dev on a full disk exited $st (124: it served): $(cat "$T/err")"
grep -q "cannot open database .*test write failed: database or disk is full" "$T/err" \
  || fail "full-disk refusal: $(cat "$T/err")"
rm -f "$MOOR_FAULT_TRIGGER"
# ...and an immutable database file (root ignores permission bits, not +i).
if chattr +i "$DB" 2>/dev/null; then
  set +e
  timeout 20 "$MOOR" dev --agent agent --listen 127.0.0.1:0 >"$T/out" 2>"$T/err"; st=$?
  set -e
  chattr -i "$DB"
  [ $st != 0 ] && [ $st != 124 ] || fail "moor dev on an immutable database exited $st: $(cat "$T/err")"
  grep -q "read-only" "$T/err" || fail "immutable-file refusal: $(cat "$T/err")"
fi

# 26: calls answered with an error leave nothing behind.
start_faulty
touch "$MOOR_FAULT_TRIGGER"
for i in 1 2 3; do
  req POST /v1/tools/three_steps/calls "{\"witness\":\"$T/lost$i\",\"sleep\":\"0s\"}"
  expect_error 503 storage_unavailable "a call while the disk is full"
  printf '%s' "$BODY" | grep -q "database or disk is full" || fail "503 without the cause: $BODY"
done
req GET /v1/inputs
expect 200 "a read while the disk is full"
req GET /v1/runs
expect 200 "runs while the disk is full"
printf '%s' "$BODY" | grep -q "lost" && fail "a refused call is listed: $BODY"
rm -f "$MOOR_FAULT_TRIGGER"
call three_steps "{\"witness\":\"$T/w1\",\"sleep\":\"0s\"}"
settled "$RUN" completed
W1=$RUN

# 25: a commit fails inside the engine's round (the sleep's timer fires on
# a full disk): moor dev stays up, serves reads, refuses writes, recovers.
call three_steps "{\"witness\":\"$T/w2\",\"sleep\":\"1s\"}"
W2=$RUN
wait_for grep -qx two "$T/w2"
touch "$MOOR_FAULT_TRIGGER"
wait_for grep -q "cannot write the database: .*database or disk is full.*Retrying" "$T/dev.err"
kill -0 "$DEV_PID" 2>/dev/null || fail "moor dev stopped on a failed commit: $(tail -3 "$T/dev.err")"
[ "$(status "$W2")" = running ] || fail "run $W2 is not running while the disk is full"
req POST /v1/tools/three_steps/calls "{\"witness\":\"$T/lost4\",\"sleep\":\"0s\"}"
expect_error 503 storage_unavailable "a call while the round fails"
sleep 1
ran w2 && grep -qx three "$T/w2" && fail "step three ran although nothing could be recorded"
rm -f "$MOOR_FAULT_TRIGGER"
settled "$W2" completed
wait_for grep -q "the database takes writes again" "$T/dev.err"
[ "$(count three "$T/w2")" = 1 ] || fail "step three ran $(count three "$T/w2") times, not once"

# Stopped while failing: non-zero, with the cause.
call three_steps "{\"witness\":\"$T/w3\",\"sleep\":\"1s\"}"
W3=$RUN
wait_for grep -qx two "$T/w3"
touch "$MOOR_FAULT_TRIGGER"
n=$(grep -c "cannot write the database" "$T/dev.err" || true)
wait_for sh -c "[ \$(grep -c 'cannot write the database' '$T/dev.err') -gt $n ]"
set +e
kill -TERM "$DEV_PID"; wait "$DEV_PID"; st=$?
set -e
DEV_PID=
[ $st != 0 ] || fail "moor dev stopped while the disk was full exited 0"
tail -2 "$T/dev.err" | grep -q "stopped while the database could not be written (.*database or disk is full" \
  || fail "no cause at exit: $(tail -3 "$T/dev.err")"
rm -f "$MOOR_FAULT_TRIGGER"

# After a restart: the runs answered 201 finish, none of the refused calls runs.
"$MOOR" resume >"$T/resume.out" 2>"$T/resume.err" || fail "resume: $(cat "$T/resume.err")"
"$MOOR" runs --json >"$T/runs.json"
grep -q "\"id\":\"$W3\",[^}]*\"status\":\"completed\"" "$T/runs.json" || grep -q "$W3" "$T/resume.out" \
  || fail "run $W3 did not finish after the restart: $(cat "$T/runs.json")"
[ "$(grep -o '"tool":"three_steps"' "$T/runs.json" | wc -l)" = 4 ] \
  || fail "expected 4 three_steps runs (w0, w1, w2, w3): $(cat "$T/runs.json")"
for i in 1 2 3 4; do ran "lost$i" && fail "a call answered 503 ran (lost$i)"; done
[ "$(count one "$T/w1")" = 1 ] || fail "w1 ran step one $(count one "$T/w1") times"

# 25: a fatal engine error (here, a tool that breaks the engine on purpose)
# stops moor dev with a non-zero exit and the cause, not 0.
cat >"$T/agent/tools/break_engine.lua" <<'LUA'
local moor = require "moor"
return moor.defineTool {
  description = "Test tool: replaces the engine's round with one that raises.",
  inputSchema = moor.schema.object {},
  execute = function()
    require("moor.engine").tick = function() error("the engine broke on purpose", 0) end
    return {}
  end,
}
LUA
start_dev agent 127.0.0.1:0
req POST /v1/tools/break_engine/calls '{}'
set +e
for _ in $(seq 1 100); do kill -0 "$DEV_PID" 2>/dev/null || break; sleep 0.1; done
kill -TERM "$DEV_PID" 2>/dev/null; wait "$DEV_PID"; st=$?
set -e
DEV_PID=
[ $st = 1 ] || fail "moor dev after an engine error exited $st, not 1"
grep -q "the engine broke on purpose" "$T/dev.err" || fail "no cause on stderr: $(tail -3 "$T/dev.err")"
pass "full disk: refused at start; 503 calls leave no run; a failed round retries and recovers; exit non-zero with the cause"
