#!/usr/bin/env bash
# Self-check of the fake model server (tests/fake/fake_model.c): start it with
# each example script on port 0, drive it with curl, and check the answers in
# both APIs' formats, the request log (numbering, redaction, valid JSON, going
# on across a restart), the delay, 429 + retry-after, a dropped connection,
# streamed answers (both APIs, truncate, cut), a
# script error, and a clean exit on SIGTERM and SIGINT.
#
# Uses $FAKE_MODEL when set; else builds it into a temporary directory
# (SANITIZE=1 builds it with AddressSanitizer and UBSan, and any report on its
# stderr fails the check). Exit 0 when everything passed.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
SCRIPTS=$HERE/scripts
T=$(mktemp -d /tmp/fake-model.XXXXXX)
PIDS=""
cleanup() {
  for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

if [ -n "${FAKE_MODEL:-}" ]; then
  FAKE=$FAKE_MODEL
else
  FAKE=$T/fake_model
  CFLAGS="-std=gnu11 -O1 -g -Wall -Wextra -Wpedantic -Werror"
  if [ -n "${SANITIZE:-}" ]; then
    CFLAGS="$CFLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  fi
  # shellcheck disable=SC2086 # CFLAGS is a list of words
  (cd "$SRC" && cc $CFLAGS -I host -I /usr/include/lua5.4 tests/fake/fake_model.c host/http.c host/json.c \
    -llua5.4 -luv -lhttp_parser -lm -o "$FAKE") || fail "build"
fi

# start NAME SCRIPT LOG: run fake_model in the background; sets PID, URL, ERR.
start() {
  local out=$T/$1.out
  ERR=$T/$1.err
  : >"$out"
  "$FAKE" --script "$2" --log "$3" >"$out" 2>"$ERR" &
  PID=$!
  PIDS="$PIDS $PID"
  local i=0
  until [ -n "$(head -1 "$out")" ]; do
    kill -0 "$PID" 2>/dev/null || fail "$1: fake_model died: $(cat "$ERR")"
    i=$((i + 1))
    [ $i -le 200 ] || fail "$1: no URL on stdout within 10 s"
    sleep 0.05
  done
  URL=$(head -1 "$out")
  case $URL in http://127.0.0.1:[0-9]*) ;; *) fail "$1: first line is not a URL: $URL" ;; esac
}

# stop [SIGNAL]: the server must exit 0 within 5 s, with no sanitizer report.
stop() {
  local sig=${1:-TERM} i=0 rc=0
  kill -"$sig" "$PID"
  while kill -0 "$PID" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 100 ] || fail "fake_model did not exit within 5 s of SIG$sig"
    sleep 0.05
  done
  wait "$PID" || rc=$?
  PIDS=${PIDS/ $PID/} # reaped: its number may be reused
  [ $rc = 0 ] || fail "fake_model exited $rc on SIG$sig: $(cat "$ERR")"
  if grep -qE 'Sanitizer|runtime error' "$ERR"; then fail "sanitizer report: $(cat "$ERR")"; fi
}

# post PATH DATA [curl options...]: sets CODE, BODY, HDRS (lower-cased), CURLRC.
post() {
  local path=$1 data=$2
  shift 2
  local b=$T/body.$BASHPID h=$T/hdrs.$BASHPID # a subshell may post at the same time
  CURLRC=0
  CODE=$(curl -s -o "$b" -D "$h" -w '%{http_code}' -H 'content-type: application/json' \
    "$@" --data-binary "$data" "$URL$path") || CURLRC=$?
  BODY=$(cat "$b" 2>/dev/null || true)
  HDRS=$(tr -d '\r' <"$h" 2>/dev/null | tr '[:upper:]' '[:lower:]')
  rm -f "$b" "$h"
}

expect() { # expect CODE WHAT
  [ "$CODE" = "$1" ] || fail "$2: status $CODE (curl $CURLRC), wanted $1: $BODY"
}
has() { # has TEXT WHAT: BODY contains TEXT
  case $BODY in *"$1"*) ;; *) fail "$2: no $1 in $BODY" ;; esac
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
line() { sed -n "${2}p" "$1"; } # line FILE N

oa() { printf '{"model":"gpt-test","messages":[{"role":"user","content":"%s"}]}' "$1"; }
an() { printf '{"model":"claude-test","max_tokens":100,"messages":[{"role":"user","content":[{"type":"text","text":"%s"}]}]}' "$1"; }

