#!/usr/bin/env bash
# Issue 7 item 3: redirects must not carry keys. Two fake servers on
# 127.0.0.1 (two ports: two origins): the first answers every request 307 to
# the second. A session with an anthropic/ model pointed at the first must
# fail its turn (providers follow no redirect) and the second must see
# nothing; moor.fetch follows the redirect but drops the author's headers
# (x-api-key, x-custom) once it leaves the origin.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
: "${FAKE_MODEL:?FAKE_MODEL must name the fake model server}"
cd "$T"
sed -i 's|model = "openai/gpt-5.5"|model = "anthropic/claude-fake"|' example/agent.lua
grep -q 'anthropic/claude-fake' example/agent.lua || fail "could not point the agent at anthropic/"

cat >"$T/second.lua" <<'LUA'
return function(req) return fake.anthropic_text("second server answered") end
LUA
"$FAKE_MODEL" --script "$T/second.lua" --listen 127.0.0.1:0 --log "$T/second.jsonl" >"$T/second.out" 2>"$T/second.err" &
wait_for grep -q '^http://' "$T/second.out"
SECOND=$(head -1 "$T/second.out")
cat >"$T/first.lua" <<LUA
return function(req)
  return { status = 307, headers = { location = "$SECOND" .. req.path }, body = "moved" }
end
LUA
"$FAKE_MODEL" --script "$T/first.lua" --listen 127.0.0.1:0 --log "$T/first.jsonl" >"$T/first.out" 2>"$T/first.err" &
wait_for grep -q '^http://' "$T/first.out"
FIRST=$(head -1 "$T/first.out")
[ "${FIRST##*:}" != "${SECOND##*:}" ] || fail "the two servers share a port"
export ANTHROPIC_BASE_URL="$FIRST" ANTHROPIC_API_KEY="sk-ant-redirect-SECRET"
start_dev example 127.0.0.1:0

# A provider: no redirect followed, the turn fails saying why.
req POST /v1/sessions '{"message": "hello"}'
[ "$CODE" = 201 ] || fail "POST /v1/sessions: $CODE $BODY"
SID=$(field sessionId)
turn_over() { "$MOOR" logs "$SID" | grep -qE ' turn\.(completed|failed) '; }
wait_for turn_over
"$MOOR" logs "$SID" | grep -E ' turn\.failed ' | grep -q 'redirect' \
  || fail "the turn did not fail on the redirect: $("$MOOR" logs "$SID" | tail -5)"
grep -q '"path":"/v1/messages"' "$T/first.jsonl" || fail "the first server saw no request"
[ ! -s "$T/second.jsonl" ] || fail "the provider followed the redirect: $(cat "$T/second.jsonl")"
! grep -q SECRET "$T"/moor.db* "$T/dev.err" || fail "the key leaked"
pass "a provider answered 307 follows no redirect: the second origin saw nothing"

# moor.fetch: follows, without the author's headers on the other origin.
call fetch_probe "{\"url\": \"$FIRST/v1/messages\", \"key\": \"sk-fetch-SECRET\"}"
settled "$RUN" completed
run_body "$RUN" | grep -q 'second server answered' || fail "moor.fetch did not follow the redirect: $BODY"
[ "$(grep -c . "$T/second.jsonl")" = 1 ] || fail "second server requests: $(cat "$T/second.jsonl")"
grep -q '"x-api-key"' "$T/second.jsonl" && fail "x-api-key crossed to another origin: $(cat "$T/second.jsonl")"
grep -q '"x-custom"' "$T/second.jsonl" && fail "an author header crossed to another origin: $(cat "$T/second.jsonl")"
grep -q '"method":"POST"' "$T/second.jsonl" || fail "307 must keep POST: $(cat "$T/second.jsonl")"
grep -q '"x-api-key":"<redacted' "$T/first.jsonl" || fail "the first (same) origin should have had the key"
pass "moor.fetch across origins: followed, the author's headers dropped"
stop_dev
