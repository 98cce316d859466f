# Shared helpers for the end-to-end scripts (sourced). $MOOR is the binary
# under test; every test works in its own temporary directory.
set -eu
: "${MOOR:?MOOR must name the moor binary}"
: "${MOOR_SRC:?MOOR_SRC must name the source tree}"
T=$(mktemp -d /tmp/moor-e2e.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
cp -r "$MOOR_SRC/tests/e2e/agent" "$T/agent"
DB="$T/moor.db"
export MOOR_DB="$DB"

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# wait_for CMD...: poll up to 20 s until CMD succeeds.
wait_for() {
  i=0
  until "$@"; do
    i=$((i + 1))
    [ $i -le 200 ] || fail "timed out waiting for: $*"
    sleep 0.1
  done
}

# count LINE FILE: how many lines of FILE are exactly LINE.
count() { grep -cx "$1" "$2" || true; }

# run_id_from FILE: the run id `moor call` printed on stderr.
run_id_from() { sed -n 's/^run \(run_[0-9a-f]*\) started$/\1/p' "$1" | head -1; }

# event_line RUN KIND: the run's first log line of KIND (moor logs format).
event_line() {
  "$MOOR" logs "$1" | awk -v k="$2" 'index($0, " " k " ") { print; exit }'
}