# ------------------------------------------------------------------ hello
LOG=$T/hello.jsonl
start hello "$SCRIPTS/hello.lua" "$LOG"
post /v1/chat/completions "$(oa hi)" -H 'Authorization: Bearer sk-test-SECRET-1234'
expect 200 "openai text"
has '"object":"chat.completion"' "openai text"
has '"message":{"content":"Hello from the fake model.","role":"assistant"}' "openai text"
has '"finish_reason":"stop"' "openai text"
has '"model":"gpt-test"' "openai text echoes the model"
has '"usage":{"completion_tokens":5,"prompt_tokens":10,"total_tokens":15}' "openai usage"
case $HDRS in *"content-type: application/json"*) ;; *) fail "content type: $HDRS" ;; esac
post /v1/messages "$(an hi)" -H 'x-api-key: sk-ant-SECRET-99'
expect 200 "anthropic text"
has '"content":[{"text":"Hello from the fake model.","type":"text"}]' "anthropic text"
has '"type":"message"' "anthropic text"
has '"stop_reason":"end_turn"' "anthropic text"
has '"usage":{"input_tokens":10,"output_tokens":5}' "anthropic usage"
CURLRC=0
CODE=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/v1/chat/completions") || CURLRC=$?
BODY=$(cat "$T/body")
expect 404 "GET on a model route"
has '"error":{"message":"no route for GET /v1/chat/completions"' "404 body"
post /v1/embeddings '{}'
expect 404 "unknown path"
printf 'not json \377 at all' >"$T/raw"
post /v1/chat/completions "@$T/raw"
expect 200 "a request body that is not JSON (the script gets json = nil)"
pass "hello: OpenAI and Anthropic text answers, 404 JSON for other routes"

[ "$(wc -l <"$LOG")" = 5 ] || fail "log has $(wc -l <"$LOG") lines, wanted 5: $(cat "$LOG")"
for i in 1 2 3 4 5; do
  case $(line "$LOG" $i) in *'"n":'$i',"path":'*) ;; *) fail "log line $i: $(line "$LOG" $i)" ;; esac
done
grep -q SECRET "$LOG" && fail "a secret reached the log: $(cat "$LOG")"
case $(line "$LOG" 1) in *'"authorization":"<redacted:26>"'*) ;; *) fail "authorization not redacted: $(line "$LOG" 1)" ;; esac
case $(line "$LOG" 2) in *'"x-api-key":"<redacted:16>"'*) ;; *) fail "x-api-key not redacted: $(line "$LOG" 2)" ;; esac
case $(line "$LOG" 1) in *'"body":"{\"model\":\"gpt-test\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"'*) ;;
  *) fail "log body is not the raw request text: $(line "$LOG" 1)" ;; esac
case $(line "$LOG" 3) in *'"method":"GET","n":3,"path":"/v1/chat/completions"'*) ;; *) fail "log line 3: $(line "$LOG" 3)" ;; esac
case $(line "$LOG" 5) in *'"body":"not json '$'\xef\xbf\xbd'' at all"'*) ;; *) fail "invalid UTF-8 not replaced: $(line "$LOG" 5)" ;; esac
lua5.4 - "$LOG" <<'LUA' || fail "a log line is not the JSON object it should be: $(cat "$LOG")"
local cj = require "cjson"
for l in io.lines(arg[1]) do
  local v = cj.decode(l)
  assert(type(v.n) == "number" and type(v.headers) == "table" and type(v.body) == "string", l)
end
LUA
stop TERM
pass "log: one JSON line per request, numbered, secrets redacted, raw body; SIGTERM exits 0"

start hello2 "$SCRIPTS/hello.lua" "$LOG"
post /v1/chat/completions "$(oa again)"
expect 200 "after a restart"
has '"id":"chatcmpl-fake-6"' "numbering after a restart"
[ "$(wc -l <"$LOG")" = 6 ] || fail "log has $(wc -l <"$LOG") lines after the restart"
case $(line "$LOG" 6) in *'"n":6,'*) ;; *) fail "restarted server numbered $(line "$LOG" 6)" ;; esac
stop INT
pass "restart: numbering goes on from the log's lines; SIGINT exits 0"

# ------------------------------------------------------------------ flaky
start flaky "$SCRIPTS/flaky.lua" "$T/flaky.jsonl"
post /v1/chat/completions "$(oa go)"
expect 429 "flaky request 1"
case $HDRS in *"retry-after: 1"*) ;; *) fail "no retry-after header: $HDRS" ;; esac
has '"error":{"code":null,"message":"rate limited: try again in 1 s","param":null,"type":"rate_limit_error"}' "429 body"
post /v1/chat/completions "$(oa go)"
expect 200 "flaky request 2"
has '"content":"ok after retry"' "flaky request 2"
stop
pass "flaky: 429 with retry-after: 1, then 200"

