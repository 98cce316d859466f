#!/usr/bin/env bash
# The moor program links SQLite statically where the system has its archive
# (CMakeLists.txt, MOOR_STATIC_SQLITE, on by default): libsqlite3.so's
# relocations were most of the dynamic loader's work at every start (issue
# 13, the restart after kill -9). The program needs no libsqlite3.so, and
# its SQLite is a working one: a run survives a kill -9 inside a step and
# resumes (the checkpointer's thread, which needs a thread-safe SQLite, is
# checked by tests/lua/checkpoint_spec.lua in the same program).
. "$(dirname "$0")/lib.sh"

archive=$(cc -print-file-name=libsqlite3.a 2>/dev/null || true)
cache="$(dirname "$MOOR")/CMakeCache.txt"
if [ "${archive#/}" = "$archive" ] || [ ! -f "$archive" ]; then
  pass "no libsqlite3.a on this system: moor links the shared SQLite (nothing to check)"
  exit 0
fi
if [ -f "$cache" ] && grep -q '^MOOR_STATIC_SQLITE:BOOL=OFF' "$cache"; then
  pass "configured with MOOR_STATIC_SQLITE=OFF (nothing to check)"
  exit 0
fi

needed=$(readelf -d "$MOOR" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf -d $MOOR lists no libraries: $(readelf -d "$MOOR" 2>&1 | head -5)"
if printf '%s\n' "$needed" | grep -q '^libsqlite3'; then
  fail "moor needs the shared SQLite although $archive exists: $(printf '%s ' $needed)"
fi
pass "moor needs no libsqlite3.so ($(printf '%s ' $needed))"

# A run of two steps, killed inside the second; resumed, it finishes once.
mkdir -p "$T/agent/tools"
cat >"$T/agent/tools/two.lua" <<'EOF2'
local moor = require "moor"
local s = moor.schema
local one = moor.step("one", function() return 1 end)
local two = moor.step("two", function(p)
  local f = io.open(p.ready, "rb")
  if not f then
    f = assert(io.open(p.ready, "wb"))
    f:write("ready\n")
    f:close()
    os.execute("sleep 30") -- the kill comes first
  else
    f:close()
  end
  return 2
end)
return moor.defineWorkflowTool {
  description = "two steps", inputSchema = s.object { ready = s.string() },
  execute = function(input) return one() + two { ready = input.ready } end,
}
EOF2
DB="$T/static.db"
"$MOOR" call two "{\"ready\":\"$T/ready\"}" --db "$DB" --agent "$T/agent" >"$T/call.out" 2>"$T/call.err" &
pid=$!
for _ in $(seq 200); do [ -f "$T/ready" ] && break; sleep 0.1; done
[ -f "$T/ready" ] || { kill -9 "$pid" 2>/dev/null; fail "the step never started in 20 s: $(cat "$T/call.err")"; }
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
"$MOOR" resume --db "$DB" --agent "$T/agent" >"$T/resume.out" 2>"$T/resume.err" ||
  fail "moor resume: $(cat "$T/resume.err")"
"$MOOR" runs --db "$DB" --json >"$T/runs.json" 2>&1 || fail "moor runs: $(cat "$T/runs.json")"
grep -q '"status":"completed"' "$T/runs.json" || fail "the run did not complete after the resume: $(cat "$T/runs.json")"
pass "a run killed inside a step resumed and completed"
