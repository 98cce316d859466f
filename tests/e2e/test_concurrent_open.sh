#!/usr/bin/env bash
# A fresh database opened at the same moment by a writer (`moor call`) and
# by a reader that takes no lock (`moor runs`, as scripts poll with it):
# the writer must succeed, whichever creates the schema, and the reader
# either reads it or (when it came first) says there is no database yet:
# a read-only command never creates one (issue 7, item 21).
. "$(dirname "$0")/lib.sh"
cd "$T"
for i in $(seq 1 30); do
  db="$T/fresh$i.db"
  "$MOOR" call flaky '{"mode":"progress"}' --db "$db" >"$T/call.out" 2>"$T/call.err" &
  pid=$!
  "$MOOR" runs --db "$db" >/dev/null 2>"$T/runs.err" &
  rpid=$!
  st=0
  wait $pid || st=$?
  rst=0
  wait $rpid || rst=$?
  [ $st = 0 ] || fail "attempt $i: moor call on a fresh database exited $st: $(cat "$T/call.err")"
  if [ $rst != 0 ]; then
    [ $rst = 2 ] && grep -q "^moor: no database at $db" "$T/runs.err" \
      || fail "attempt $i: moor runs on a fresh database exited $rst: $(cat "$T/runs.err")"
  fi
done
pass "30 fresh databases opened by a writer and a reader at once"
