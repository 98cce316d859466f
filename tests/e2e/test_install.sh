#!/bin/bash
# Install as a user would, from a copy of the source tree that is then
# deleted: configure and build the copy (RelWithDebInfo, no sanitizers, -j2),
# `cmake --install` it into a temporary prefix and `luarocks make` it into a
# temporary rocks tree, delete the copy and its build, then use only what was
# installed: libmoor's exports, a C program built with
# `pkg-config --cflags --libs moor` (moor_open/moor_call/moor_tick), `moor
# init`, `moor call`, `moor test` and `moor dev` (one request with curl) from
# the prefix, and a stock lua5.4 running a tool through `require "moor"`
# from the rocks tree and from the prefix, and moor-wfa moved to libexec. It
# builds moor twice: about 45-70 s on 2 cores.
source "$(dirname "$0")/lib.sh"
unset MOOR_LUA_DIR MOOR_WFA MOOR_DB LD_PRELOAD
export HOME="$T/home" # (luarocks keeps its cache and config there)
mkdir -p "$HOME"
SRC="$T/src" BUILD="$T/build" P="$T/prefix" ROCKS="$T/rocks"
t0=$(date +%s)

# --- a copy of the source tree (no build directories, no git), built and installed
mkdir -p "$SRC"
tar -C "$MOOR_SRC" --exclude=./.git --exclude='./build*' --exclude=./.moor -cf - . | tar -C "$SRC" -xf -
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOOR_SANITIZE=OFF \
  -DCMAKE_INSTALL_PREFIX=/nonexistent/configured-prefix >"$T/cmake.log" 2>&1 || fail "configure: $(tail -20 "$T/cmake.log")"
cmake --build "$BUILD" -j2 --target moor moor-wfa moor_lib moor_shared moor_module >>"$T/cmake.log" 2>&1 \
  || fail "build: $(tail -30 "$T/cmake.log")"
# (--prefix at install time, unlike the configured one: moor.pc and the
# binary's lookups are relative to where they are installed)
cmake --install "$BUILD" --prefix "$P" >>"$T/cmake.log" 2>&1 || fail "install: $(tail -20 "$T/cmake.log")"
for f in bin/moor bin/moor-wfa lib/libmoor.a lib/libmoor.so include/moor.h lib/pkgconfig/moor.pc \
         share/lua/5.4/moor/init.lua share/lua/5.4/moor/host.lua share/lua/5.4/moor/tools/sleep.lua \
         share/lua/5.4/moor/meta/moor.lua lib/lua/5.4/moor/core.so; do
  [ -e "$P/$f" ] || fail "cmake --install did not install $f"
done
pass "cmake --install put moor, moor-wfa, libmoor.{a,so}, moor.h, moor.pc, the Lua side and moor/core.so under the prefix"
t1=$(date +%s)

# --- luarocks make into a tree (Debian's luarocks), from the same copy
(cd "$SRC" && luarocks --lua-version=5.4 make --tree "$ROCKS" rockspec/moor-scm-1.rockspec CURL_INCDIR=/usr/include/x86_64-linux-gnu) \
  >"$T/luarocks.log" 2>&1 || fail "luarocks make: $(tail -30 "$T/luarocks.log")"
pass "luarocks make --tree built and installed the rock"
t2=$(date +%s)

# --- the source tree and the build are gone from here on
rm -rf "$SRC" "$BUILD"
[ ! -e "$SRC" ] || fail "the source copy is still there"

# libmoor exports only moor_* and luaopen_moor* (hidden visibility)
nm -D --defined-only "$P/lib/libmoor.so" | awk '{ print $3 }' >"$T/exports"
grep -q '^moor_open$' "$T/exports" && grep -q '^moor_tick$' "$T/exports" || fail "libmoor.so does not export moor_open/moor_tick"
others=$(grep -v -e '^moor_' -e '^luaopen_moor' "$T/exports" || true)
[ -z "$others" ] || fail "libmoor.so exports more than moor_*/luaopen_moor*: $(echo $others | head -c 300)"
pass "libmoor.so exports $(wc -l <"$T/exports") symbols, all moor_* or luaopen_moor*"

