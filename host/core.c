/* moor.core: the host primitives the Lua engine runs on. The engine itself
 * (scheduling, replay, retries) is Lua in lua/moor/; this file assembles the
 * moor.core table from the bindings, one file each: the engine's own link
 * (core_engine.c), the store (core_store.c), the clock and timers
 * (core_clock.c), the HTTP server's answers (core_http.c) and OS helpers
 * (core_os.c), schema patterns (regex.c), the sandbox for model-written
 * programs (sandbox.c), harness agents' processes and Unix socket (harness.c),
 * moor's own precompiled Lua (luab.c);
 * and preloads the other C modules the engine requires. */
#include "host.h"
#include "json.h"
#include "regex.h"
#include "sandbox.h"

/* Schema patterns (regex.c, on PCRE2). */
static const luaL_Reg regex_fns[] = {{"regex_compile", moor__regex_compile}, {NULL, NULL}};

int moor__core_open(lua_State *L) {
  const luaL_Reg *const parts[] = {moor__core_engine_fns, moor__core_store_fns, moor__core_clock_fns,
                                   moor__core_http_fns, moor__core_os_fns, regex_fns,
                                   moor__core_sandbox_fns, moor__core_harness_fns, moor__core_luab_fns};
  lua_newtable(L);
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) luaL_setfuncs(L, parts[i], 0);
  lua_pushliteral(L, MOOR_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushinteger(L, MOOR_DEFAULT_PORT); /* moorconf.h: the Lua side reads it here (lua/moor/conf.lua) */
  lua_setfield(L, -2, "default_port");
  return 1;
}

static int open_fetch(lua_State *L) {
  moor *m = moor__from_lua(L);
  if (!m || !m->fetch) return luaL_error(L, "moor.fetch: the engine has no HTTP client");
  return moor_fetch_lua_push(L, m->fetch);
}

void moor__core_preload(lua_State *L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_moor_json);
  lua_setfield(L, -2, "moor.json.core");
  lua_pushcfunction(L, open_fetch);
  lua_setfield(L, -2, "moor.fetch.core");
  lua_pop(L, 1);
}
