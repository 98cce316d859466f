#!/usr/bin/env bash
# The shape issue 8 gave the Lua side, checked on the source tree: every SQL
# statement lives in lua/moor/store.lua; no Lua file under lua/ is over 600
# lines; no Lua file under lua/ requires inside a function (but for the
# commented real cycles listed below); HTTP statuses come from one table
# (lua/moor/http/status.lua), so no engine or session code returns one; the
# engine's face stays thin.
. "$(dirname "$0")/lib.sh"
cd "$MOOR_SRC"

# SQL: a statement keyword at the start of a Lua string, anywhere but the store.
sql=$(grep -rnE "[\"'](SELECT|INSERT|UPDATE|DELETE|WITH RECURSIVE|REPLACE INTO) " lua --include='*.lua' \
  | grep -v '^lua/moor/store.lua:' || true)
[ -z "$sql" ] || fail "SQL outside lua/moor/store.lua: $sql"
grep -q 'core.query\|core.exec' lua/moor/store.lua || fail "the store does not run SQL through moor.core"
other=$(grep -rn 'core\.query\|core\.exec' lua --include='*.lua' | grep -v '^lua/moor/store.lua:' || true)
[ -z "$other" ] || fail "moor.core's SQL bindings used outside the store: $other"
pass "every SQL statement is in lua/moor/store.lua"

# Size: every Lua file under lua/ has at most 600 lines.
while read -r n f; do
  [ "$f" = total ] && continue
  [ "$n" -le 600 ] || fail "$f has $n lines (at most 600)"
done < <(find lua -name '*.lua' -print0 | xargs -0 wc -l)
[ "$(wc -l <lua/moor/engine/init.lua)" -le 150 ] || fail "the engine's face (engine/init.lua) is not thin"
pass "no Lua file under lua/ over 600 lines"

# Requires only at the top, everywhere under lua/: every require is a
# top-level `local x = require "..."` (or the bare one that opens moor.core
# first). The only others are these, each a real cycle or a module named at
# run time, commented where it stands (or a pattern that names require, or
# text for authors: moor init's templates); a new one fails here.
ALLOWED_INNER=(
  'lua/moor/providers/init.lua:  return require(module).new(model, env_reader(env))'
  'lua/moor/testrunner.lua:    require("busted.runner")({ standalone = false })'
  'lua/moor/scaffold.lua:local MOOR = ('"'"'local moor = %s "moor"'"'"'):format("require")'
)
inner=$(grep -rnw 'require' lua --include='*.lua' \
  | grep -v -E '^[^:]+:[0-9]+:(local [A-Za-z_][A-Za-z0-9_]* = require "[a-z0-9._]+"( +--.*)?|require "moor\.(core|auth)"( +--.*)?|[[:space:]]*--.*)$' \
  | sed -E 's/^([^:]+):[0-9]+:/\1:/' || true)
for a in "${ALLOWED_INNER[@]}"; do
  inner=$(printf '%s\n' "$inner" | grep -v -x -F -- "$a" || true)
done
[ -z "$inner" ] || fail "a require that is not a top-level local (move it to the top, or break the cycle): $inner"
for a in "${ALLOWED_INNER[@]}"; do
  grep -q -x -F -- "${a#*:}" "${a%%:*}" || fail "the listed exception is gone, drop it from ALLOWED_INNER: $a"
done
pass "every Lua file under lua/ requires only at the top (but ${#ALLOWED_INNER[@]} commented cycles)"
# Only authors (tools/, agents) require the face `moor`; moor's own modules
# require its parts (lua/moor/authoring/), so the face can require the loader
# and moor.testing at its top without a cycle.
face=$(grep -rnE "require[ (]*[\"']moor[\"']" lua --include='*.lua' | grep -v -E '^[^:]+:[0-9]+:[[:space:]]*--' || true)
[ -z "$face" ] || fail "a module under lua/ requires the face \"moor\" (require its part in lua/moor/authoring/): $face"
pass "no module under lua/ requires the face moor"

# Statuses: no engine, session or store code returns an HTTP status; the one
# table is moor.http.status.
st=$(grep -rnE 'return nil, [1-5][0-9][0-9]\b|api_error\(' lua --include='*.lua' || true)
[ -z "$st" ] || fail "an HTTP status chosen outside lua/moor/http/status.lua: $st"
grep -q 'storage_unavailable = 503' lua/moor/http/status.lua || fail "no code -> status table"
pass "HTTP statuses come only from lua/moor/http/status.lua"

# The ctx of a body is built in one place (moor._ctx), not patched onto the engine.
! grep -rn 'extend_ctx' lua >/dev/null || fail "engine.extend_ctx is back: $(grep -rn extend_ctx lua)"
pass "no engine.extend_ctx"
