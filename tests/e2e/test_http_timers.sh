#!/usr/bin/env bash
# `moor dev` fires timers on time with no HTTP traffic to wake it:
#  1. a timer that fell due while the host was down fires right after start;
#  2. a timer that fell due while another run's slow step held the host fires
#     as soon as that step ends.
# (The witness files are watched without any request to the server, since a
# request would wake its loop.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0
call three_steps "{\"witness\":\"$T/a\",\"sleep\":\"1s\"}"
A=$RUN
wait_for grep -qx two "$T/a" 2>/dev/null
kill_dev
sleep 1.5 # the sleep falls due while nothing runs
start_dev "$T/example" 127.0.0.1:0
i=0
until grep -qx three "$T/a"; do
  i=$((i + 1))
  [ $i -le 50 ] || fail "a timer overdue at start did not fire within 5 s of the restart (no request woke the host)"
  sleep 0.1
done
settled "$A" completed
pass "an overdue timer fires on start"

call three_steps "{\"witness\":\"$T/b\",\"sleep\":\"1s\"}"
B=$RUN
call sleep_then_hold "{\"witness\":\"$T/c\",\"sleep\":\"300ms\",\"hold\":2}"
C=$RUN
wait_for grep -qx hold "$T/c" 2>/dev/null
i=0
until grep -qx three "$T/b"; do
  i=$((i + 1))
  [ $i -le 50 ] || fail "a timer that fell due during another run's step did not fire within 5 s after it (no request woke the host)"
  sleep 0.1
done
settled "$B" completed
settled "$C" completed
stop_dev
pass "a timer due during a slow step fires when the step ends"
