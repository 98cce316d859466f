#!/usr/bin/env bash
# Self-check of the fake OAuth 2.0 provider (tests/fake/fake_oauth.c): start
# it on port 0 and drive every endpoint with curl: the authorization code flow
# with PKCE end to end (curl -L follows the redirect as a browser would), a
# code used twice (refused, its tokens revoked), a wrong verifier, refresh
# with rotation, 401s (no token, expired, revoked, control reject), a denied
# sign-in, client secrets (form and HTTP Basic), /stats, /control, the log
# (valid JSON, no secret in it) and a clean exit on SIGTERM and SIGINT.
#
# Uses $FAKE_OAUTH when set; else builds it into a temporary directory
# (SANITIZE=1 builds it with AddressSanitizer and UBSan, and any report on its
# stderr fails the check). Exit 0 when everything passed.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
T=$(mktemp -d /tmp/fake-oauth.XXXXXX)
PIDS=""
cleanup() {
  for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

if [ -n "${FAKE_OAUTH:-}" ]; then
  FAKE=$FAKE_OAUTH
else
  FAKE=$T/fake_oauth
  CFLAGS="-std=gnu11 -O1 -g -Wall -Wextra -Wpedantic -Werror"
  if [ -n "${SANITIZE:-}" ]; then
    CFLAGS="$CFLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  fi
  # shellcheck disable=SC2086 # CFLAGS is a list of words
  (cd "$SRC" && cc $CFLAGS -I host -I /usr/include/lua5.4 tests/fake/fake_oauth.c host/http.c host/json.c \
    -llua5.4 -luv -lhttp_parser -lcrypto -lm -o "$FAKE") || fail "build"
fi

# start NAME [options...]: run fake_oauth in the background; sets PID, URL, ERR.
start() {
  local name=$1
  shift
  local out=$T/$name.out
  ERR=$T/$name.err
  : >"$out"
  "$FAKE" "$@" >"$out" 2>"$ERR" &
  PID=$!
  PIDS="$PIDS $PID"
  local i=0
  until [ -n "$(head -1 "$out")" ]; do
    kill -0 "$PID" 2>/dev/null || fail "$name: fake_oauth died: $(cat "$ERR")"
    i=$((i + 1))
    [ $i -le 200 ] || fail "$name: no URL on stdout within 10 s"
    sleep 0.05
  done
  URL=$(head -1 "$out")
  case $URL in http://127.0.0.1:[0-9]*) ;; *) fail "$name: first line is not a URL: $URL" ;; esac
}

# stop [SIGNAL]: the server must exit 0 within 5 s, with no sanitizer report.
stop() {
  local sig=${1:-TERM} i=0 rc=0
  kill -"$sig" "$PID"
  while kill -0 "$PID" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 100 ] || fail "fake_oauth did not exit within 5 s of SIG$sig"
    sleep 0.05
  done
  wait "$PID" || rc=$?
  PIDS=${PIDS/ $PID/} # reaped: its number may be reused
  [ $rc = 0 ] || fail "fake_oauth exited $rc on SIG$sig: $(cat "$ERR")"
  if grep -qE 'Sanitizer|runtime error' "$ERR"; then fail "sanitizer report: $(cat "$ERR")"; fi
}

# req PATH [curl options...]: sets CODE, BODY, HDRS (lower-cased names and values), CURLRC.
req() {
  local path=$1
  shift
  CURLRC=0
  CODE=$(curl -s -o "$T/body" -D "$T/hdrs" -w '%{http_code}' "$@" "$URL$path") || CURLRC=$?
  BODY=$(cat "$T/body" 2>/dev/null || true)
  HDRS=$(tr -d '\r' <"$T/hdrs" 2>/dev/null | tr '[:upper:]' '[:lower:]')
}
expect() { # expect CODE WHAT
  [ "$CODE" = "$1" ] || fail "$2: status $CODE (curl $CURLRC), wanted $1: $BODY"
}
has() { # has TEXT WHAT: BODY contains TEXT
  case $BODY in *"$1"*) ;; *) fail "$2: no $1 in $BODY" ;; esac
}
field() { printf '%s' "$BODY" | sed -n 's/.*"'"$1"'":"\([^"]*\)".*/\1/p'; } # a string field of BODY
stat_is() { # stat_is '"authorize":2,...' WHAT: GET /stats contains it
  req /stats
  expect 200 "stats"
  has "$1" "$2 (stats)"
}

