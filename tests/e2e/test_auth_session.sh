#!/usr/bin/env bash
# Issue 12, "What it must show": sign-in inside a step over HTTP, against the
# fake OAuth provider (tests/fake/fake_oauth) and the fake model server. A
# session's model calls github_repo; its step needs a token, so the run parks
# and the session's stream shows authorization.required with a URL, which
# GET /v1/inputs lists too. Following the URL with curl -L (as a browser
# would: authorize -> 302 -> moor's /v1/auth/callback) resumes the run, the
# step runs again, exchanges the code once, and the tool's result reaches the
# model. A second session (another principal) calls counted_repo, a copy with
# a counting step before the auth step: the host is killed with -9 while it
# is parked on the sign-in, restarted on the same database and port, the URL
# is followed, the step is killed with -9 again right after the code
# exchange, and after that restart the run completes with the counting step
# not repeated and the code exchanged once.
# Then: the tokens and refresh tokens (read from the token file, mode 0600)
# are in no database file, WAL, `moor logs --json`, SSE stream or stderr; a
# declined sign-in reaches the model as "declined"; a cancelled session's
# late callback gets 404; a plain tool (defineTool) parks its turn on the
# sign-in and runs again after it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
: "${FAKE_OAUTH:?FAKE_OAUTH must name the fake OAuth provider}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5"|model = "openai/fake-model"|' example/agent.lua
grep -q 'openai/fake-model' example/agent.lua || fail "could not point the agent at the fake model"
COUNT="$T/count.log"
export AUTH_COUNT_FILE="$COUNT"

# counted_repo: github_repo with a counting step before the auth step, and a
# line at the start of each attempt of the auth step.
cat >example/tools/counted_repo.lua <<'LUA'
local moor = require "moor"
local s = moor.schema

local fakehub = moor.connection("fakehub")

local function mark(line)
  local f = assert(io.open(assert(os.getenv("AUTH_COUNT_FILE")), "a"))
  f:write(line, "\n")
  f:close()
end

local before = moor.step("countBefore", function(repository)
  mark("before " .. repository)
  return true
end)

local readRepository = moor.step("readRepository", function(ctx, repository)
  mark("read " .. repository)
  local token = ctx.getToken(fakehub).token
  local hold_file = os.getenv("AUTH_COUNT_FILE") .. ".hold"
  local hold = io.open(hold_file)
  if hold then -- (the test kills the host here, after the exchange)
    hold:close()
    mark("hold " .. repository)
    for _ = 1, 300 do -- until the file goes, at most 30 s
      hold = io.open(hold_file)
      if not hold then break end
      hold:close()
      os.execute("sleep 0.1")
    end
  end
  local res, err = moor.fetch(os.getenv("FAKEHUB_URL") .. "/resource/repos/" .. repository, {
    headers = { authorization = "Bearer " .. token, accept = "application/json" },
  })
  if not res then error("FakeHub did not answer: " .. tostring(err)) end
  if res.status == 401 then ctx.requireAuth(fakehub) end
  if res.status ~= 200 then error(("FakeHub returned %d"):format(res.status)) end
  return moor.json.decode(res.body)
end)

return moor.defineWorkflowTool {
  description = "Read a repository from FakeHub, counting the steps.",
  inputSchema = s.object { repository = s.string { minLength = 1 } },
  execute = function(input, ctx)
    before(input.repository)
    return readRepository(ctx, input.repository)
  end,
}
LUA

# plain_repo: the same read in a plain tool (defineTool), whose body is one
# step: the session's turn parks on the sign-in and the call runs again.
cat >example/tools/plain_repo.lua <<'LUA'
local moor = require "moor"
local s = moor.schema

local fakehub = moor.connection("fakehub")

return moor.defineTool {
  description = "Read a repository from FakeHub in a plain tool.",
  inputSchema = s.object { repository = s.string { minLength = 1 } },
  execute = function(input, ctx)
    local f = assert(io.open(assert(os.getenv("AUTH_COUNT_FILE")), "a"))
    f:write("plain ", input.repository, "\n")
    f:close()
    local token = ctx.getToken(fakehub).token
    local res = assert(moor.fetch(os.getenv("FAKEHUB_URL") .. "/resource/repos/" .. input.repository, {
      headers = { authorization = "Bearer " .. token },
    }))
    if res.status == 401 then ctx.requireAuth(fakehub) end
    return moor.json.decode(res.body)
  end,
}
LUA