M="$P/bin/moor"
# moor init: a project that works at once
"$M" init "$T/proj" >"$T/init.out" 2>"$T/init.err" || fail "moor init: $(cat "$T/init.err")"
for f in agent/agent.lua agent/tools/greet.lua agent/tools/remind.lua tests/lua/greet_spec.lua \
         tests/lua/remind_spec.lua .luarc.json .gitignore; do
  [ -f "$T/proj/$f" ] || fail "moor init did not write $f"
done
grep -q "\"$P/share/lua/5.4/moor/meta\"" "$T/proj/.luarc.json" \
  || fail ".luarc.json does not point at the installed annotations: $(cat "$T/proj/.luarc.json")"
grep -qx '.moor/' "$T/proj/.gitignore" || fail ".gitignore does not ignore .moor/"
pass "moor init wrote the scaffold; .luarc.json points at $P/share/lua/5.4/moor/meta"

cd "$T/proj"
out=$("$M" call greet '{"name": "Ada"}' 2>"$T/call.err") || fail "moor call greet: $(cat "$T/call.err")"
[ "$(printf '%s\n' "$out" | tail -1)" = '{"greeting":"Hello, Ada!"}' ] || fail "moor call greet printed: $out"
out=$("$M" call remind '{"note": "stand up", "delay": "50ms"}' 2>"$T/call.err") || fail "moor call remind: $(cat "$T/call.err")"
[ "$(printf '%s\n' "$out" | tail -1)" = '{"reminder":"Reminder: stand up"}' ] || fail "moor call remind printed: $out"
[ -f .moor/moor.db ] || fail "moor call made no .moor/moor.db in the project"
pass "moor call runs the scaffold's plain and workflow tools from the installed prefix"
# The installed Lua side's precompiled bundle (install compiled it from the
# installed files): every module and built-in tool comes from it.
MOOR_TRACE_START=1 "$M" call greet '{"name": "Ada"}' >/dev/null 2>"$T/trace.err" || fail "moor call greet: $(cat "$T/trace.err")"
[ -f "$P/share/lua/5.4/moor/moor.luab" ] || fail "cmake --install did not write share/lua/5.4/moor/moor.luab"
grep -q '^moor-trace lua.bytecode: [1-9][0-9]* modules precompiled, 0 changed' "$T/trace.err" \
  || fail "the installed moor did not load its modules from moor.luab: $(grep lua.bytecode "$T/trace.err")"
grep -q '^moor-trace-luab moor.tools.sleep bytecode$' "$T/trace.err" || fail "the installed sleep tool not from moor.luab"
grep -q 'source (' "$T/trace.err" && fail "an installed module loaded from source: $(grep 'source (' "$T/trace.err")"
pass "the installed moor loads its modules and built-in tools from share/lua/5.4/moor/moor.luab"

"$M" test >"$T/test.out" 2>&1 || fail "moor test on the scaffold: $(cat "$T/test.out")"
grep -q '^4 successes / 0 failures / 0 errors' "$T/test.out" || fail "moor test: $(cat "$T/test.out")"
# the installed host's own parts, seen from inside it
mkdir -p "$T/checks"
cat >"$T/checks/installed_spec.lua" <<LUA
local core = require "moor.core"
it("uses the installed Lua side, built-in tools and moor-wfa", function()
  assert.are.equal("$P/share/lua/5.4/moor/host.lua", package.searchpath("moor.host", package.path))
  assert.are.equal("$P/share/lua/5.4/moor/tools", require("moor.loader").builtin_dir())
  assert.are.equal("$P/bin/moor-wfa", core.wfa_path())
end)
LUA
"$M" test "$T/checks" >"$T/test.out" 2>&1 || fail "the installed moor's paths: $(cat "$T/test.out")"
pass "moor test passes the scaffold's specs; the installed moor finds its Lua, tools and moor-wfa in the prefix"

