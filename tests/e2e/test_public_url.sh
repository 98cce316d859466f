#!/usr/bin/env bash
# --public-url (issue 14 item 4): `moor dev --public-url http://hooks.example.test`
# mints webhook URLs under it; a delivery to the local listener with that URL's
# path (as a proxy or tunnel forwards it, Host and all) reaches the run; after
# a restart on another port with the same public URL the earlier URL still
# works. `moor call`, which serves nothing, says what a webhook URL it mints
# needs, and mints under the public URL when one is set.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
PUB=http://hooks.example.test

start_dev "$T/example" 127.0.0.1:0 --public-url "$PUB"
PORT1=$(port_of "$URL")
grep -q "public URL $PUB" "$T/dev.err" || fail "moor dev does not say its public URL: $(cat "$T/dev.err")"
call webhook_respond '{"headers":{},"deliveries":2}'
: >"$T/sse"
sse "$RUN" "$T/sse"
wait_for grep -q '^event: hook.created$' "$T/sse"
WH=$(field url "$(grep -A1 '^event: hook.created$' "$T/sse" | sed -n 's/^data: //p')")
case $WH in "$PUB"/.well-known/workflow/v1/webhook/?*) ;; *) fail "webhook URL not under $PUB: $WH" ;; esac
WPATH=${WH#"$PUB"}
kill "$SSE_PID" 2>/dev/null || true

# The proxy forwards to the listener: same path, the public Host.
code=$(curl -s -o "$T/d1" -w '%{http_code}' --max-time 10 -X POST -H "Host: hooks.example.test" \
  -H 'Content-Type: application/json' -d '{"n":1}' "$URL$WPATH")
[ "$code" = 200 ] || fail "first delivery through the listener got $code: $(cat "$T/d1")"
wait_for sh -c "'$MOOR' logs '$RUN' | grep -q hook.received"
stop_dev

# Restart on another port, same public URL: the URL minted before still works.
PORT2=$PORT1
for _ in 1 2 3 4 5; do
  start_dev "$T/example" 127.0.0.1:0 --public-url "$PUB"
  PORT2=$(port_of "$URL")
  [ "$PORT2" != "$PORT1" ] && break
  stop_dev
done
[ "$PORT2" != "$PORT1" ] || fail "could not restart on another port than $PORT1"
code=$(curl -s -o "$T/d2" -w '%{http_code}' --max-time 10 -X POST -H "Host: hooks.example.test" \
  -H 'Content-Type: application/json' -d '{"n":2}' "$URL$WPATH")
[ "$code" = 200 ] || fail "delivery after the restart on port $PORT2 got $code: $(cat "$T/d2")"
settled "$RUN" completed
[ "$("$MOOR" logs "$RUN" | grep -c ' hook.received ')" = 2 ] || fail "not two deliveries: $("$MOOR" logs "$RUN")"

# A run started over the API after the restart mints under the public URL too.
call webhook_respond '{"headers":{}}'
: >"$T/sse2"
sse "$RUN" "$T/sse2"
wait_for grep -q '^event: hook.created$' "$T/sse2"
grep -A1 '^event: hook.created$' "$T/sse2" | grep -qF "\"url\":\"$PUB/.well-known/workflow/v1/webhook/" \
  || fail "a webhook minted after the restart is not under $PUB: $(cat "$T/sse2")"
kill "$SSE_PID" 2>/dev/null || true

# A sign-in's callback is under the public URL too, and reaches the run
# through the listener (declined here: no provider runs).
call github_repo '{"repository":"acme/widgets"}'
gh=$RUN
signin() { req GET /v1/inputs; printf '%s' "$BODY" | grep -q "\"runId\":\"$gh\"" ; }
wait_for signin
auth_url=$(printf '%s' "$BODY" | sed -n 's/.*"url":"\(http[^"]*authorize[^"]*\)".*/\1/p' | head -1)
case $auth_url in *"redirect_uri=http%3A%2F%2Fhooks.example.test%2Fv1%2Fauth%2Fcallback"*) ;;
  *) fail "the sign-in link does not return to $PUB/v1/auth/callback: $auth_url" ;; esac
state=$(printf '%s' "$auth_url" | sed -n 's/.*[?&]state=\([^&]*\).*/\1/p')
[ -n "$state" ] || fail "no state in $auth_url"
code=$(curl -s -o "$T/cb" -w '%{http_code}' --max-time 10 -H "Host: hooks.example.test" \
  "$URL/v1/auth/callback?state=$state&error=access_denied")
[ "$code" = 200 ] && grep -q "declined" "$T/cb" || fail "the callback through the listener got $code: $(cat "$T/cb")"
settled "$gh" failed
stop_dev

# moor call mints, serves nothing, and says so: under the listen default...
CDB="$T/call.db"
"$MOOR" call webhook_respond '{"headers":{}}' --agent "$T/example" --db "$CDB" </dev/null >"$T/c1.out" 2>"$T/c1.err" \
  && fail "moor call of a webhook tool did not park"
grep -q "^note: webhook http://127.0.0.1:[0-9]*/.well-known/workflow/v1/webhook/[A-Za-z0-9_-]*: moor call serves nothing, so this URL needs a running 'moor dev'" "$T/c1.err" \
  || fail "moor call did not say what its webhook URL needs: $(cat "$T/c1.err")"
grep -q "or a public URL (--public-url URL or \$MOOR_PUBLIC_URL)" "$T/c1.err" || fail "no public URL hint: $(cat "$T/c1.err")"
# ... and under --public-url.
"$MOOR" call webhook_respond '{"headers":{}}' --agent "$T/example" --db "$CDB" --public-url "$PUB/" </dev/null \
  >"$T/c2.out" 2>"$T/c2.err" && fail "moor call of a webhook tool did not park"
grep -q "^note: webhook $PUB/.well-known/workflow/v1/webhook/[A-Za-z0-9_-]*: moor call serves nothing; deliveries reach this run once a 'moor dev' serves the public URL" "$T/c2.err" \
  || fail "moor call --public-url: $(cat "$T/c2.err")"
pass "public URL: webhooks minted under it, delivered through the listener, valid across a restart on port $PORT2; moor call says what its URLs need"
