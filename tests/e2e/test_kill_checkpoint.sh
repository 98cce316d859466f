#!/usr/bin/env bash
# kill -9 while the store's checkpointer thread copies the WAL into the
# database (issue 13: checkpoints run on a thread of their own, not inside
# the engine's commits): a run of thousands of steps is killed at a random
# point after its WAL passed the checkpoint threshold, while that thread is
# in a checkpoint, twice (under `moor call`, then under `moor resume`); the
# last `moor resume` completes it. The
# file is intact, the run completed, and its log has every step's result
# exactly once, in order.
. "$(dirname "$0")/lib.sh"
cd "$T"
N=6000
W="$T/witness"
cat >"$T/agent/tools/many_steps.lua" <<'EOF'
-- Test tool: n steps, each appending its number to a witness file and
-- returning it with 3 KiB of padding (about 2 WAL frames a commit).
local moor = require "moor"
local s = moor.schema

local pad = string.rep("p", 3072)
local step = moor.step("many", function(path, i)
  local f = assert(io.open(path, "a"))
  f:write(i, "\n")
  f:close()
  return { i = i, pad = pad }
end)

return moor.defineWorkflowTool {
  description = "Test tool: n witnessed steps.",
  inputSchema = s.object { witness = s.string { minLength = 1 }, n = s.integer { minimum = 1 } },
  execute = function(input)
    local sum = 0
    for i = 1, input.n do sum = sum + step(input.witness, i).i end
    return { n = input.n, sum = sum }
  end,
}
EOF

# The WAL has held 1,000 frames (4 KiB pages; its file keeps its largest size).
wal_passed() { [ $(( $(stat -c %s "$DB-wal" 2>/dev/null || echo 0) / 4120 )) -ge 1000 ]; }
steps_past() { [ "$(wc -l <"$W")" -gt "$1" ]; }
# The process's checkpointer thread (host/store.c names it).
has_checkpointer() { grep -qx moor-checkpoint /proc/"$1"/task/*/comm 2>/dev/null; }

# The checkpointer thread's id in PID (host/store.c names it), or nothing.
checkpointer_of() {
  for f in /proc/"$1"/task/*/comm; do
    [ "$(cat "$f" 2>/dev/null)" = moor-checkpoint ] && { f=${f%/comm}; echo "${f##*/}"; return; }
  done
}

# kill_in_checkpoint PID WHAT: once the WAL has held 1,000 frames and the
# checkpointer thread runs, wait a random 0-300 ms, then kill -9 PID as soon
# as that thread is seen running or in disk I/O (a checkpoint: between them
# it sleeps), or after 100,000 looks. CAUGHT counts the kills in a checkpoint.
CAUGHT=0
kill_in_checkpoint() {
  wait_for wal_passed
  wait_for has_checkpointer "$1"
  tid=$(checkpointer_of "$1")
  sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  i=0 state=S
  while [ $i -lt 100000 ]; do
    read -r stat <"/proc/$1/task/$tid/stat" 2>/dev/null || break
    state=${stat#*) }
    state=${state%% *}
    case $state in R | D) break ;; esac
    i=$((i + 1))
  done
  kill -9 "$1" 2>/dev/null || fail "$2 ended before the kill: $(cat "$T/err" "$T/resume.err" 2>/dev/null)"
  wait "$1" 2>/dev/null || true
  case $state in R | D) CAUGHT=$((CAUGHT + 1)) ;; esac
}
"$MOOR" call many_steps "{\"witness\":\"$W\",\"n\":$N}" >"$T/out" 2>"$T/err" &
pid=$!
kill_in_checkpoint $pid "moor call"
run=$(run_id_from "$T/err")
[ -n "$run" ] || fail "no run id"
done1=$(wc -l <"$W")
[ "$done1" -lt "$N" ] || fail "the run finished before the kill"

# A second kill, after the resumed host has passed the threshold again.
"$MOOR" resume >"$T/resume.out" 2>"$T/resume.err" &
pid=$!
wait_for steps_past "$((done1 + 500))"
kill_in_checkpoint $pid "moor resume"

"$MOOR" resume >"$T/resume2.out" 2>"$T/resume2.err" || fail "resume failed: $(cat "$T/resume2.err")"

[ "$(sqlite3 "$DB" 'PRAGMA integrity_check')" = ok ] || fail "integrity_check: $(sqlite3 "$DB" 'PRAGMA integrity_check' | head)"
[ "$("$MOOR" runs --json | grep -o '"status":"[a-z]*"')" = '"status":"completed"' ] || fail "run not completed: $("$MOOR" runs)"
# Every step's result once, in order: op i's result is step i's.
results=$(sqlite3 "$DB" "SELECT count(*), count(DISTINCT json_extract(payload, '$.i')),
  min(json_extract(payload, '$.i')), max(json_extract(payload, '$.i')),
  sum(json_extract(payload, '$.i') <> op)
  FROM event_log WHERE run_id = '$run' AND kind = 'step.result'")
[ "$results" = "$N|$N|1|$N|0" ] || fail "step results (count|distinct|min|max|out of place): $results"
sqlite3 "$DB" "SELECT payload FROM event_log WHERE run_id = '$run' AND kind = 'run.completed'" \
  | grep -qF "{\"n\":$N,\"sum\":$((N * (N + 1) / 2))}" || fail "wrong result: $(event_line "$run" run.completed)"
# Each step ran once, or twice when the kill came after it ran and before its commit.
twice=$(sort -n "$W" | uniq -c | awk '$1 > 2 { bad++ } $1 == 2 { n++ } END { print (bad ? "bad" : n + 0) }')
[ "$twice" != bad ] && [ "$twice" -le 2 ] || fail "steps ran more than twice, or more than one per kill re-ran: $twice"
[ "$(sort -nu "$W" | wc -l)" = "$N" ] || fail "not every step ran"
[ "$CAUGHT" -ge 1 ] || fail "neither kill came while the checkpointer thread ran"
pass "killed twice ($CAUGHT of them inside a checkpoint; $done1 steps before the first); resumed: intact, completed, every result once"
