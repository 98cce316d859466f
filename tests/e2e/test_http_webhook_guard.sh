#!/usr/bin/env bash
# Deliveries from outside (issue 7, items 2, 8, 12):
# - the webhook route reaches webhook tokens only, /v1/hooks/{token} hook
#   tokens only, and a session's internal inbox (session-<id>) neither; every
#   refusal is the same 404 as an unknown token, so nothing is revealed;
# - credentials in a webhook request's headers are redacted before they are
#   recorded: neither the database file nor the event stream holds them;
# - deliveries queued for a run that waits elsewhere are capped per token
#   (count and bytes): 429 beyond, and nothing recorded for the refused ones.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0

# The answer for a token nobody has.
req POST /.well-known/workflow/v1/webhook/no-such-token '{"a":1}'
expect_error 404 not_found "unknown webhook token"
UNKNOWN=$BODY
same_404() {
  expect 404 "$1"
  [ "$BODY" = "$UNKNOWN" ] || fail "$1: answered differently from an unknown token: $BODY"
}

# 2. A hook with a chosen token is not a webhook.
call hook_wait '{"token":"order-42"}'
H=$RUN
wait_for grep -q hook.waiting <("$MOOR" logs "$H" 2>/dev/null)
req POST /.well-known/workflow/v1/webhook/order-42 '{"forged":true}'
same_404 "a hook token on the webhook route"
[ "$(status "$H")" = running ] || fail "the webhook route resumed a hook: $(run_body "$H")"
# A session's inbox is neither.
req POST /v1/sessions '{}'
expect 201 "create a session"
S=$(field sessionId)
[ -n "$S" ] || fail "no sessionId: $BODY"
req POST "/.well-known/workflow/v1/webhook/session-$S" '{"message":"hi"}'
same_404 "a session inbox on the webhook route"
req POST "/v1/hooks/session-$S" '{"message":"hi"}'
same_404 "a session inbox on /v1/hooks"
req POST "/.well-known/workflow/v1/webhook/session-run_nope" '{"message":"hi"}'
same_404 "an unknown session's inbox"
# A webhook token is not a hook.
call webhook_queue '{}'
Q=$RUN
sse "$Q" "$T/sse_q"
wait_for grep -q '^event: progress$' "$T/sse_q"
WH=$(grep -A1 '^event: progress$' "$T/sse_q" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p')
WTOK=${WH##*/}
[ -n "$WTOK" ] || fail "no webhook URL: $(cat "$T/sse_q")"
req POST "/v1/hooks/$WTOK" '{"forged":true}'
same_404 "a webhook token on /v1/hooks"
"$MOOR" logs "$Q" | grep -q hook.received && fail "/v1/hooks delivered to a webhook"
# The proper routes still deliver.
req POST /v1/hooks/order-42 '{"paid":true}'
expect 202 "a hook token on /v1/hooks"
settled "$H" completed
run_body "$H" | grep -qF '"result":{"got":{"paid":true}}' || fail "hook result: $BODY"
pass "webhook route: webhook tokens only; /v1/hooks: hook tokens only; inboxes neither; one 404 for all"

# 8. Credentials are redacted before they are recorded.
call webhook_race "{\"witness\":\"$T/w\",\"timer\":\"1h\",\"sleep\":\"1ms\"}"
R=$RUN
sse "$R" "$T/sse_r"
wait_for grep -q '^event: progress$' "$T/sse_r"
WR=$(grep -A1 '^event: progress$' "$T/sse_r" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p')
code=$(curl -s -o "$T/wh" -w '%{http_code}' -X POST "$WR" \
  -H 'Authorization: Bearer SECRET-AUTH-1' -H 'Proxy-Authorization: Basic SECRET-PROXY-2' \
  -H 'Cookie: sid=SECRET-COOKIE-3' -H 'Set-Cookie: a=SECRET-SETCOOKIE-4' -H 'X-Api-Key: SECRET-KEY-5' \
  -H 'X-Request-Id: visible-6' --data-binary 'body')
[ "$code" = 202 ] || fail "delivery with credentials got $code: $(cat "$T/wh")"
settled "$R" completed
wait $SSE_PID 2>/dev/null || true
grep -q '"x-request-id":"visible-6"' "$T/sse_r" || fail "other headers are not recorded: $(grep hook.received -A1 "$T/sse_r")"
grep -q '"authorization":"\[redacted\]"' "$T/sse_r" || fail "no redacted authorization on the stream"
grep -q '"cookie":"\[redacted\]"' "$T/sse_r" || fail "no redacted cookie on the stream"
grep -q SECRET- "$T/sse_r" && fail "a credential reached the stream: $(grep SECRET- "$T/sse_r")"
curl -s -N --max-time 10 "$URL/v1/runs/$R/events" -H 'Last-Event-ID: 0' >"$T/sse_r2"
grep -q SECRET- "$T/sse_r2" && fail "a credential is on the replayed stream"
"$MOOR" logs "$R" --json >"$T/logs_r" 2>&1 || true
grep -q SECRET- "$T/logs_r" && fail "a credential is in moor logs"
for f in "$DB" "$DB-wal"; do
  [ -f "$f" ] || continue
  grep -aq SECRET- "$f" && fail "a credential is in $f: $(grep -ao 'SECRET-[A-Z]*-[0-9]' "$f" | sort -u | tr '\n' ' ')"
done
pass "authorization, proxy-authorization, cookie, set-cookie, x-api-key redacted in the database and on the stream"

# 12. Queued deliveries are capped per token. The webhook_queue run never
#     awaits its webhook, so every delivery queues.
head -c 1000000 /dev/zero | tr '\0' 'a' >"$T/1mb"
# The database's size as SQLite sees it (its pages, whether still in the WAL or not).
size() { sqlite3 "$DB" "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size"; }
before=$(size)
codes=
for i in 1 2 3 4 5 6 7 8 9 10; do
  c=$(curl -s -o "$T/big.$i" -w '%{http_code}' -X POST -H 'Content-Type: text/plain' --data-binary "@$T/1mb" "$WH")
  codes="$codes $c"
done
[ "$codes" = " 202 202 202 202 429 429 429 429 429 429" ] || fail "10 x 1 MB to a queued webhook answered:$codes"
grep -q '"code":"too_many_deliveries"' "$T/big.10" || fail "429 body: $(cat "$T/big.10")"
grep -q 'MiB' "$T/big.10" || fail "the 429 does not say the limit: $(cat "$T/big.10")"
grew=$(( $(size) - before ))
[ $grew -lt 5500000 ] || fail "the database grew by $grew bytes for 4 accepted MB"
n=$(sqlite3 "$DB" "SELECT count(*) FROM deliveries WHERE token='$WTOK'")
[ "$n" = 4 ] || fail "$n deliveries recorded for the webhook, not 4"
pass "10 x 1 MB queued: 4 accepted (4 MiB per token), 6 refused with 429, the database grew by $grew bytes"

# The count cap: 1,000 queued deliveries per token, small ones included.
call webhook_queue '{}'
Q2=$RUN
sse "$Q2" "$T/sse_q2"
wait_for grep -q '^event: progress$' "$T/sse_q2"
WH2=$(grep -A1 '^event: progress$' "$T/sse_q2" | sed -n 's/^data: .*"payload":{"url":"\([^"]*\)"}}$/\1/p')
urls=()
for _ in $(seq 1005); do urls+=(-o /dev/null "$WH2"); done
curl -s -w "%{http_code}\n" -X POST --data-binary x "${urls[@]}" >"$T/codes"
[ "$(grep -c '^202$' "$T/codes")" = 1000 ] || fail "$(grep -c '^202$' "$T/codes") of 1005 small deliveries accepted"
[ "$(grep -c '^429$' "$T/codes")" = 5 ] || fail "$(grep -c '^429$' "$T/codes") of 1005 small deliveries refused"
[ "$(tail -1 "$T/codes")" = 429 ] || fail "the last delivery was not refused"
n=$(sqlite3 "$DB" "SELECT count(*) FROM deliveries WHERE token='${WH2##*/}'")
[ "$n" = 1000 ] || fail "$n deliveries recorded, not 1000"
# Other tokens are not affected by a full one.
req POST /v1/hooks/nobody '{}'
expect 404 "an unknown hook next to a full one"
stop_dev

# The cap holds across a restart (it is counted from the database).
start_dev "$T/example" 127.0.0.1:0
code=$(curl -s -o "$T/r" -w '%{http_code}' -X POST --data-binary 'x' "$URL/${WH2#http://*/}") || true
[ "$code" = 429 ] || fail "after a restart a full webhook answered $code"
code=$(curl -s -o "$T/r" -w '%{http_code}' -X POST -H 'Content-Type: text/plain' --data-binary "@$T/1mb" \
  "$URL/${WH#http://*/}") || true
[ "$code" = 429 ] || fail "after a restart a webhook full by bytes answered $code"
stop_dev
pass "1,000 queued deliveries per token, then 429; the caps hold after a restart"
