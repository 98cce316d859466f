/* moor.core's HTTP binding: how the Lua router (lua/moor/http.lua) answers
 * a request later, and writes Server-Sent Events. Each returns true, or
 * false when the connection is gone or the server is not listening. */
#include "host.h"

static int http_rc(lua_State *L, int rc) {
  lua_pushboolean(L, rc == 0);
  return 1;
}

static int l_http_respond(lua_State *L) {
  moor *m = moor__self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  size_t len;
  const char *body = luaL_optlstring(L, 5, "", &len);
  return http_rc(L, moor_http_respond(m->http, (unsigned long long)luaL_checkinteger(L, 1),
                                      (int)luaL_checkinteger(L, 2), luaL_optstring(L, 3, NULL),
                                      luaL_optstring(L, 4, NULL), body, len));
}

static int l_http_stream_start(lua_State *L) {
  moor *m = moor__self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  return http_rc(L, moor_http_stream_start(m->http, (unsigned long long)luaL_checkinteger(L, 1),
                                           (int)luaL_checkinteger(L, 2), luaL_optstring(L, 3, NULL),
                                           luaL_optstring(L, 4, NULL)));
}

static int l_http_write(lua_State *L) {
  moor *m = moor__self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  return http_rc(L, moor_http_stream_write(m->http, (unsigned long long)luaL_checkinteger(L, 1), data, len));
}

static int l_http_end(lua_State *L) {
  moor *m = moor__self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  return http_rc(L, moor_http_stream_end(m->http, (unsigned long long)luaL_checkinteger(L, 1)));
}

const luaL_Reg moor__core_http_fns[] = {
  {"http_respond", l_http_respond}, {"http_stream_start", l_http_stream_start}, {"http_write", l_http_write},
  {"http_end", l_http_end}, {NULL, NULL}};
