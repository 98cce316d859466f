#!/usr/bin/env bash
# State files (issue 7, items 7, 21, 22): .moor/ is 0700 and the database,
# its -wal/-shm and the lock file are 0600; the lock file holds the pid, the
# start time and the URL only (never the command line, which can carry a
# bearer header); the "in use" refusal is one line naming the URL; read-only
# commands never create a database.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
unset MOOR_DB
umask 022
mode() { stat -c %a "$1"; }

# A fresh project: moor creates .moor/ itself.
"$MOOR" call three_steps '{"witness":"w","sleep":"0s"}' --db .moor/moor.db >/dev/null 2>"$T/err" \
  || fail "call: $(cat "$T/err")"
[ "$(mode .moor)" = 700 ] || fail ".moor/ is $(mode .moor), not 700"
for f in .moor/moor.db .moor/moor.db.lock; do
  [ "$(mode $f)" = 600 ] || fail "$f is $(mode $f), not 600"
done

# A running moor dev: the -wal and -shm exist, and the lock names it.
SECRET="Authorization: Bearer sk-very-secret-$$"
"$MOOR" dev --agent agent --db .moor/moor.db --listen 127.0.0.1:0 >"$T/dev.out" 2>>"$T/dev.err" &
DEV_PID=$!
wait_for grep -q '^http://' "$T/dev.out"
URL=$(head -1 "$T/dev.out")
for f in .moor/moor.db .moor/moor.db-wal .moor/moor.db-shm .moor/moor.db.lock; do
  [ -e $f ] || fail "$f missing"
  [ "$(mode $f)" = 600 ] || fail "$f is $(mode $f), not 600"
done
grep -q "^url=$URL\$" .moor/moor.db.lock || fail "lock file has no url=$URL: $(cat .moor/moor.db.lock)"
grep -q "^pid=$DEV_PID\$" .moor/moor.db.lock || fail "lock file has no pid=$DEV_PID: $(cat .moor/moor.db.lock)"
grep -q "^started=20[0-9-]*T[0-9:]*Z\$" .moor/moor.db.lock || fail "lock file has no start time: $(cat .moor/moor.db.lock)"
bad=$(grep -v '^\(pid\|started\|url\)=' .moor/moor.db.lock || true)
[ -z "$bad" ] || fail "lock file holds more than pid, start time and URL: $bad"
grep -q "dev\|--listen\|--db" .moor/moor.db.lock && fail "lock file keeps the command line: $(cat .moor/moor.db.lock)"

# The refusal while it runs: one line, with the pid and the URL.
set +e
"$MOOR" resume --db .moor/moor.db 2>"$T/err"; st=$?
set -e
[ $st = 2 ] || fail "resume beside moor dev exited $st"
[ "$(wc -l <"$T/err")" = 1 ] || fail "the in-use message is not one line: $(cat -A "$T/err")"
grep -q "in use by another moor process: pid $DEV_PID, started 20.*, serving $URL" "$T/err" \
  || fail "in-use message: $(cat "$T/err")"
stop_dev

# A moor call holding a secret in its input: the lock file never keeps it.
"$MOOR" call three_steps "{\"witness\":\"$SECRET\",\"sleep\":\"1s\"}" --db .moor/moor.db \
  >/dev/null 2>&1 || true
grep -q "sk-very-secret" .moor/moor.db.lock && fail "the lock file keeps a secret from the command line"

# Read-only commands with a mistyped --db: a clear error, nothing created.
for cmd in "runs" "runs --json" "logs run_x" "logs run_x --json"; do
  set +e
  # shellcheck disable=SC2086
  "$MOOR" $cmd --db "$T/typo/dir/moor.db" >"$T/out" 2>"$T/err"; st=$?
  set -e
  [ $st = 2 ] || fail "moor $cmd on a missing database exited $st, not 2"
  grep -q "no database at $T/typo/dir/moor.db" "$T/err" || fail "moor $cmd message: $(cat "$T/err")"
  [ ! -e "$T/typo" ] || fail "moor $cmd created $T/typo"
done
set +e
"$MOOR" runs --db "$T/none.db" 2>"$T/err"; st=$?
set -e
[ $st = 2 ] && [ ! -e "$T/none.db" ] || fail "moor runs created $T/none.db (exit $st)"
# ...and they still read an existing database.
"$MOOR" runs --db .moor/moor.db | grep -q "three_steps .*completed" || fail "runs on the real database"
pass "0700 .moor/, 0600 files, lock file = pid/start/url, one-line refusal, read-only commands create nothing"