# The PKCE pair (RFC 7636): a verifier, and base64url(SHA-256(verifier)) unpadded.
challenge() { printf %s "$1" | sha256sum | cut -c1-64 | tr a-f A-F | basenc --base16 -d | basenc --base64url | tr -d '=\n'; }
VERIFIER=$(head -c 32 /dev/urandom | basenc --base64url | tr -d '=\n')
CHALLENGE=$(challenge "$VERIFIER")
[ ${#CHALLENGE} = 43 ] || fail "challenge: ${#CHALLENGE} characters"
# RFC 7636 appendix B: the example's verifier gives its challenge
[ "$(challenge dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk)" = E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM ] ||
  fail "the test's S256 is wrong"

# sign_in [extra query] : GET /authorize, following the redirect with curl -L to
# the callback address (a 404 of this server); sets CB (the URL reached), AUTH_CODE.
CLIENT=moor-test
sign_in() {
  local q="response_type=code&client_id=$CLIENT&redirect_uri=$URL/cb&state=st-42&code_challenge=$CHALLENGE"
  q="$q&code_challenge_method=S256&scope=repo%20read${1:-}"
  CB=$(curl -s -L -o /dev/null -w '%{url_effective}' "$URL/authorize?$q") || fail "curl -L /authorize"
  AUTH_CODE=$(printf %s "$CB" | sed -n 's/.*[?&]code=\([^&]*\).*/\1/p')
}
# exchange CODE [VERIFIER] [curl options...]: POST /token grant_type=authorization_code.
exchange() {
  local code=$1 verifier=${2:-$VERIFIER}
  shift 2 || shift $#
  req /token -d grant_type=authorization_code -d "code=$code" --data-urlencode "redirect_uri=$URL/cb" \
    -d "client_id=$CLIENT" -d "code_verifier=$verifier" "$@"
}
refresh() { req /token -d grant_type=refresh_token -d "refresh_token=$1" -d "client_id=$CLIENT" "${@:2}"; }
resource() { req "/resource/$1" -H "Authorization: Bearer $2"; }
control() { req /control -H 'content-type: application/json' --data-binary "$1"; }

# ------------------------------------------------------------ code flow
LOG=$T/oauth.jsonl
start main --log "$LOG"
sign_in
case $CB in "$URL/cb?code=ac_"*"&state=st-42") ;; *) fail "curl -L did not reach the callback with code and state: $CB" ;; esac
printf %s "$AUTH_CODE" | grep -qE '^ac_[0-9a-f]{32}$' || fail "code: $AUTH_CODE"
FIRST_CODE=$AUTH_CODE
req "/authorize?response_type=code&client_id=moor-test&redirect_uri=http://127.0.0.1:9/cb%3Fx%3D1&state=s&code_challenge=$CHALLENGE&code_challenge_method=S256"
expect 302 "authorize"
case $HDRS in *"location: http://127.0.0.1:9/cb?x=1&code=ac_"*"&state=s"*) ;; *) fail "Location: $HDRS" ;; esac
exchange "$AUTH_CODE"
expect 200 "code exchange"
has '"token_type":"Bearer"' "token response"
has '"expires_in":3600' "token response"
has '"scope":"repo read"' "token response"
case $HDRS in *"cache-control: no-store"*) ;; *) fail "token response without Cache-Control: no-store: $HDRS" ;; esac
AT=$(field access_token)
RT=$(field refresh_token)
printf %s "$AT" | grep -qE '^at_[0-9a-f]{32}$' || fail "access token: $BODY"
printf %s "$RT" | grep -qE '^rt_[0-9a-f]{32}$' || fail "refresh token: $BODY"
resource repos/acme/widgets "$AT"
expect 200 "resource with the token"
has '"ok":true' "resource"
has '"path":"repos/acme/widgets"' "resource"
has '"user":"alice"' "resource: the default login"
pass "PKCE flow: authorize (curl -L to the callback), code for tokens, resource with the bearer token"

