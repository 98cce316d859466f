/* moor.core's link to its engine: which engine a Lua state belongs to (a
 * registry entry: bind, from_lua, self, which every binding uses), and what
 * the engine hands its embedder (emit, has_listener, db_path). */
#include "host.h"

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
  m->in_cb++; /* (the embedder's code: calls that drive the engine are refused, moor__busy) */
  m->cb(&ev, m->cb_ud);
  m->in_cb--;
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

const luaL_Reg moor__core_engine_fns[] = {
  {"emit", l_emit}, {"has_listener", l_has_listener}, {"db_path", l_db_path}, {NULL, NULL}};
