#!/usr/bin/env bash
# Issue 7 items 13 (no core dumps), 29 (descriptors close-on-exec) and 30
# (soft RLIMIT_NOFILE raised to the hard limit), checked on a real moor dev:
# its /proc/<pid>/limits, and a step's child process that outlives a kill -9
# of the host holds neither the lock nor the database, so the next moor on
# the same database starts at once.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
CHILD=
trap '[ -n "$CHILD" ] && kill -9 "$CHILD" 2>/dev/null; kill -9 $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT

# Start with limits a fixed host would change: a low soft NOFILE, cores allowed.
hard_n=$(ulimit -Hn)
[ "$hard_n" = unlimited ] || [ "$hard_n" -gt 256 ] || fail "hard RLIMIT_NOFILE is only $hard_n"
ulimit -Sn 256
ulimit -Sc "$(ulimit -Hc)" 2>/dev/null || true
start_dev "$T/example" 127.0.0.1:0
limits=/proc/$DEV_PID/limits
core=$(awk '/^Max core file size/ { print $5 " " $6 }' "$limits")
[ "$core" = "0 0" ] || fail "core dumps are not disabled: Max core file size $core"
read -r soft hard < <(awk '/^Max open files/ { print $4, $5 }' "$limits")
[ "$soft" = "$hard" ] || fail "soft RLIMIT_NOFILE $soft was not raised to the hard limit $hard"
pass "moor dev: RLIMIT_CORE 0, soft RLIMIT_NOFILE = hard ($hard)"

# A step's background child, then kill -9 of the host while the child lives.
call spawn_child "{\"pidfile\": \"$T/child.pid\", \"seconds\": 60}"
wait_for test -s "$T/child.pid"
CHILD=$(cat "$T/child.pid")
kill -0 "$CHILD" || fail "the step's child is not running"
held=$(ls -l "/proc/$CHILD/fd" 2>/dev/null | grep -E "moor\.db|socket:" || true)
[ -z "$held" ] || fail "the step's child inherited the host's descriptors: $held"
kill_dev
kill -0 "$CHILD" || fail "the child died with the host; the test proves nothing"
"$MOOR" runs >"$T/runs.out" 2>"$T/runs.err" || fail "moor runs after kill -9: $(cat "$T/runs.err")"
start_dev "$T/example" 127.0.0.1:0
req GET /v1/runs
expect 200 "the second host serves"
stop_dev
kill -9 "$CHILD" 2>/dev/null || true
CHILD=
pass "a step's child holds no lock, database or socket descriptor; the next host starts at once"