# moor init refuses to overwrite, names the file and writes nothing
sum=$(cat agent/tools/greet.lua | cksum)
rm tests/lua/remind_spec.lua
st=0
"$M" init . >"$T/init.out" 2>"$T/init.err" || st=$?
[ $st = 2 ] || fail "moor init over a project exited $st, not 2"
grep -q 'agent/tools/greet.lua' "$T/init.err" || fail "moor init did not name the file: $(cat "$T/init.err")"
[ ! -e tests/lua/remind_spec.lua ] || fail "moor init wrote a file although others exist"
[ "$(cat agent/tools/greet.lua | cksum)" = "$sum" ] || fail "moor init changed an existing file"
pass "moor init over existing files exits 2 naming them, and writes nothing"

# moor dev from the prefix: one request with curl
"$M" dev --listen 127.0.0.1:0 >"$T/dev.out" 2>"$T/dev.err" &
DEV=$!
i=0
until grep -q '^http://' "$T/dev.out"; do
  kill -0 $DEV 2>/dev/null || fail "moor dev exited: $(cat "$T/dev.err")"
  i=$((i + 1)); [ $i -le 300 ] || fail "moor dev printed no URL: $(cat "$T/dev.err")"
  sleep 0.1
done
URL=$(head -1 "$T/dev.out")
body=$(curl -s --max-time 10 -H 'Content-Type: application/json' -d '{"name": "Bo"}' "$URL/v1/tools/greet/calls")
run=$(printf '%s' "$body" | sed -n 's/.*"runId":"\(run_[0-9a-f]*\)".*/\1/p')
[ -n "$run" ] || fail "POST /v1/tools/greet/calls answered: $body"
i=0
until curl -s --max-time 10 "$URL/v1/runs/$run" | grep -q '"status":"completed"'; do
  i=$((i + 1)); [ $i -le 100 ] || fail "the run did not complete: $(curl -s "$URL/v1/runs/$run")"
  sleep 0.1
done
curl -s --max-time 10 "$URL/v1/runs/$run" | grep -q 'Hello, Bo!' || fail "GET /v1/runs/$run: no greeting"
kill -TERM $DEV
st=0; wait $DEV || st=$?
[ $st = 0 ] || fail "moor dev exited $st on SIGTERM: $(tail -5 "$T/dev.err")"
pass "moor dev from the prefix served a call over HTTP"

# a C program built with pkg-config against the installed libmoor
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
cc -Wall -Wextra -o "$T/embed" "$MOOR_SRC/tests/e2e/embed.c" $(pkg-config --cflags --libs moor) 2>"$T/cc.err" \
  || fail "cc with pkg-config --cflags --libs moor: $(cat "$T/cc.err")"
out=$(LD_LIBRARY_PATH="$P/lib" "$T/embed" agent "$T/embed.db" remind '{"note": "from C", "delay": "30ms"}' 2>&1) \
  || fail "the embedder (libmoor.so): $out"
[ "$out" = 'completed {"reminder":"Reminder: from C"} ticks>1:yes' ] || fail "the embedder printed: $out"
# ... and linked statically: the program is outside the prefix, so it names the Lua dir (moor.pc's luadir)
cc -o "$T/embed_static" "$MOOR_SRC/tests/e2e/embed.c" $(pkg-config --cflags moor) "$P/lib/libmoor.a" \
  $(pkg-config --libs lua5.4 libuv sqlite3 libcurl libcrypto libpcre2-8) -llua5.4-cjson -lhttp_parser -ldl -lm \
  2>"$T/cc.err" || fail "static link: $(cat "$T/cc.err")"
out=$(MOOR_LUA_DIR=$(pkg-config --variable=luadir moor) "$T/embed_static" agent "$T/embed2.db" greet '{"name": "C"}' 2>&1) \
  || fail "the embedder (libmoor.a): $out"
