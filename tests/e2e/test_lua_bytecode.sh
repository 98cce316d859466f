#!/usr/bin/env bash
# moor's own Lua precompiled at build time (moor.luab, host/luab.c): a
# module comes from its bytecode only while its source file is the one it
# was compiled from (same size, same modification time); an edit made after
# the build takes effect at once, whatever it changes; errors and
# tracebacks from precompiled modules name their lua/moor/<file>.lua:<line>,
# the file the module was found at. $MOOR_TRACE_START makes the host say
# where each module came from ("moor-trace-luab NAME bytecode|source ...").
. "$(dirname "$0")/lib.sh"

LUA="$MOOR_SRC/lua"
LINE=$(grep -n 'if not ms then error(err' "$LUA/moor/duration.lua" | cut -d: -f1)
DEF=$(grep -n '^function M.check' "$LUA/moor/duration.lua" | cut -d: -f1)
[ -n "$LINE" ] && [ -n "$DEF" ] || fail "lua/moor/duration.lua changed: this test reads its check function"

# A spec run inside the host (moor test): moor.duration.check raises at its
# own line (level 0 + 1), so the message and the traceback name duration.lua.
mkdir -p "$T/specs"
cat >"$T/specs/bytecode_spec.lua" <<'EOF'
local duration = require "moor.duration"
local dir, line, def = os.getenv("WANT_DIR"), os.getenv("WANT_LINE"), os.getenv("WANT_DEF")

