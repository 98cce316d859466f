# Helpers for the scripts that drive `moor dev` over HTTP with curl (sourced
# after lib.sh). $T/example is the example agent (deploy, refund_order,
# render_video, ...) with the test tools of tests/e2e/agent added.
cp -r "$MOOR_SRC/agent" "$T/example"
cp "$T"/agent/tools/*.lua "$T/example/tools/"
export MOOR_DEPLOY_DIR="$T/deploys" MOOR_LEDGER="$T/refunds.ledger"
WITNESS="$MOOR_DEPLOY_DIR/witness.log"
DEV_PID=
URL=

# start_dev AGENT LISTEN [moor dev options...]: start `moor dev` in the
# background and wait for the URL on the first line of its stdout. Sets
# DEV_PID and URL; its output goes to $T/dev.out and (appended) $T/dev.err.
start_dev() {
  local agent=$1 listen=$2
  shift 2
  : >"$T/dev.out"
  "$MOOR" dev --agent "$agent" --listen "$listen" "$@" >"$T/dev.out" 2>>"$T/dev.err" &
  DEV_PID=$!
  local i=0
  until grep -q '^http://' "$T/dev.out"; do
    kill -0 "$DEV_PID" 2>/dev/null || fail "moor dev exited before serving: $(cat "$T/dev.err")"
    i=$((i + 1))
    [ $i -le 300 ] || fail "moor dev did not print its URL: $(cat "$T/dev.err")"
    sleep 0.1
  done
  URL=$(head -1 "$T/dev.out")
  case $URL in http://127.0.0.1:[0-9]*) ;; *) fail "bad URL line: $URL" ;; esac
}

# port_of URL: the port of http://host:port
port_of() { echo "${1##*:}"; }

# kill_dev: kill -9 the running moor dev.
kill_dev() {
  kill -9 "$DEV_PID" 2>/dev/null || true
  wait "$DEV_PID" 2>/dev/null || true
  DEV_PID=
}

# stop_dev: SIGTERM, and it must exit 0 (a clean shutdown).
stop_dev() {
  local st=0
  kill -TERM "$DEV_PID"
  wait "$DEV_PID" || st=$?
  DEV_PID=
  [ $st = 0 ] || fail "moor dev exited $st on SIGTERM: $(tail -5 "$T/dev.err")"
}

# req METHOD PATH [BODY] [curl options...]: one request to $URL (a POST as
# application/json); sets CODE (the status) and BODY (the response body).
req() {
  local method=$1 path=$2 body=${3-}
  shift 2
  [ $# -gt 0 ] && shift
  local args=(-s -o "$T/resp" -w '%{http_code}' -X "$method" --max-time 10)
  [ -n "${API_TOKEN-}" ] && args+=(-H "Authorization: Bearer $API_TOKEN")
  # API POSTs must say they carry JSON, even with no body (a browser's
  # simple requests cannot).
  [ "$method" = POST ] && args+=(-H 'Content-Type: application/json')
  if [ -n "$body" ]; then args+=(--data-binary "$body"); fi
  CODE=$(curl "${args[@]}" "$@" "$URL$path") || CODE=000
  BODY=$(cat "$T/resp" 2>/dev/null || true)
}

# expect STATUS WHAT: the last req answered STATUS.
expect() {
  [ "$CODE" = "$1" ] || fail "$2: expected $1, got $CODE: $BODY"
}

# expect_error STATUS CODE WHAT: a JSON error {"error":{"code":CODE,...}}.
expect_error() {
  expect "$1" "$3"
  printf '%s' "$BODY" | grep -q "^{\"error\":{\"code\":\"$2\",\"message\":\"" \
    || fail "$3: expected error code $2, got: $BODY"
}

# field NAME [JSON]: the first string value of "NAME":"..." (default: $BODY).
field() { printf '%s' "${2-$BODY}" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" | head -1; }

# call TOOL JSON: start a run over HTTP; sets RUN.
call() {
  req POST "/v1/tools/$1/calls" "$2"
  expect 201 "POST /v1/tools/$1/calls"
  RUN=$(printf '%s' "$BODY" | sed -n 's/.*"runId":"\(run_[0-9a-f]*\)".*/\1/p')
  [ -n "$RUN" ] || fail "no runId in: $BODY"
}

# status RUN: the run's status as GET /v1/runs/RUN shows it.
status() {
  req GET "/v1/runs/$1"
  expect 200 "GET /v1/runs/$1"
  field status
}

# has_status RUN STATUS (for wait_for)
has_status() { [ "$(status "$1")" = "$2" ]; }

# run_body RUN: GET /v1/runs/RUN's body.
run_body() {
  req GET "/v1/runs/$1"
  expect 200 "GET /v1/runs/$1"
  printf '%s' "$BODY"
}

# pending_request RUN: the requestId of RUN's pending question in GET /v1/inputs.
pending_request() {
  req GET /v1/inputs
  expect 200 "GET /v1/inputs"
  printf '%s' "$BODY" | grep -o "\"requestId\":\"req_[^\"]*\",\"runId\":\"$1\"" \
    | sed 's/"requestId":"\([^"]*\)".*/\1/' | head -1
}

# sse RUN FILE [curl options]: follow RUN's event stream into FILE in the
# background (at most 60 s); sets SSE_PID.
sse() {
  local run=$1 file=$2
  shift 2
  local args=(-s -N --max-time 60)
  [ -n "${API_TOKEN-}" ] && args+=(-H "Authorization: Bearer $API_TOKEN")
  curl "${args[@]}" "$@" "$URL/v1/runs/$run/events" >"$file" &
  SSE_PID=$!
}

# raw PORT DATA [SECONDS]: send DATA (printf format) over a raw TCP
# connection with bash's /dev/tcp and print what comes back within SECONDS.
raw() {
  local port=$1 data=$2 secs=${3-5}
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    # shellcheck disable=SC2059
    printf "$data" >&3
    timeout "$secs" cat <&3 || true
  )
}

# settled RUN STATUS: wait until RUN is no longer running, then it must be
# STATUS (else fail with the run as the API shows it).
not_running() { [ "$(status "$1")" != running ]; }
settled() {
  wait_for not_running "$1"
  local got
  got=$(status "$1")
  [ "$got" = "$2" ] || fail "run $1 ended $got, not $2: $(run_body "$1")"
}