[ "$out" = 'completed {"greeting":"Hello, C!"} ticks>1:no' ] || fail "the static embedder printed: $out"
st=0
out=$("$T/embed_static" agent "$T/embed3.db" greet '{"name": "C"}' 2>&1) || st=$?
[ $st = 1 ] && printf '%s' "$out" | grep -q "cannot find moor's Lua files.*set MOOR_LUA_DIR" \
  || fail "an embedder that cannot find the Lua side should say so: $st $out"
pass "a C program built with pkg-config --cflags --libs moor runs a workflow with moor_open/moor_call/moor_tick"

# a stock lua5.4 with the rocks tree's paths runs a tool through require "moor"
eval "$(luarocks --lua-version=5.4 path --tree "$ROCKS")"
cat >"$T/stock.lua" <<'LUA'
local moor = require "moor"
assert(package.searchpath("moor", package.path):find(os.getenv("ROCKS"), 1, true), "moor from the rocks tree")
moor.register("remind", dofile("agent/tools/remind.lua"))
local id = assert(moor.call("remind", { note = "from lua5.4", delay = "20ms" }))
moor.run()
local status, result = moor.status(id)
assert(status == "completed", tostring(status) .. " " .. tostring(result))
-- the built-in sleep (moor/tools/ in the tree), as every agent gets it
moor.register("sleep", require("moor.loader").builtins().tools.sleep.tool)
local sid = assert(moor.call("sleep", { seconds = 0.02 }))
moor.run()
print(result, (select(2, moor.status(sid))))
LUA
out=$(ROCKS="$ROCKS" MOOR_DB="$T/stock/moor.db" lua5.4 "$T/stock.lua" 2>&1) || fail "lua5.4 with the rocks tree: $out"
[ "$out" = '{"reminder":"Reminder: from lua5.4"}	{"waitedSeconds":0.02}' ] || fail "lua5.4 printed: $out"
pass "a stock lua5.4 ran the scaffold's workflow tool and the built-in sleep from the luarocks tree"

# ... and from the CMake prefix (share/lua/5.4, lib/lua/5.4/moor/core.so), whose moor-wfa it finds in bin/
out=$(LUA_PATH="$P/share/lua/5.4/?.lua;$P/share/lua/5.4/?/init.lua" LUA_CPATH="$P/lib/lua/5.4/?.so" \
  MOOR_DB="$T/stock2/moor.db" lua5.4 -e '
    local moor = require "moor"
    moor.register("greet", dofile("agent/tools/greet.lua"))
    local id = assert(moor.call("greet", { name = "Lua" }))
    moor.run()
    print(select(2, moor.status(id)), require("moor.core").wfa_path())' 2>&1) || fail "lua5.4 with the prefix: $out"
[ "$out" = "{\"greeting\":\"Hello, Lua!\"}	$P/bin/moor-wfa" ] || fail "lua5.4 with the prefix printed: $out"
pass "a stock lua5.4 ran a tool from the CMake prefix, and its moor/core.so finds moor-wfa in $P/bin"
# a packager's layout: moor-wfa moved to <prefix>/libexec is found there
mkdir -p "$P/libexec" "$T/checks2"
mv "$P/bin/moor-wfa" "$P/libexec/moor-wfa"
cat >"$T/checks2/libexec_spec.lua" <<LUA
it("finds moor-wfa under the prefix's libexec", function()
  assert.are.equal("$P/libexec/moor-wfa", require("moor.core").wfa_path())
end)
LUA
"$M" test "$T/checks2" >"$T/test.out" 2>&1 || fail "moor-wfa in libexec: $(cat "$T/test.out")"
pass "moor-wfa moved to $P/libexec is found there"
echo "times: build+install $((t1 - t0)) s, luarocks make $((t2 - t1)) s, the rest $(($(date +%s) - t2)) s"