describe("a precompiled module", function()
  it("raises at its source file and line", function()
    local ok, err = pcall(duration.check, "bogus", 0)
    assert.is_false(ok)
    local want = dir .. "/moor/duration.lua:" .. line .. ": bad duration"
    assert.are.equal(want, err:sub(1, #want))
    io.stderr:write("error: ", err, "\n")
  end)
  it("names its file in debug information and tracebacks", function()
    local info = debug.getinfo(duration.check, "S")
    assert.are.equal("@" .. dir .. "/moor/duration.lua", info.source)
    assert.are.equal(tonumber(def), info.linedefined)
    local tb
    xpcall(duration.check, function(e) tb = debug.traceback(e, 1) end, "bogus", 0)
    assert.truthy(tb:find(dir .. "/moor/duration.lua:" .. line .. ": in function", 1, true), tb)
  end)
end)
EOF

# run_spec OUT [ENV...]: moor test of the spec, traced; its output in OUT.
run_spec() {
  out=$1
  shift
  env MOOR_TRACE_START=1 WANT_DIR="${WANT_DIR:-$LUA}" WANT_LINE="$LINE" WANT_DEF="$DEF" "$@" \
    "$MOOR" test "$T/specs" >"$out" 2>&1 || fail "moor test: $(cat "$out")"
}

# 1. The build tree's own sources: every module the host starts with comes
# from the bundle, and what the spec checks holds for them.
run_spec "$T/tree.out"
grep -q '^moor-trace-luab moor.duration bytecode$' "$T/tree.out" || fail "moor.duration not from bytecode: $(cat "$T/tree.out")"
grep -q '^moor-trace-luab moor.host bytecode$' "$T/tree.out" || fail "moor.host not from bytecode"
! grep -q '^moor-trace-luab .* source' "$T/tree.out" || fail "a module of the tree was loaded from source: $(grep source "$T/tree.out")"
grep -q "^error: $LUA/moor/duration.lua:$LINE: bad duration" "$T/tree.out" || fail "no error at duration.lua:$LINE"
pass "precompiled modules report $LUA/moor/duration.lua:$LINE in errors, debug information and tracebacks"

# 2. A copy of the tree that keeps the times (cp -p) is the same source: its
# modules come from the bundle too, and are named by the copy's paths.
cp -rp "$LUA" "$T/lua"
WANT_DIR="$T/lua" run_spec "$T/copy.out" MOOR_LUA_DIR="$T/lua"
grep -q '^moor-trace-luab moor.duration bytecode$' "$T/copy.out" || fail "the copy's moor.duration not from bytecode"
grep -q "^error: $T/lua/moor/duration.lua:$LINE: bad duration" "$T/copy.out" || fail "the copy's error does not name the copy"
pass "a copy with the same times loads from the bundle and names its own files"

# 3. An edit after the build (a longer file) takes effect: moor.host runs
# the edited source.
sed -i '1i io.stderr:write("edited host.lua\\n")' "$T/lua/moor/host.lua"
WANT_DIR="$T/lua" run_spec "$T/edit.out" MOOR_LUA_DIR="$T/lua"
grep -q '^edited host.lua$' "$T/edit.out" || fail "the edit of moor/host.lua did not take effect: $(cat "$T/edit.out")"
grep -q '^moor-trace-luab moor.host source' "$T/edit.out" || fail "moor.host not reported as loaded from source"
grep -q '^moor-trace-luab moor.duration bytecode$' "$T/edit.out" || fail "the unedited moor.duration not from bytecode"
pass "an edit after the build takes effect (the edited module from source, the rest from bytecode)"

# 4. An edit of the same size (a new time): the message changes.
sed -i 's/"bad duration %q: use/"BAD DURATION %q: use/' "$T/lua/moor/duration.lua"
cmp -s "$LUA/moor/duration.lua" "$T/lua/moor/duration.lua" && fail "the same-size edit did not change the file"
[ "$(stat -c %s "$LUA/moor/duration.lua")" = "$(stat -c %s "$T/lua/moor/duration.lua")" ] || fail "the edit changed the size"
env MOOR_TRACE_START=1 MOOR_LUA_DIR="$T/lua" WANT_DIR="$T/lua" WANT_LINE="$LINE" WANT_DEF="$DEF" \
  "$MOOR" test "$T/specs" >"$T/same.out" 2>&1 && fail "the spec passed with the old message: the edit was not used"
grep -q "BAD DURATION" "$T/same.out" || fail "the same-size edit of moor/duration.lua did not take effect: $(cat "$T/same.out")"
grep -q '^moor-trace-luab moor.duration source' "$T/same.out" || fail "moor.duration not reported as loaded from source"
pass "an edit that keeps the size takes effect"

# 5. An edit whose time is set back to the original's (touch -r): the size
# tells.
cp -p "$LUA/moor/duration.lua" "$T/lua/moor/duration.lua"
printf -- '-- an edit\n' >>"$T/lua/moor/duration.lua"
touch -r "$LUA/moor/duration.lua" "$T/lua/moor/duration.lua"
WANT_DIR="$T/lua" run_spec "$T/size.out" MOOR_LUA_DIR="$T/lua"
grep -q '^moor-trace-luab moor.duration source' "$T/size.out" || fail "a longer moor/duration.lua with the old time came from bytecode"
pass "an edit with the old time but another size is loaded from source"

# 6. moor's built-in tools (tools/*.lua, which the loader loads by file, as
# core.precompiled(name, file) checks them): from the bundle while they are
# unchanged, from source once edited.
"$MOOR" resume --db "$T/tools.db" --agent "$T/agent" >/dev/null 2>"$T/tools0.out" || fail "moor resume: $(cat "$T/tools0.out")"
MOOR_TRACE_START=1 "$MOOR" resume --db "$T/tools.db" --agent "$T/agent" >/dev/null 2>"$T/tools1.out" \
  || fail "moor resume: $(cat "$T/tools1.out")"
grep -q '^moor-trace-luab moor.tools.workflow bytecode$' "$T/tools1.out" || fail "the built-in workflow tool not from bytecode"
grep -q '^moor-trace-luab moor.tools.sleep bytecode$' "$T/tools1.out" || fail "the built-in sleep tool not from bytecode"
cp -rp "$MOOR_SRC/tools" "$T/tools" # (beside the copy of lua/: where the loader looks, $T/lua/../tools)
sed -i '1i io.stderr:write("edited sleep.lua\\n")' "$T/tools/sleep.lua"
MOOR_TRACE_START=1 MOOR_LUA_DIR="$T/lua" "$MOOR" resume --db "$T/tools.db" --agent "$T/agent" >/dev/null \
  2>"$T/tools2.out" || fail "moor resume: $(cat "$T/tools2.out")"
grep -q '^edited sleep.lua$' "$T/tools2.out" || fail "the edit of tools/sleep.lua did not take effect: $(cat "$T/tools2.out")"
grep -q '^moor-trace-luab moor.tools.sleep source' "$T/tools2.out" || fail "the edited sleep tool not reported from source"
grep -q '^moor-trace-luab moor.tools.workflow bytecode$' "$T/tools2.out" || fail "the copy's workflow tool not from bytecode"
pass "built-in tools come from the bundle while unchanged, an edit takes effect"

# 7. MOOR_LUA_BYTECODE=0: every module from source, the same results.
run_spec "$T/off.out" MOOR_LUA_BYTECODE=0
! grep -q '^moor-trace-luab .* bytecode$' "$T/off.out" || fail "MOOR_LUA_BYTECODE=0 still used the bundle"
grep -q "^error: $LUA/moor/duration.lua:$LINE: bad duration" "$T/off.out" || fail "from source: no error at duration.lua:$LINE"
pass "MOOR_LUA_BYTECODE=0 loads every module from source, with the same file:line"

# 8. moor.core as a module of a stock lua5.4 (the build's core.so): the rest
# of `require "moor"` comes from the bundle too, with the same file:line.
BUILD_DIR=$(dirname "$MOOR")
cat >"$T/mod.lua" <<'EOF'
require "moor"
local _, err = pcall(require("moor.duration").check, "bogus", 0)
print(err)
EOF
LD_PRELOAD="${MOOR_PRELOAD_FIRST:-}" MOOR_TRACE_START=1 MOOR_DB="$T/mod/moor.db" lua5.4 \
  -e "package.cpath='$BUILD_DIR/lua/?.so;'..package.cpath; package.path='$LUA/?.lua;$LUA/?/init.lua;'..package.path" \
  "$T/mod.lua" >"$T/mod.out" 2>"$T/mod.err" || fail "lua5.4: $(cat "$T/mod.err")"
grep -q '^moor-trace-luab moor.engine bytecode$' "$T/mod.err" || fail "require \"moor\" in lua5.4 did not use the bundle: $(cat "$T/mod.err")"
grep -q "^$LUA/moor/duration.lua:$LINE: bad duration" "$T/mod.out" || fail "lua5.4: no error at duration.lua:$LINE: $(cat "$T/mod.out")"
pass "require \"moor\" in a stock lua5.4 takes moor's modules from the bundle, errors at their file:line"

# 9. A bundle written by another Lua release, or cut short, is not used
# (modules from source, the same results), in the moor program and in a
# stock lua5.4; $MOOR_LUA_BYTECODE=/path names it.
GOOD="$BUILD_DIR/moor.luab"
[ -f "$GOOD" ] || fail "no $GOOD"
sed '1s/^moor-luab 1 ................/moor-luab 1 0123456789abcdef/' "$GOOD" >"$T/foreign.luab"
head -c 5000 "$GOOD" >"$T/short.luab"
printf 'moor-luab 1 x\n' >"$T/junk.luab"
for bad in foreign short junk; do
  run_spec "$T/$bad.out" MOOR_LUA_BYTECODE="$T/$bad.luab"
  grep -q "^moor-trace lua.bytecode: $T/$bad.luab not used" "$T/$bad.out" || fail "the $bad bundle was not refused: $(grep lua.bytecode "$T/$bad.out")"
  ! grep -q '^moor-trace-luab .* bytecode$' "$T/$bad.out" || fail "a module came from the $bad bundle"
  grep -q "^error: $LUA/moor/duration.lua:$LINE: bad duration" "$T/$bad.out" || fail "$bad bundle: no error at duration.lua:$LINE"
  LD_PRELOAD="${MOOR_PRELOAD_FIRST:-}" MOOR_LUA_BYTECODE="$T/$bad.luab" MOOR_TRACE_START=1 MOOR_DB="$T/mod-$bad/moor.db" lua5.4 \
    -e "package.cpath='$BUILD_DIR/lua/?.so;'..package.cpath; package.path='$LUA/?.lua;$LUA/?/init.lua;'..package.path" \
    "$T/mod.lua" >"$T/mod-$bad.out" 2>"$T/mod-$bad.err" || fail "lua5.4 with the $bad bundle: $(cat "$T/mod-$bad.err")"
  ! grep -q '^moor-trace-luab .* bytecode$' "$T/mod-$bad.err" || fail "lua5.4: a module came from the $bad bundle"
  grep -q "^$LUA/moor/duration.lua:$LINE: bad duration" "$T/mod-$bad.out" || fail "lua5.4 with the $bad bundle: $(cat "$T/mod-$bad.out")"
done
pass "a bundle from another Lua release, cut short or malformed is not used: the sources are"