exchange "$AUTH_CODE"
expect 400 "the code a second time"
has '"error":"invalid_grant"' "code reuse"
has 'already used' "code reuse"
resource repos/acme/widgets "$AT"
expect 401 "a token from a code used twice"
refresh "$RT"
expect 400 "a refresh token from a code used twice"
has '"error":"invalid_grant"' "revoked refresh token"
pass "a code used twice is refused and the tokens it gave are revoked"

sign_in "&login=bob"
OTHER=$(head -c 32 /dev/urandom | basenc --base64url | tr -d '=\n')
exchange "$AUTH_CODE" "$OTHER"
expect 400 "a wrong verifier"
has '"error":"invalid_grant"' "wrong verifier"
has 'code_verifier does not match' "wrong verifier"
exchange "$AUTH_CODE"
expect 400 "the right verifier after a wrong one"
has 'already used' "a code is spent by a failed attempt"
sign_in "&login=bob"
exchange "$AUTH_CODE" short
expect 400 "a short verifier"
has '"error":"invalid_request"' "short verifier"
sign_in "&login=bob"
req /token -d grant_type=authorization_code -d "code=$AUTH_CODE" -d redirect_uri=http://elsewhere/cb \
  -d client_id=moor-test -d "code_verifier=$VERIFIER"
expect 400 "another redirect_uri"
has 'redirect_uri differs' "another redirect_uri"
sign_in "&login=bob"
CLIENT=intruder exchange "$AUTH_CODE"
expect 401 "another client_id"
has '"error":"invalid_client"' "another client_id"
exchange "$AUTH_CODE" "$VERIFIER" -H 'content-type: application/json'
expect 400 "a JSON body"
has 'application/x-www-form-urlencoded' "a JSON body"
exchange "$AUTH_CODE" # neither attempt above reached the code: it is still good
expect 200 "bob's exchange"
BOB_AT=$(field access_token)
BOB_RT=$(field refresh_token)
resource me "$BOB_AT"
expect 200 "bob's token"
has '"user":"bob"' "login= picks who signs in"
exchange ac_00000000000000000000000000000000
expect 400 "an unknown code"
has '"error":"invalid_grant"' "unknown code"
req /token -d grant_type=password -d client_id=moor-test
expect 400 "grant_type=password"
has '"error":"unsupported_grant_type"' "grant_type=password"
pass "token errors: wrong verifier (the code is spent), short verifier, redirect_uri, client, body type, grant type"

# ------------------------------------------------------------ authorize errors
Q="client_id=moor-test&redirect_uri=$URL/cb&state=st-9&code_challenge=$CHALLENGE"
req "/authorize?response_type=code&client_id=nobody&redirect_uri=$URL/cb&state=s&code_challenge=$CHALLENGE&code_challenge_method=S256"
expect 400 "an unknown client_id is not redirected"
has '"error":"invalid_client"' "unknown client_id"
req "/authorize?response_type=code&client_id=moor-test&redirect_uri=javascript:x&state=s"
expect 400 "a bad redirect_uri is not redirected"
has 'redirect_uri' "bad redirect_uri"
req "/authorize?response_type=code&$Q&code_challenge_method=plain"
expect 302 "PKCE plain"
case $HDRS in *"location: $URL/cb?error=invalid_request&error_description="*"&state=st-9"*) ;; *) fail "plain PKCE: $HDRS" ;; esac
req "/authorize?response_type=code&client_id=moor-test&redirect_uri=$URL/cb&state=s"
expect 302 "no PKCE"
case $HDRS in *"error=invalid_request"*) ;; *) fail "no PKCE: $HDRS" ;; esac
req "/authorize?response_type=token&$Q&code_challenge_method=S256"
case $HDRS in *"error=unsupported_response_type"*) ;; *) fail "response_type=token: $HDRS" ;; esac
req "/authorize?response_type=code&$Q&code_challenge_method=S256&state=again"
expect 400 "a parameter given twice"
pass "authorize errors: client and redirect_uri answered here, the others redirected with error and state"