# The model: the word "counted" (or "plain") in the user's text picks
# counted_repo (or plain_repo), else github_repo, with {"repository":
# "octo/hello"}; once the tool's result is back, the final text quotes it.
cat >"$T/model.lua" <<'LUA'
return function(req)
  for _, r in ipairs(fake.tool_results(req)) do
    return fake.text("Tool " .. r.name .. " said: " .. r.content)
  end
  local text = fake.last_user_text(req) or ""
  local tool = text:find("counted", 1, true) and "counted_repo" or text:find("plain", 1, true) and "plain_repo"
    or "github_repo"
  return fake.tool_calls({ { name = tool, arguments = { repository = "octo/hello" } } })
end
LUA

"$FAKE_OAUTH" --listen 127.0.0.1:0 --log "$T/oauth.jsonl" >"$T/oauth.out" 2>"$T/oauth.err" &
OAUTH_PID=$!
wait_for grep -qs '^http://' "$T/oauth.out"
export FAKEHUB_URL
FAKEHUB_URL=$(head -1 "$T/oauth.out")
"$FAKE_MODEL" --script "$T/model.lua" --listen 127.0.0.1:0 --log "$T/model.jsonl" \
  >"$T/fake.out" 2>"$T/fake.err" &
FAKE_PID=$!
wait_for grep -qs '^http://' "$T/fake.out"
export OPENAI_BASE_URL="$(head -1 "$T/fake.out")/v1" OPENAI_API_KEY="sk-test-SECRET-never-logged"

stats() { curl -s --max-time 5 "$FAKEHUB_URL/stats"; }
stat_is() { # stat_is NAME VALUE WHAT
  local v
  v=$(stats | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p")
  [ "$v" = "$2" ] || fail "$3: fake_oauth $1 = $v, not $2: $(stats)"
}
control() {
  curl -s --max-time 5 -H 'Content-Type: application/json' --data-binary "$1" "$FAKEHUB_URL/control" \
    | grep -q '"ok":true' || fail "POST /control $1"
}

# new_session MESSAGE [PRINCIPAL]: POST /v1/sessions; sets SID.
new_session() {
  local body="{\"message\": \"$1\"}"
  [ -n "${2-}" ] && body="{\"message\": \"$1\", \"principal\": \"$2\"}"
  req POST /v1/sessions "$body"
  [ "$CODE" = 201 ] || fail "POST /v1/sessions: $CODE $BODY"
  SID=$(field sessionId)
  [ -n "$SID" ] || fail "no sessionId in $BODY"
}
# follow SID FILE: read the session's stream into FILE in the background.
follow() {
  curl -s -N --max-time 60 "$URL/v1/sessions/$1/stream" >"$2" &
  STREAM_PID=$!
}
unfollow() { kill "$STREAM_PID" 2>/dev/null || true; wait "$STREAM_PID" 2>/dev/null || true; }
has_event() { grep -q "^event: $1\$" "$2" 2>/dev/null; }
# sign_in_url FILE: the URL of the first authorization.required in FILE.
sign_in_url() {
  grep -A1 '^event: authorization.required$' "$1" | grep '^data: ' | head -1 \
    | sed -n 's/.*"authorization":{[^}]*"url":"\([^"]*\)".*/\1/p'
}
# browse URL: what a browser does with the sign-in link (sets BROWSE:
# "<status> <final URL>").
browse() {
  BROWSE=$(curl -s -L --max-redirs 3 --max-time 10 -o "$T/page.html" -w '%{http_code} %{url_effective}' "$1") \
    || fail "curl -L $1 failed"
}
# final_text SID TEXT (for wait_for): the session's transcript has TEXT.
final_text() {
  curl -s --max-time 2 "$URL/v1/sessions/$1" >"$T/session.json" || true
  grep -qF "$2" "$T/session.json"
}

start_dev example 127.0.0.1:0
PORT=$(port_of "$URL")

# --- 1. A session's tool call needs a token: it parks on a sign-in.
new_session "what is octo/hello?"
SID1=$SID
follow "$SID1" "$T/stream1"
wait_for has_event authorization.required "$T/stream1"
AUTH_URL=$(sign_in_url "$T/stream1")
case $AUTH_URL in "$FAKEHUB_URL/authorize?"*) ;; *) fail "bad sign-in URL: $AUTH_URL ($(cat "$T/stream1"))" ;; esac
for part in "client_id=moor-test" "code_challenge_method=S256" "scope=repo" "state=" \
  "redirect_uri=http%3A%2F%2F127.0.0.1%3A$PORT%2Fv1%2Fauth%2Fcallback"; do
  case $AUTH_URL in *"$part"*) ;; *) fail "no $part in the sign-in URL $AUTH_URL" ;; esac