# ----------------------------------------------------------------- errors
start errors "$SCRIPTS/errors.lua" "$T/errors.jsonl"
post /v1/chat/completions "$(oa 500)"
expect 500 "errors 500"
has '"type":"api_error"' "500 body"
post /v1/messages "$(an 'please 500')"
expect 500 "errors 500, Anthropic"
has '{"error":{"message":"the fake model failed on purpose","type":"api_error"},"type":"error"}' "Anthropic error shape"
post /v1/chat/completions "$(oa 401)"
expect 401 "errors 401"
[ "$BODY" = '{"error":{"message":"invalid api key"}}' ] || fail "401 body: $BODY"
post /v1/chat/completions "$(oa garbage)"
expect 200 "errors garbage"
[ "$BODY" = 'this is not JSON {' ] || fail "garbage body: $BODY"
t0=$(now_ms)
post /v1/chat/completions "$(oa slow)" --max-time 1
[ "$CURLRC" = 28 ] || fail "a 1 s client timeout on slow: curl $CURLRC, status $CODE"
# While one answer waits, others are answered at once.
t0=$(now_ms)
(post /v1/chat/completions "$(oa slow)"; echo "$CODE $(($(now_ms) - t0))" >"$T/slow") &
SLOW=$!
sleep 0.2
post /v1/chat/completions "$(oa quick)"
expect 200 "a request while another waits"
has '"content":"you said: quick"' "echo"
[ $(($(now_ms) - t0)) -lt 2000 ] || fail "a request waited behind a delayed one"
wait $SLOW
read -r code ms <"$T/slow"
[ "$code" = 200 ] || fail "slow answered $code"
{ [ "$ms" -ge 2900 ] && [ "$ms" -lt 6000 ]; } || fail "slow answered after $ms ms, wanted about 3000"
post /v1/chat/completions "$(oa drop)"
[ "$CURLRC" = 52 ] || fail "drop: curl $CURLRC (status $CODE), wanted 52 (empty reply)"
post /v1/chat/completions "$(oa 'once more')"
expect 200 "a request after a drop, same URL"
has '"content":"you said: once more"' "once more"
# SIGTERM while an answer waits for its delay: a clean exit all the same.
(post /v1/chat/completions "$(oa slow)"; echo "$CURLRC" >"$T/slow") &
SLOW=$!
sleep 0.3
stop
wait $SLOW
[ "$(cat "$T/slow")" = 52 ] || fail "the waiting request at shutdown: curl $(cat "$T/slow"), wanted 52"
pass "errors: 500 (both APIs), 401, garbage, slow (3 s; a client timeout; others not held up), drop, SIGTERM while waiting"

# ----------------------------------------------------------------- deploy
start deploy "$SCRIPTS/deploy.lua" "$T/deploy.jsonl"
post /v1/chat/completions "$(oa 'deploy the api')"
expect 200 "deploy request 1"
has '"tool_calls":[{"function":{"arguments":"{\"service\":\"api\"}","name":"deploy"},"id":"call_deploy_1","type":"function"}]' "tool call"
has '"finish_reason":"tool_calls"' "tool call finish reason"
has '"content":null' "tool call content"
post /v1/chat/completions '{"model":"gpt-test","messages":[{"role":"user","content":"deploy the api"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_deploy_1","type":"function","function":{"name":"deploy","arguments":"{\"service\":\"api\"}"}}]},{"role":"tool","tool_call_id":"call_deploy_1","content":"v42 live"}]}'
expect 200 "deploy request 2"
has '"message":{"content":"Deployed: v42 live","role":"assistant"}' "final text"
post /v1/messages "$(an 'deploy the api')"
expect 200 "deploy Anthropic request 1"
has '"content":[{"id":"call_deploy_1","input":{"service":"api"},"name":"deploy","type":"tool_use"}]' "tool_use"
has '"stop_reason":"tool_use"' "tool_use stop reason"
post /v1/messages '{"model":"claude-test","max_tokens":100,"messages":[{"role":"user","content":"deploy the api"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_9","name":"deploy","input":{"service":"api"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":[{"type":"text","text":"v43 live"}]}]}]}'
expect 200 "deploy Anthropic request 2"
has '"content":[{"text":"Deployed: v43 live","type":"text"}]' "Anthropic final text"
stop
pass "deploy: a tool call, then the final text from its result (both APIs)"

