#!/usr/bin/env bash
# libcurl is loaded at the first request (host/curl_dl.c), not at start: the
# moor program does not link it, a `moor dev` that has served a tool call but
# made no request has not mapped it, and the first moor.fetch loads it and
# works (a POST to the server's own API: any HTTP status back will do).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

command -v readelf >/dev/null || fail "readelf (binutils) is needed"
readelf -d "$MOOR" | grep -q 'NEEDED.*libcurl' && fail "$MOOR links libcurl: $(readelf -d "$MOOR" | grep NEEDED)"
readelf -d "$MOOR" | grep -q 'NEEDED.*libuv' || fail "readelf shows no NEEDED libraries: the check above proves nothing"
pass "the moor program does not link libcurl"

start_dev example 127.0.0.1:0
maps() { cat "/proc/$DEV_PID/maps"; }
maps | grep -q 'libuv' || fail "no libuv in moor dev's maps: the check below proves nothing"
call word_count '{"text": "one two three"}'
wait_for sh -c "\"$MOOR\" runs | grep -q '$RUN.*completed'"
maps | grep -q 'libcurl' && fail "moor dev mapped libcurl before any request"
pass "moor dev ran a tool without loading libcurl"

call fetch_probe "{\"url\": \"$URL/v1/runs\", \"key\": \"k\"}"
wait_for sh -c "\"$MOOR\" runs | grep -q '$RUN.*completed'"
"$MOOR" logs "$RUN" | grep 'step.result' | grep -q '"status":[1-5][0-9][0-9]' \
  || fail "moor.fetch got no HTTP status: $("$MOOR" logs "$RUN" | tail -3)"
maps | grep -q 'libcurl' || fail "moor dev made a request without libcurl mapped"
pass "the first moor.fetch loads libcurl and gets its answer"
kill_dev