done
grep -A1 '^event: authorization.required$' "$T/stream1" | grep -q '"name":"fakehub"' \
  || fail "authorization.required does not name the connection: $(cat "$T/stream1")"
# GET /v1/inputs lists it.
req GET /v1/inputs
expect 200 "GET /v1/inputs"
printf '%s' "$BODY" | grep -qF '"kind":"authorization"' || fail "GET /v1/inputs lacks the sign-in: $BODY"
printf '%s' "$BODY" | grep -qF "\"url\":\"$AUTH_URL\"" || fail "GET /v1/inputs lacks the URL: $BODY"
stat_is resource 0 "no resource request without a token"
stat_is token_code 0 "no exchange before the sign-in"
[ "$(grep -c . "$T/model.jsonl")" = 1 ] || fail "expected one model request so far: $(cat "$T/model.jsonl")"
pass "a session's tool call parks on a sign-in: authorization.required on the stream and in GET /v1/inputs"

# The PKCE verifier of the sign-in under way is in the token file (0600), and
# must be nowhere else either.
cp "$T/tokens.json" "$T/pending1.json" || fail "no token file while a sign-in is under way"
[ "$(stat -c %a "$T/tokens.json")" = 600 ] || fail "the token file is mode $(stat -c %a "$T/tokens.json")"

# --- Following the URL as a browser: authorize -> 302 -> /v1/auth/callback.
browse "$AUTH_URL"
case $BROWSE in "200 $URL/v1/auth/callback?code=ac_"*) ;; *) fail "the sign-in did not land on the callback: $BROWSE" ;; esac
grep -q 'signed in' "$T/page.html" || fail "the callback page: $(cat "$T/page.html")"
wait_for final_text "$SID1" 'Tool github_repo said: '
grep -qF '\"path\":\"repos/octo/hello\"' "$T/session.json" || fail "the final text lacks the repository: $(cat "$T/session.json")"
grep -qF '\"user\":\"alice\"' "$T/session.json" || fail "the final text lacks the user: $(cat "$T/session.json")"
# The model's second request carried the tool result the step read.
[ "$(grep -c . "$T/model.jsonl")" = 2 ] || fail "model requests: $(cat "$T/model.jsonl")"
sed -n 2p "$T/model.jsonl" | grep -qF 'repos/octo/hello' || fail "the tool result did not reach the model: $(sed -n 2p "$T/model.jsonl")"
stat_is token_code 1 "the code was exchanged once"
stat_is resource 1 "one resource request"
wait_for has_event authorization.completed "$T/stream1"
grep -A1 '^event: authorization.completed$' "$T/stream1" | grep -q '"outcome":"authorized"' \
  || fail "authorization.completed is not authorized: $(cat "$T/stream1")"
unfollow
# The step was retried: its run's log has the callback and two attempts.
RUN1=$("$MOOR" runs --json | grep -o '"id":"run_[0-9a-f]*"[^}]*"tool":"github_repo"' | head -1 | sed 's/"id":"\([^"]*\)".*/\1/')
[ -n "$RUN1" ] || fail "no github_repo run in: $("$MOOR" runs --json)"
"$MOOR" logs "$RUN1" --json >"$T/logs1.json"
for k in authorization.required authorization.callback authorization.completed; do
  grep -qF "\"kind\":\"$k\"" "$T/logs1.json" || fail "$RUN1 has no $k: $(cat "$T/logs1.json")"
done
pass "curl -L through the provider reaches the callback; the step runs again, the code is exchanged once, the result reaches the model"

