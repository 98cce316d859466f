#!/usr/bin/env bash
# libcurl is loaded at the first request (host/curl_dl.c), not at start, and
# libcrypto at the first SHA-256 (host/core_os.c): the moor program links
# neither, a `moor dev` that has served a tool call but made no request has
# mapped neither, and the first moor.fetch loads libcurl and works (a POST to
# the server's own API: any HTTP status back will do). (SHA-256 itself:
# tests/lua/approvals_spec.lua.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

command -v readelf >/dev/null || fail "readelf (binutils) is needed"
readelf -d "$MOOR" | grep -q 'NEEDED.*libcurl' && fail "$MOOR links libcurl: $(readelf -d "$MOOR" | grep NEEDED)"
readelf -d "$MOOR" | grep -q 'NEEDED.*libcrypto' && fail "$MOOR links libcrypto: $(readelf -d "$MOOR" | grep NEEDED)"
readelf -d "$MOOR" | grep -q 'NEEDED.*libuv' || fail "readelf shows no NEEDED libraries: the check above proves nothing"
pass "the moor program links neither libcurl nor libcrypto"

start_dev example 127.0.0.1:0
maps() { cat "/proc/$DEV_PID/maps"; }
maps | grep -q 'libuv' || fail "no libuv in moor dev's maps: the check below proves nothing"
call word_count '{"text": "one two three"}'
wait_for sh -c "\"$MOOR\" runs | grep -q '$RUN.*completed'"
maps | grep -q 'libcurl' && fail "moor dev mapped libcurl before any request"
maps | grep -q 'libcrypto' && fail "moor dev mapped libcrypto before any request or hash"
pass "moor dev ran a tool without loading libcurl or libcrypto"

call fetch_probe "{\"url\": \"$URL/v1/runs\", \"key\": \"k\"}"
wait_for sh -c "\"$MOOR\" runs | grep -q '$RUN.*completed'"
"$MOOR" logs "$RUN" | grep 'step.result' | grep -q '"status":[1-5][0-9][0-9]' \
  || fail "moor.fetch got no HTTP status: $("$MOOR" logs "$RUN" | tail -3)"
maps | grep -q 'libcurl' || fail "moor dev made a request without libcurl mapped"
pass "the first moor.fetch loads libcurl and gets its answer"
kill_dev