# ------------------------------------------------------------ refresh, 401s
refresh "$BOB_RT"
expect 200 "refresh"
AT2=$(field access_token)
RT2=$(field refresh_token)
[ "$AT2" != "$BOB_AT" ] && [ "$RT2" != "$BOB_RT" ] || fail "refresh gave the same tokens: $BODY"
printf %s "$RT2" | grep -qE '^rt_[0-9a-f]{32}$' || fail "rotated refresh token: $BODY"
resource me "$AT2"
has '"user":"bob"' "a refreshed token keeps its user"
refresh "$BOB_RT"
expect 400 "a rotated refresh token"
has '"error":"invalid_grant"' "rotated refresh token"
req /resource/me
expect 401 "no token"
has '"error":"invalid_token"' "no token"
case $HDRS in *'www-authenticate: bearer error="invalid_token"'*) ;; *) fail "401 without WWW-Authenticate: $HDRS" ;; esac
resource me at_ffffffffffffffffffffffffffffffff
expect 401 "an unknown token"
control '{"expire_all": true}'
expect 200 "control expire_all"
resource me "$AT2"
expect 401 "after expire_all"
has '"error_description":"token expired"' "after expire_all"
refresh "$RT2"
expect 200 "refresh after expiry"
AT3=$(field access_token)
RT3=$(field refresh_token)
resource me "$AT3"
expect 200 "a token refreshed after expire_all"
control '{"reject": true}'
expect 200 "control reject"
has '"reject":true' "control reject"
resource me "$AT3"
expect 401 "a valid token while rejecting"
control '{"reject": false}'
resource me "$AT3"
expect 200 "reject off"
pass "refresh rotates both tokens; 401 for no, unknown, expired and rejected tokens"

# ------------------------------------------------------------ deny, stats, control
control '{"deny": true}'
has '"deny":true' "control deny"
sign_in
case $CB in "$URL/cb?error=access_denied&error_description="*"&state=st-42") ;; *) fail "denied sign-in reached $CB" ;; esac
[ -z "$AUTH_CODE" ] || fail "a denied sign-in carries a code: $CB"
control '{"deny": false}'
stat_is '{"authorize":13,"resource":10,"resource_401":5,"token_code":10,"token_error":11,"token_refresh":4}' \
  "every request counted"
control '{"deny": 1}'
expect 400 "a control value that is not a boolean"
control '{"revoke": true}'
expect 400 "an unknown control field"
has 'deny, reject, expire_all, reset' "unknown control field"
control 'nope'
expect 400 "a control body that is not JSON"
req /nothing
expect 404 "an unknown route"
has '"error":"not_found"' "unknown route"
control '{"reset": true}'
expect 200 "reset"
stat_is '{"authorize":0,"resource":0,"resource_401":0,"token_code":0,"token_error":0,"token_refresh":0}' "after reset"
resource me "$AT3"
expect 401 "a token after reset"
refresh "$RT3"
expect 400 "a refresh token after reset"
pass "deny redirects access_denied with the state; /stats counts; /control checks its input; reset forgets all"

