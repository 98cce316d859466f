/* moor.core as a Lua module for a stock Lua 5.4 (the rockspec's build): the
 * entry point luaopen_moor_core. Loaded by the moor host it only returns the
 * bindings (core.c); loaded by another Lua program it first opens an engine
 * on that program's Lua state (the store, the lock, the loop: moor.c), owned
 * by a userdata in the registry whose __gc closes it, and takes the rest of
 * moor's modules from its precompiled bundle (luab.c). This file depends on
 * the API and the bindings; nothing depends on it. */
#include "host.h"

#include <limits.h>
#include <stdlib.h>

static int module_gc(lua_State *L) {
  moor **pm = lua_touserdata(L, 1);
  if (pm && *pm) {
    moor_store_commit(&(*pm)->store); /* nothing recorded is lost */
    moor_close(*pm);
    *pm = NULL;
  }
  return 0;
}

static int open_module(lua_State *L) {
  moor_config cfg = {0};
  moor *m = calloc(1, sizeof *m);
  if (!m) return luaL_error(L, "moor: out of memory");
  moor **pm = lua_newuserdatauv(L, sizeof *pm, 0);
  *pm = m;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, module_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, "moor.engine.handle");
  int rc = moor__engine_init(m, &cfg);
  if (rc) return luaL_error(L, "moor: %s", m->err);
  m->L = L;
  moor__core_bind(L, m);
  moor__core_preload(L);
  /* The rest of `require "moor"` from moor's precompiled bundle, each module
   * only while its file on package.path is the one compiled (luab.c): the
   * build tree's, or the one installed beside this core.so's Lua directory. */
  char lua_dir[PATH_MAX], err[256], luab[PATH_MAX];
  if (moor__lua_dir(NULL, lua_dir, sizeof lua_dir, err, sizeof err)) lua_dir[0] = 0;
  if (!moor__luab_path(lua_dir[0] ? lua_dir : NULL, luab, sizeof luab)) (void)moor__luab_install(L, luab);
  return 0;
}

MOOR_API int luaopen_moor_core(lua_State *L) {
  /* Loaded by a stock Lua (not the moor host): open an engine on this state. */
  if (!moor__from_lua(L)) open_module(L);
  return moor__core_open(L);
}