# --- 2. kill -9 while parked on the sign-in (another principal, so a new sign-in).
new_session "counted: what is octo/hello?" bob
SID2=$SID
follow "$SID2" "$T/stream2"
wait_for has_event authorization.required "$T/stream2"
AUTH_URL2=$(sign_in_url "$T/stream2")
[ -n "$AUTH_URL2" ] && [ "$AUTH_URL2" != "$AUTH_URL" ] || fail "no fresh sign-in URL: $(cat "$T/stream2")"
unfollow
[ "$(count "before octo/hello" "$COUNT")" = 1 ] || fail "the counting step ran $(count "before octo/hello" "$COUNT") times"
[ "$(count "read octo/hello" "$COUNT")" = 1 ] || fail "the auth step ran $(count "read octo/hello" "$COUNT") times"
# Someone else speaks in the session while the call waits: the call still
# signs in as bob, who launched it.
req POST "/v1/sessions/$SID2" '{"message": "mallory here, hello", "principal": "mallory"}'
[ "$CODE" = 202 ] || fail "a steering message from mallory: $CODE $BODY"
[ -s "$T/moor.db-wal" ] && cp "$T/moor.db-wal" "$T/wal.copy1"
cp "$T/tokens.json" "$T/pending2.json"
kill_dev
start_dev example "127.0.0.1:$PORT"
# The sign-in is still listed after the restart.
req GET /v1/inputs
printf '%s' "$BODY" | grep -qF "\"url\":\"$AUTH_URL2\"" || fail "GET /v1/inputs after the restart: $BODY"
# The step after the callback exchanges the code, stores the token, and is
# killed with -9 (inside the step) before it ends: after the restart its
# retry reads the stored token instead of exchanging the spent code again.
: >"$COUNT.hold"
browse "$AUTH_URL2&login=bob"
case $BROWSE in "200 $URL/v1/auth/callback?code=ac_"*) ;; *) fail "the sign-in after the restart: $BROWSE" ;; esac
wait_for grep -q '^hold octo/hello$' "$COUNT"
stat_is token_code 2 "the second sign-in's code exchanged"
kill_dev
rm -f "$COUNT.hold"
start_dev example "127.0.0.1:$PORT"
wait_for final_text "$SID2" 'Tool counted_repo said: '
grep -qF '\"user\":\"bob\"' "$T/session.json" || fail "bob's result: $(cat "$T/session.json")"
! grep -qF 'mallory' "$T/tokens.json" || fail "mallory has a token: $(cat "$T/tokens.json")"
[ "$(count "before octo/hello" "$COUNT")" = 1 ] || fail "the counting step ran $(count "before octo/hello" "$COUNT") times after the restart"
[ "$(count "read octo/hello" "$COUNT")" = 3 ] || fail "the auth step ran $(count "read octo/hello" "$COUNT") times, not 3"
stat_is token_code 2 "each sign-in's code exchanged once"
[ "$(grep -c . "$T/model.jsonl")" = 4 ] || fail "model requests: $(cat "$T/model.jsonl")"
[ "$(sort "$T/model.jsonl" | sed 's/"n":[0-9]*//' | uniq -d | wc -l)" = 0 ] || fail "a model request repeated"
sed -n 4p "$T/model.jsonl" | grep -qF 'bob' || fail "bob's result did not reach the model: $(sed -n 4p "$T/model.jsonl")"
pass "kill -9 parked on a sign-in, restart, callback: the run completes, the step before it not repeated"

# --- 3. A declined sign-in fails the tool call; the model reads "declined".
control '{"deny": true}'
new_session "what is octo/hello now?" carol
SID3=$SID
follow "$SID3" "$T/stream3"
wait_for has_event authorization.required "$T/stream3"
browse "$(sign_in_url "$T/stream3")"
case $BROWSE in "200 $URL/v1/auth/callback?"*error=access_denied*) ;; *) fail "the declined sign-in: $BROWSE" ;; esac
grep -q 'declined' "$T/page.html" || fail "the declined page: $(cat "$T/page.html")"
wait_for final_text "$SID3" 'Tool github_repo said: '
grep -q 'declined' "$T/session.json" || fail "the final text lacks declined: $(cat "$T/session.json")"
[ "$(grep -c . "$T/model.jsonl")" = 6 ] || fail "model requests: $(cat "$T/model.jsonl")"
sed -n 6p "$T/model.jsonl" | grep -qF 'declined' || fail "the model did not read declined: $(sed -n 6p "$T/model.jsonl")"
wait_for has_event authorization.completed "$T/stream3"
grep -A1 '^event: authorization.completed$' "$T/stream3" | grep -q '"outcome":"declined"' \
  || fail "authorization.completed is not declined: $(cat "$T/stream3")"
unfollow
control '{"deny": false}'
pass "a declined sign-in fails the tool call and the model reads 'declined'"

# --- 4. A cancelled session's late callback gets 404 and changes nothing.
new_session "what is octo/hello again?" dave
SID4=$SID
follow "$SID4" "$T/stream4"
wait_for has_event authorization.required "$T/stream4"
AUTH_URL4=$(sign_in_url "$T/stream4")
req POST "/v1/sessions/$SID4/cancel"
expect 202 "POST /v1/sessions/$SID4/cancel"
not_listed() { req GET /v1/inputs; ! printf '%s' "$BODY" | grep -qF "$AUTH_URL4"; }
wait_for not_listed
! grep -qF '"principal":"dave"' "$T/tokens.json" || fail "the withdrawn sign-in is still kept: $(cat "$T/tokens.json")"
BEFORE=$(stats)
browse "$AUTH_URL4&login=dave"
case $BROWSE in "404 $URL/v1/auth/callback?code=ac_"*) ;; *) fail "a late callback after the cancel: $BROWSE" ;; esac
sleep 0.5
[ "$(stats | sed 's/"authorize":[0-9]*,//')" = "$(printf '%s' "$BEFORE" | sed 's/"authorize":[0-9]*,//')" ] \
  || fail "the late callback exchanged something: $BEFORE -> $(stats)"
