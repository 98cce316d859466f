#!/usr/bin/env bash
# The sign-in callback is the one path under /v1/ that needs no API token
# (issue 12 item 4: its 32-byte `state` is the secret). With MOOR_API_TOKEN
# set, GET /v1/auth/callback answers without it, and nothing else under /v1
# does: not a longer name (/v1/auth/callbackX, /v1/auth/callback/), not a
# path through it (/v1/auth/callback/../runs, %2F, ;), not an absolute-form
# request target naming another /v1 route.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
export MOOR_API_TOKEN="tok-$$-0123456789abcdef0123456789abcdef"
start_dev agent 127.0.0.1:0
PORT=$(port_of "$URL")

# code TARGET: the status of GET with TARGET as the request line's target, no token.
code() { curl -s -o "$T/body" -w '%{http_code}' --path-as-is --request-target "$1" "$URL/"; }

c=$(code "/v1/auth/callback?state=nope&code=x")
[ "$c" = 404 ] || fail "the callback without a token: $c $(cat "$T/body")"
grep -q 'Sign-in link expired' "$T/body" || fail "the callback's page: $(cat "$T/body")"
c=$(code "http://127.0.0.1:$PORT/v1/auth/callback?state=nope")
[ "$c" = 404 ] || fail "the callback in absolute form: $c"
for target in /v1/runs /v1/inputs /v1/auth/callbackX /v1/auth/callback/ "/v1/auth/callback/../runs" \
  "/v1/auth/callback%2F..%2Fruns" "/v1/auth/callback;x" "/v1/auth/callback#x" "/v1//runs" \
  "http://127.0.0.1:$PORT/v1/runs" "http://x/v1/auth/callback/../runs" \
  "http://127.0.0.1:$PORT/v1/auth/callback%3F/../../runs" "HTTP://127.0.0.1:$PORT/v1/inputs"; do
  c=$(code "$target")
  [ "$c" = 401 ] || fail "$target without the token: $c $(cat "$T/body")"
done
c=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $MOOR_API_TOKEN" "$URL/v1/runs")
[ "$c" = 200 ] || fail "/v1/runs with the token: $c"
stop_dev
pass "only GET /v1/auth/callback skips MOOR_API_TOKEN under /v1"
