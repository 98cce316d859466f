#!/usr/bin/env bash
# The CLI sends $MOOR_API_TOKEN only to a server it can trust (issue 7, item
# 11): the lock file naming the server must belong to the current user and
# name a loopback URL. A forged lock file (another user's, or naming another
# address) gets nothing: no token, no request at all.
. "$(dirname "$0")/lib.sh"
cd "$T"
export MOOR_API_TOKEN="tok-$$-0123456789abcdef0123456789abcdef"

# A fake "moor dev" that records each request's headers (on 0.0.0.0, so the
# machine's own non-loopback address reaches it too; it never leaves it).
cat >"$T/listener.py" <<'PY'
import http.server, sys
log = open(sys.argv[2], "a")
class H(http.server.BaseHTTPRequestHandler):
    def handle_one(self):
        pass
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        log.write("%s auth=%s body=%s\n" % (self.path, self.headers.get("Authorization"), body.decode()))
        log.flush()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok":true}')
    do_GET = do_POST
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("0.0.0.0", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$T/listener.py" x "$T/requests.log" >"$T/port" &
LPID=$!
wait_for test -s "$T/port"
PORT=$(head -1 "$T/port")
touch "$T/requests.log"

# forge DB URL OWNER: a lock file for DB naming URL, owned by OWNER and held
# (as a live moor dev holds it) by a background flock; sets HOLD_PID.
forge() {
  rm -f "$1.lock"
  printf 'pid=1\nstarted=2026-01-01T00:00:00Z\nurl=%s\n' "$2" >"$1.lock"
  chown "$3" "$1.lock"
  # (the subshell becomes the sleep, so killing HOLD_PID drops the lock)
  (exec 9>>"$1.lock" && flock -x 9 && exec sleep 60) &
  HOLD_PID=$!
  wait_for sh -c "! flock -n -s '$1.lock' true"
}
release() { kill "$HOLD_PID" 2>/dev/null || true; wait "$HOLD_PID" 2>/dev/null || true; }

# Control: our own lock file naming loopback: the token goes there.
forge "$T/own.db" "http://127.0.0.1:$PORT" "$(id -u)"
"$MOOR" cancel run_x --db "$T/own.db" >"$T/out" 2>"$T/err" || fail "cancel through our own server: $(cat "$T/err")"
grep -q "^/v1/runs/run_x/cancel auth=Bearer $MOOR_API_TOKEN" "$T/requests.log" \
  || fail "the listener did not see the control request: $(cat "$T/requests.log")"
release
: >"$T/requests.log"

# Another user's lock file naming a loopback listener: refused, nothing sent.
forge "$T/other.db" "http://127.0.0.1:$PORT" nobody
for cmd in "cancel run_x" "answer req_x approve" "answer req_x --text secret-text"; do
  set +e
  # shellcheck disable=SC2086
  timeout 20 "$MOOR" $cmd --db "$T/other.db" >"$T/out" 2>"$T/err"; st=$?
  set -e
  [ $st = 2 ] || fail "moor $cmd with another user's lock file exited $st: $(cat "$T/err")"
  grep -q "not sending it MOOR_API_TOKEN" "$T/err" || fail "moor $cmd message: $(cat "$T/err")"
done
set +e
printf 'hello\n' | timeout 20 "$MOOR" chat --agent agent --db "$T/other.db" >"$T/out" 2>"$T/err"; st=$?
set -e
[ $st = 2 ] || fail "moor chat with another user's lock file exited $st: $(cat "$T/err")"
release
[ ! -s "$T/requests.log" ] || fail "requests reached a server named by another user's lock file: $(cat "$T/requests.log")"

# Our own lock file naming a non-loopback address of this machine.
IP=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep '^[0-9.]*$' | head -1 || true)
if [ -n "$IP" ]; then
  forge "$T/far.db" "http://$IP:$PORT" "$(id -u)"
  set +e
  timeout 20 "$MOOR" cancel run_x --db "$T/far.db" >"$T/out" 2>"$T/err"; st=$?
  set -e
  release
  [ $st = 2 ] || fail "moor cancel toward $IP exited $st: $(cat "$T/err")"
  grep -q "not a loopback" "$T/err" || fail "non-loopback message: $(cat "$T/err")"
  [ ! -s "$T/requests.log" ] || fail "a request went to the non-loopback $IP: $(cat "$T/requests.log")"
  # A loopback-looking start is not a loopback URL: "127.0.0.1:1@" and
  # "[::1]@" are user info, and the host is $IP.
  for url in "http://127.0.0.1:1@$IP:$PORT" "http://[::1]@$IP:$PORT" "http://localhost:1@$IP:$PORT"; do
    forge "$T/far.db" "$url" "$(id -u)"
    set +e
    timeout 20 "$MOOR" cancel run_x --db "$T/far.db" >"$T/out" 2>"$T/err"; st=$?
    set -e
    release
    [ ! -s "$T/requests.log" ] || fail "a request went to $url: $(cat "$T/requests.log")"
    [ $st = 2 ] || fail "moor cancel toward $url exited $st: $(cat "$T/err")"
  done
  pass "no token to another user's lock file, nor to non-loopback $IP (user info included)"
else
  pass "no token to another user's lock file (no non-loopback address to try)"
fi
kill $LPID