[ "$(grep -c . "$T/model.jsonl")" = 7 ] || fail "the cancelled session asked the model again: $(cat "$T/model.jsonl")"
unfollow
pass "a cancelled session's late callback gets 404 and exchanges nothing"

# --- 5. A plain tool in a session: the turn parks, the call runs again after the sign-in.
new_session "plain: what is octo/hello?" erin
SID5=$SID
follow "$SID5" "$T/stream5"
wait_for has_event authorization.required "$T/stream5"
[ "$(count "plain octo/hello" "$COUNT")" = 1 ] || fail "the plain tool ran $(count "plain octo/hello" "$COUNT") times"
browse "$(sign_in_url "$T/stream5")&login=erin"
case $BROWSE in "200 $URL/v1/auth/callback?code=ac_"*) ;; *) fail "the plain tool's sign-in: $BROWSE" ;; esac
wait_for final_text "$SID5" 'Tool plain_repo said: '
grep -qF '\"user\":\"erin\"' "$T/session.json" || fail "erin's result: $(cat "$T/session.json")"
[ "$(count "plain octo/hello" "$COUNT")" = 2 ] || fail "the plain tool ran $(count "plain octo/hello" "$COUNT") times, not 2"
stat_is token_code 3 "the plain tool's code exchanged once"
unfollow
pass "a plain tool in a session parks its turn on the sign-in and runs again after it"

# --- Secrets: the tokens (random) are in the token file and nowhere else.
TOKENS="$T/tokens.json"
[ -f "$TOKENS" ] || fail "no token file at $TOKENS"
[ "$(stat -c %a "$TOKENS")" = 600 ] || fail "the token file is mode $(stat -c %a "$TOKENS")"
grep -o '"\(at\|rt\)_[0-9a-f]\{32\}"' "$TOKENS" | tr -d '"' | sort -u >"$T/secrets"
cat "$T/pending1.json" "$T/pending2.json" "$TOKENS" | grep -o '"verifier":"[^"]*"' | sed 's/"verifier":"\([^"]*\)"/\1/' \
  | sort -u >"$T/verifiers"
[ "$(grep -c . "$T/verifiers")" -ge 2 ] || fail "expected the sign-ins' PKCE verifiers in the token file: $(cat "$T/verifiers")"
[ "$(grep -c '^at_' "$T/secrets")" = 3 ] || fail "expected three access tokens (local, bob, erin) in the file: $(cat "$T/secrets")"
[ "$(grep -c '^rt_' "$T/secrets")" = 3 ] || fail "expected three refresh tokens in the file: $(cat "$T/secrets")"
[ -s "$T/moor.db-wal" ] && cp "$T/moor.db-wal" "$T/wal.copy2"
"$MOOR" runs --json >"$T/runs.json"
: >"$T/logs.all"
for run in $(grep -o '"id":"run_[0-9a-f]*"' "$T/runs.json" | sed 's/"id":"\([^"]*\)"/\1/'); do
  "$MOOR" logs "$run" --json >>"$T/logs.all"
done
[ "$(grep -o '"kind":"' "$T/logs.all" | wc -l)" -gt 50 ] || fail "too few events to mean anything: $(cat "$T/logs.all")"
grep -qF 'authorization.callback' "$T/logs.all" || fail "the logs lack the callbacks"
# (the one-time codes are in the log, as the step's input after a sign-in:
# the grep below would see a token there the same way)
grep -q '"code":"ac_[0-9a-f]\{32\}"' "$T/logs.all" || fail "the logs lack the callbacks' codes"
cat "$T/verifiers" >>"$T/secrets"
stop_dev
for f in "$T"/moor.db "$T"/moor.db-wal "$T"/wal.copy* "$T/logs.all" "$T"/stream? "$T/dev.err" "$T/dev.out" \
  "$T/model.jsonl" "$T/session.json"; do
  [ -e "$f" ] || continue
  if grep -qaFf "$T/secrets" "$f"; then fail "a token is in $f"; fi
done
if grep -qaF 'SECRET' "$T/logs.all" "$T"/stream? "$T/dev.err"; then fail "the API key leaked"; fi
kill "$FAKE_PID" "$OAUTH_PID"
wait "$FAKE_PID" "$OAUTH_PID" 2>/dev/null || true
pass "the tokens and refresh tokens are in no database file, WAL, moor logs, stream or stderr; the token file is 0600"
