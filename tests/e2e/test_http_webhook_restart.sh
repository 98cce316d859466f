#!/usr/bin/env bash
# render_video through `moor dev`: the render farm's webhook callback comes
# while the host is down (killed with kill -9); curl retries it, the host
# restarts on the same port, the delivery arrives and the run completes. A
# second delivery to the same webhook after the run ended gets 404.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"

start_dev "$T/example" 127.0.0.1:0
PORT=$(port_of "$URL")
call render_video '{"projectId":"intro","seconds":3}'
sse "$RUN" "$T/sse"
wait_for grep -q '"status":"rendering"' "$T/sse"
hook=$(grep -A1 '^event: hook.created$' "$T/sse" | sed -n 's/^data: //p')
WH=$(field url "$hook")
case $WH in "$URL"/.well-known/workflow/v1/webhook/?*) ;; *) fail "webhook url not under $URL: $hook" ;; esac
token=${WH##*/}
[ ${#token} -ge 43 ] || fail "webhook token too short for 32 random bytes: $token"
kill_dev

# The farm posts 3 s after the submit step and finds nobody listening.
sleep 4
"$MOOR" runs | grep "$RUN" | grep -q running || fail "run settled while the host was down: $("$MOOR" runs)"
"$MOOR" logs "$RUN" | grep -q 'hook.received' && fail "a delivery was recorded while the host was down"

t_restart=$(date +%s%3N)
start_dev "$T/example" "127.0.0.1:$PORT"
[ "$URL" = "http://127.0.0.1:$PORT" ] || fail "restarted on $URL, not port $PORT"
settled "$RUN" completed
run_body "$RUN" | grep -qF '"result":{"job":"job-intro","url":"https://videos.example.internal/intro.mp4"}' \
  || fail "wrong result: $BODY"
# The delivery was recorded after the restart, by the farm's retrying curl;
# the whole log streams (and the stream ends) now that the run is settled.
curl -s --max-time 10 "$URL/v1/runs/$RUN/events" >"$T/all"
[ "$(grep -c '^event: hook.received$' "$T/all")" = 1 ] || fail "not one delivery recorded: $(cat "$T/all")"
t_recv=$(grep -A1 '^event: hook.received$' "$T/all" | sed -n 's/^data: {"runId":"[^"]*","seq":[0-9]*,"kind":"[^"]*","name":[^,]*,"op":[^,]*,"time":\([0-9]*\),.*/\1/p')
[ -n "$t_recv" ] && [ "$t_recv" -ge "$t_restart" ] || fail "delivery at $t_recv, before the restart at $t_restart"
grep -A1 '^event: hook.received$' "$T/all" | grep -qF '"method":"POST"' || fail "delivery lacks its method"
[ "$(grep '^event: ' "$T/all" | tail -1)" = "event: run.completed" ] || fail "log does not end at run.completed"

# After the run ended the webhook is closed: 404, for any method.
code=$(curl -s -o "$T/late" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -d '{"status":"ok","url":"https://late.example"}' "$WH")
[ "$code" = 404 ] || fail "a delivery after the run ended got $code: $(cat "$T/late")"
grep -q '"code":"not_found"' "$T/late" || fail "404 body: $(cat "$T/late")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$WH")
[ "$code" = 404 ] || fail "GET on a closed webhook got $code"
run_body "$RUN" | grep -qF '"url":"https://videos.example.internal/intro.mp4"' || fail "the late delivery changed the result"
stop_dev
pass "render_video: callback while the host was down, retried into the restarted host on port $PORT; late delivery 404"
