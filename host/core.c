/* moor.core: the host primitives the Lua engine runs on. The engine itself
 * (scheduling, replay, retries) is Lua in lua/moor/; this file binds the
 * engine to its Lua state and assembles the table from the bindings, one
 * file each: the store (core_store.c), the clock and timers (core_clock.c),
 * the HTTP server's answers (core_http.c) and OS helpers (core_os.c). Here
 * too: what the engine hands the embedder (emit) and a few facts of it. */
#include "host.h"
#include "json.h"

static const char SELF_KEY = 0;

moor *moor__from_lua(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &SELF_KEY);
  moor *m = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return m;
}

moor *moor__self(lua_State *L) {
  moor *m = moor__from_lua(L);
  if (!m) luaL_error(L, "moor.core used outside an engine");
  return m;
}

void moor__core_bind(lua_State *L, moor *m) {
  lua_pushlightuserdata(L, m);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &SELF_KEY);
}

/* emit(run_id, seq, kind, name|nil, payload): hand a committed event to the embedder. */
static int l_emit(lua_State *L) {
  moor *m = moor__self(L);
  if (!m->cb) return 0;
  moor_event ev = {luaL_checkstring(L, 1), (long long)luaL_checkinteger(L, 2), luaL_checkstring(L, 3),
                   luaL_optstring(L, 4, NULL), luaL_checkstring(L, 5)};
  m->cb(&ev, m->cb_ud);
  return 0;
}

static int l_has_listener(lua_State *L) {
  lua_pushboolean(L, moor__self(L)->cb != NULL);
  return 1;
}

static int l_db_path(lua_State *L) {
  lua_pushstring(L, moor__self(L)->db_path);
  return 1;
}

static const luaL_Reg engine_fns[] = {
  {"emit", l_emit}, {"has_listener", l_has_listener}, {"db_path", l_db_path}, {NULL, NULL}};

int moor__core_open(lua_State *L) {
  const luaL_Reg *const parts[] = {engine_fns, moor__core_store_fns, moor__core_clock_fns, moor__core_http_fns,
                                   moor__core_os_fns};
  lua_newtable(L);
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) luaL_setfuncs(L, parts[i], 0);
  lua_pushliteral(L, MOOR_VERSION);
  lua_setfield(L, -2, "version");
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