# ----------------------------------------------------------- script errors
cat >"$T/broken.lua" <<'EOF'
return function(req)
  if req.n == 1 then error("boom in the script") end
  if req.n == 2 then return { status = "teapot" } end
  if req.n == 3 then return { json = { f = print } } end
  return fake.text("still alive")
end
EOF
start broken "$T/broken.lua" "$T/broken.jsonl"
post /v1/chat/completions "$(oa x)"
expect 500 "a Lua error"
has 'boom in the script' "a Lua error's message"
grep -q 'boom in the script' "$ERR" || fail "no stderr line for the script error: $(cat "$ERR")"
post /v1/chat/completions "$(oa x)"
expect 500 "a bad status"
has 'status must be an integer' "a bad status"
post /v1/chat/completions "$(oa x)"
expect 500 "a function in json"
has 'is not JSON' "a function in json"
post /v1/chat/completions "$(oa x)"
expect 200 "after script errors"
[ "$(wc -l <"$T/broken.jsonl")" = 4 ] || fail "broken: log has $(wc -l <"$T/broken.jsonl") lines"
stop
pass "script errors: 500 with the message, a line on stderr, the server goes on"

# ---------------------------------------------------------------- streams
oas() { printf '{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"%s"}]}' "$1"; }
ans() { printf '{"model":"claude-test","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"%s"}]}' "$1"; }
start streams "$SCRIPTS/streams.lua" "$T/streams.jsonl"
post /v1/chat/completions "$(oas hello)"
expect 200 "an openai stream"
printf '%s\n' "$HDRS" | grep -q '^content-type: text/event-stream' || fail "openai stream: $HDRS"
[ "$(printf '%s\n' "$BODY" | grep -c '^data: {.*"content":"')" -ge 3 ] || fail "openai stream: text not in pieces: $BODY"
[ "$(printf '%s\n' "$BODY" | grep -v '^$' | tail -1)" = 'data: [DONE]' ] || fail "openai stream: no [DONE] at the end: $BODY"
has '"usage":{"completion_tokens":5' "the usage chunk"
post /v1/messages "$(ans hello)"
expect 200 "an anthropic stream"
for e in message_start content_block_start content_block_delta content_block_stop message_delta message_stop; do
  printf '%s\n' "$BODY" | grep -q "^event: $e$" || fail "anthropic stream: no $e: $BODY"
done
post /v1/messages "$(ans 'unfinished')"
! printf '%s\n' "$BODY" | grep -q '^event: message_stop' || fail "truncate: the stream has its end: $BODY"
has 'content_block_stop' "truncate keeps the rest"
post /v1/chat/completions "$(oas 'please cut')"
[ "$CURLRC" != 0 ] || fail "cut: the stream was not cut (curl $CURLRC): $BODY"
post /v1/chat/completions "$(oas 'please cut')"
expect 200 "a stream after the cut one"
has 'data: [DONE]' "the second cut request streams whole"
post /v1/chat/completions "$(oa 'hello')"
expect 200 "no stream asked"
has '"object":"chat.completion"' "an unstreamed answer"
stop
pass "streams: both APIs' event streams, truncate, cut, unstreamed when not asked"

# ---------------------------------------------------------- refused setups
echo 'return 42' >"$T/notfn.lua"
rc=0
"$FAKE" --script "$T/notfn.lua" >"$T/notfn.out" 2>"$T/notfn.err" || rc=$?
{ [ $rc != 0 ] && grep -q 'must return a function' "$T/notfn.err"; } || fail "a script returning 42: rc $rc, $(cat "$T/notfn.err")"
echo 'return function(' >"$T/syntax.lua"
rc=0
"$FAKE" --script "$T/syntax.lua" >/dev/null 2>"$T/syntax.err" || rc=$?
{ [ $rc != 0 ] && grep -q 'syntax.lua:' "$T/syntax.err"; } || fail "a syntax error: rc $rc, $(cat "$T/syntax.err")"
rc=0
"$FAKE" --listen nowhere >/dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "usage error: rc $rc"
if grep -qE 'Sanitizer|runtime error' "$T"/*.err; then fail "sanitizer report: $(cat "$T"/*.err)"; fi
pass "refused: a script that returns no function, a syntax error, bad usage"

echo "all fake_model checks passed"
