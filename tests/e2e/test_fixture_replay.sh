#!/usr/bin/env bash
# A database written by an earlier build (tests/fixtures/v1/moor.db, made by
# its make.sh before the engine split of issue 8) still reads and replays:
# `moor runs --json` and `moor logs --json` print what that build printed;
# `moor dev` replays every run with no non-determinism; the parked runs go on
# (the deploy question is answered, the webhook delivered) to their expected
# results; the long sleep keeps sleeping; the session's transcript is intact
# and it takes a second turn.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
FX="$MOOR_SRC/tests/fixtures/v1"
cp "$FX/moor.db" "$DB"
cp "$FX/agent.lua" "$T/example/agent.lua"
cd "$T"

"$MOOR" runs --json >"$T/runs.json" || fail "moor runs --json"
cmp -s "$T/runs.json" "$FX/runs.json" || fail "moor runs --json differs: $(diff "$FX/runs.json" "$T/runs.json")"
ids=$(grep -o '"id":"run_[0-9a-f]*"' "$FX/runs.json" | cut -d'"' -f4)
[ "$(echo "$ids" | wc -l)" = 12 ] || fail "the fixture should hold 12 runs: $ids"
for id in $ids; do
  "$MOOR" logs "$id" --json >"$T/log.json" || fail "moor logs $id --json"
  cmp -s "$T/log.json" "$FX/logs/$id.json" || fail "moor logs $id --json differs: $(diff "$FX/logs/$id.json" "$T/log.json")"
done
pass "moor runs/logs --json print what the fixture's build printed (12 runs)"

run_of() { grep -o "\"id\":\"run_[0-9a-f]*\",\"started\":\"[^\"]*\",\"status\":\"[a-z]*\",\"tool\":\"$1\"" "$FX/runs.json" | head -1 | cut -d'"' -f4; }
SLEEPER=$(run_of remind_with_progress); DEPLOY=$(run_of deploy); WEBHOOK=$(run_of webhook_respond)
SID=$(sed -n 's/^session //p' "$FX/session.txt")
[ -n "$SLEEPER" ] && [ -n "$DEPLOY" ] && [ -n "$WEBHOOK" ] && [ -n "$SID" ] || fail "fixture runs not found"

start_dev "$T/example" 127.0.0.1:0
# Migrated on open: the fixture's version 4 to this moor's 6 (runs_parent
# keeps only runs with a parent).
[ "$(sqlite3 "$DB" "PRAGMA user_version")" = 6 ] || fail "not migrated: $(sqlite3 "$DB" "PRAGMA user_version")"
sqlite3 "$DB" "SELECT sql FROM sqlite_master WHERE name='runs_parent'" | grep -qF "WHERE parent_id IS NOT NULL" \
  || fail "runs_parent after the migration: $(sqlite3 "$DB" "SELECT sql FROM sqlite_master WHERE name='runs_parent'")"
# The finished runs are as they were; the parked ones are running again.
for id in $ids; do
  want=$(grep -o "\"id\":\"$id\",\"started\":\"[^\"]*\",\"status\":\"[a-z]*\"" "$FX/runs.json" | sed 's/.*"status":"//; s/"$//')
  got=$(status "$id")
  [ "$got" = "$want" ] || fail "run $id is $got after replay, was $want: $(run_body "$id")"
done

# The question survived, and answering it deploys.
REQ=$(pending_request "$DEPLOY")
[ -n "$REQ" ] || fail "deploy's question is not pending after replay: $BODY"
req POST "/v1/inputs/$REQ" '{"optionId":"approve"}'
expect 200 "answer the deploy question"
settled "$DEPLOY" completed
run_body "$DEPLOY" | grep -qF '"result":{"deployed":true,"url":"https://fixture.example.internal"}' \
  || fail "deploy result: $BODY"
[ "$(count "plan fixture" "$WITNESS")" = 0 ] || fail "deploy's plan step ran again on replay"
[ "$(count "apply fixture" "$WITNESS")" = 1 ] || fail "deploy's apply step ran $(count "apply fixture" "$WITNESS") times"

# The webhook's token (from its progress URL) still takes a delivery.
TOKEN=$(grep -o '/.well-known/workflow/v1/webhook/[A-Za-z0-9_-]*' "$FX/logs/$WEBHOOK.json" | head -1 | sed 's|.*/||')
[ -n "$TOKEN" ] || fail "no webhook URL in the fixture's log"
req POST "/.well-known/workflow/v1/webhook/$TOKEN" '{"hello":"fixture"}'
expect 200 "deliver to the webhook"
[ "$BODY" = ok ] || fail "the webhook's respondWith body: $BODY"
settled "$WEBHOOK" completed
run_body "$WEBHOOK" | grep -qF '"result":{"done":true}' || fail "webhook result: $BODY"

# The long sleep still sleeps.
[ "$(status "$SLEEPER")" = running ] || fail "the 100-year sleep ended: $(run_body "$SLEEPER")"

# The session's transcript is intact, and a second message takes a turn.
req GET "/v1/sessions/$SID"
expect 200 "GET /v1/sessions/$SID"
printf '%s' "$BODY" | grep -qF '"text":"hello fixture world"' || fail "transcript lost the user message: $BODY"
printf '%s' "$BODY" | grep -qF '"text":"done: word_count={\"chars\":19,\"lines\":1,\"words\":3} three_steps={\"steps\":[1,2,3],\"sum\":6}"' \
  || fail "transcript lost the answer: $BODY"
req POST "/v1/sessions/$SID" '{"message":"second turn here"}'
expect 202 "a second message"
# (Known, reported with issue 8: replay publishes the first turn's closing
# message.completed and turn.completed once more, so the transcript shows its
# answer twice; this checks the entries in order, not their count.)
turns_done() { req GET "/v1/sessions/$SID"; printf '%s' "$BODY" | grep -q '"turnId":"turn_2"'; }
wait_for turns_done
printf '%s' "$BODY" | grep -q '^{.*"text":"hello fixture world".*"text":"done: word_count=.*"turnId":"turn_1".*"text":"second turn here".*word_count={\\"chars\\":16,\\"lines\\":1,\\"words\\":3}.*"turnId":"turn_2"}' \
  || fail "the transcript after a second turn: $BODY"
stop_dev

# No run failed on replay; every log still begins with what the fixture held.
for id in $ids; do
  "$MOOR" logs "$id" --json >"$T/log.json"
  ! grep -q 'non-determinism\|NonDeterminism' "$T/log.json" || fail "run $id: non-determinism on replay: $(cat "$T/log.json")"
  old=$(sed 's/]$//' "$FX/logs/$id.json")
  case $(cat "$T/log.json") in "$old"]|"$old",*) ;; *) fail "run $id's log changed under replay: $(cat "$T/log.json")" ;; esac
done
! grep -qi 'non-determinism' "$T/dev.err" || fail "non-determinism on stderr: $(cat "$T/dev.err")"
pass "moor dev replays the fixture: deploy approved, webhook delivered, sleep kept, session intact and continues"