# ------------------------------------------------------------ the log
req /token -H 'content-type: application/json' --data-binary "{\"refresh_token\": \"$RT3\"}"
expect 400 "a JSON token request"
N=$(wc -l <"$LOG")
[ "$N" -gt 50 ] || fail "log has $N lines"
lua5.4 - "$LOG" <<'LUA' || fail "a log line is not the JSON object it should be"
local cj = require "cjson"
local n = 0
for l in io.lines(arg[1]) do
  n = n + 1
  local v = cj.decode(l)
  assert(v.n == n and type(v.method) == "string" and type(v.headers) == "table" and type(v.body) == "string", l)
end
LUA
for s in "$AT" "$RT" "$AT2" "$RT2" "$AT3" "$RT3" "$BOB_AT" "$BOB_RT" "$VERIFIER" "$FIRST_CODE" st-42; do
  grep -qF -- "$s" "$LOG" && fail "a secret reached the log: $s"
done
grep -q '"authorization":"<redacted:42>"' "$LOG" || fail "no redacted bearer token in the log"
grep -q 'code=<redacted:35>' "$LOG" || fail "no redacted code in the log"
grep -q '"body":"grant_type=refresh_token&refresh_token=<redacted:35>&client_id=moor-test"' "$LOG" ||
  fail "refresh body not logged with the token redacted"
grep -qF '"body":"{\"refresh_token\": \"<redacted:35>\"}"' "$LOG" || fail "a JSON body's token not redacted"
stop TERM
pass "log: one JSON line per request, tokens, codes, verifiers and states redacted; SIGTERM exits 0"

# ------------------------------------------------------------ secret, expiry, --deny
start secret --client-id app-1 --client-secret 's3cr:t' --expires-in 1 --deny
CLIENT=app-1
sign_in
case $CB in *"error=access_denied"*) ;; *) fail "--deny: $CB" ;; esac
control '{"reset": true}'
has '"deny":true' "reset goes back to the command line's --deny"
control '{"deny": false}'
sign_in
exchange "$AUTH_CODE"
expect 401 "no client secret"
has 'client authentication required' "no client secret"
sign_in
exchange "$AUTH_CODE" "$VERIFIER" -d client_secret=wrong
expect 401 "a wrong client secret"
has 'wrong client secret' "wrong client secret"
sign_in
exchange "$AUTH_CODE" "$VERIFIER" --data-urlencode 'client_secret=s3cr:t'
expect 200 "client_secret in the form"
has '"expires_in":1' "--expires-in"
SAT=$(field access_token)
SRT=$(field refresh_token)
sign_in
# HTTP Basic: client_id:secret, each form-encoded first (RFC 6749 section 2.3.1)
req /token -d grant_type=authorization_code -d "code=$AUTH_CODE" --data-urlencode "redirect_uri=$URL/cb" \
  -d "code_verifier=$VERIFIER" -u 'app-1:s3cr%3At'
expect 200 "client secret by HTTP Basic"
resource x "$SAT"
expect 200 "a fresh one-second token"
sleep 1.2
resource x "$SAT"
expect 401 "a token after its expires_in"
has 'token expired' "after expires_in"
refresh "$SRT" -u 'app-1:s3cr%3At'
expect 200 "refresh with HTTP Basic"
resource x "$(field access_token)"
expect 200 "the refreshed token"
stat_is '"token_code":4' "the secret server"
stop INT
pass "client secret (form or HTTP Basic), --expires-in, --deny, --client-id; SIGINT exits 0"

# ------------------------------------------------------------ bad arguments
for bad in "--expires-in 0" "--listen nowhere" "--frob"; do
  rc=0
  # shellcheck disable=SC2086 # each case is a list of words
  "$FAKE" $bad >/dev/null 2>"$T/bad.err" || rc=$?
  [ $rc = 2 ] || fail "fake_oauth $bad exited $rc, wanted 2"
  grep -q . "$T/bad.err" || fail "fake_oauth $bad printed no error"
done
pass "bad arguments exit 2 with a message"
echo "all fake_oauth checks passed"
