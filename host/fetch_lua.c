/* The Lua binding of the fetch client (fetch.h).
 *
 *   local id = fetch.start(req, callback)
 *     req = { url = string, method = string?, headers = { ["Name"] = "value" }?,
 *             body = string?, timeout = ms?, connectTimeout = ms?, redirects = n?,
 *             onData = function(piece)? }
 *     timeout defaults to 60000, connectTimeout to 10000, redirects (how many
 *     to follow) to 5; redirects = 0 follows none. A redirect to another
 *     origin (scheme, host or port) drops every header of req for the rest
 *     of the chain (fetch.h). A header value may be a
 *     string or a number; "" sends the header empty. An unknown field, a
 *     wrong type, a bad URL or header raises.
 *     From the loop, later: callback(resp) with
 *       resp = { status = int, headers = { ["lower-cased name"] = "value" },
 *                body = string, timedOut = false }
 *     (repeated headers are joined with ", "), or callback(nil, message,
 *     timedOut) when no response arrived (refused, DNS, TLS, timeout, body
 *     over 32 MiB). A 404 or 500 is a response, not an error.
 *     onData: the body of a 2xx response streams: onData(piece) runs from the
 *     loop for each piece as it arrives (a string, in order), before the
 *     callback, whose resp.body is then "" (a 3xx/4xx/5xx body still comes
 *     whole in resp.body). It runs as the callback does (protected, cannot
 *     yield) and may cancel the request.
 *   fetch.cancel(id) -> true, or false when it already finished; the
 *     callback is then never called.
 *   fetch.active() -> requests in flight on the client.
 *
 * Callbacks run on the state's main thread (a coroutine that started the
 * request may be gone), inside lua_pcall: an error they raise is printed to
 * stderr as "moor: fetch callback: ..." with a traceback, and the loop goes
 * on. A callback cannot yield; resume a coroutine from it instead.
 *
 * Ownership: the binding is a userdata anchored in the registry under the
 * client's address while the client is open. Each request in flight has one
 * malloc'd node holding one registry ref to its callback; the node and ref go
 * when the callback is called, on cancel, when the client closes (its close
 * hook) or when the state closes (__gc, which also cancels the requests). */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch.h"
#include "moor.h"
#include "moorconf.h"

#define BINDING_MT "moor.fetch.binding"

typedef struct binding binding;

typedef struct pending {
  binding *b;
  unsigned long long id;
  int ref;                  /* the callback, in the registry */
  int data_ref;             /* onData, or LUA_NOREF */
  struct pending *prev, *next;
} pending;

struct binding {
  moor_fetch *f;            /* NULL once the client or the state closed */
  lua_State *L;             /* the main thread: callbacks run there */
  pending *head;
};

static void unlink_pending(pending *p) {
  binding *b = p->b;
  if (p->prev) p->prev->next = p->next;
  else b->head = p->next;
  if (p->next) p->next->prev = p->prev;
}

/* Drop every node and ref; the requests themselves are the caller's. */
static void drop_all(lua_State *L, binding *b, int cancel) {
  while (b->head) {
    pending *p = b->head;
    unlink_pending(p);
    if (cancel) moor_fetch_cancel(b->f, p->id);
    luaL_unref(L, LUA_REGISTRYINDEX, p->ref);
    luaL_unref(L, LUA_REGISTRYINDEX, p->data_ref);
    free(p);
  }
}

/* moor_fetch_close is about to drop our requests without callbacks. */
static void on_client_close(void *ud) {
  binding *b = ud;
  if (!lua_checkstack(b->L, 4)) return; /* the refs then live until lua_close */
  drop_all(b->L, b, 0);
  lua_pushnil(b->L);
  lua_rawsetp(b->L, LUA_REGISTRYINDEX, b->f); /* no allocation: the key exists */
  b->f = NULL;
}

static int binding_gc(lua_State *L) {
  binding *b = luaL_checkudata(L, 1, BINDING_MT);
  if (b->f) {
    drop_all(L, b, 1); /* only at lua_close: the registry anchors b while open */
    moor_fetch_on_close(b->f, NULL, NULL);
    b->f = NULL;
  }
  return 0;
}

/* ------------------------------------------------------------ callbacks */

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* In a protected call: the callback (1), the response (2, light userdata). */
static int deliver(lua_State *L) {
  const moor_fetch_response *resp = lua_touserdata(L, 2);
  lua_settop(L, 1);
  if (resp->error) {
    lua_pushnil(L);
    lua_pushstring(L, resp->error);
    lua_pushboolean(L, resp->timed_out);
    lua_call(L, 3, 0);
    return 0;
  }
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)resp->status);
  lua_setfield(L, -2, "status");
  lua_createtable(L, 0, (int)(resp->nheaders < 64 ? resp->nheaders : 64));
  for (size_t i = 0; i < resp->nheaders; i++) {
    const char *name = resp->header_names[i], *value = resp->header_values[i];
    if (lua_getfield(L, -1, name) == LUA_TSTRING) {
      /* a repeated header: joined, as a browser's Headers.get does */
      lua_pushfstring(L, "%s, %s", lua_tostring(L, -1), value);
      lua_remove(L, -2);
    } else {
      lua_pop(L, 1);
      lua_pushstring(L, value);
    }
    lua_setfield(L, -2, name);
  }
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, resp->body, resp->body_len);
  lua_setfield(L, -2, "body");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "timedOut");
  lua_call(L, 1, 0);
  return 0;
}

static void on_done(const moor_fetch_response *resp, void *ud) {
  pending *p = ud;
  binding *b = p->b;
  lua_State *L = b->L;
  int ref = p->ref;
  unlink_pending(p);
  luaL_unref(L, LUA_REGISTRYINDEX, p->data_ref);
  free(p);
  if (!lua_checkstack(L, 6)) {
    fprintf(stderr, "moor: fetch callback: Lua stack overflow\n");
    return; /* the ref lives until lua_close */
  }
  int base = lua_gettop(L);
  /* Nothing here may raise outside the protected call: the table is built
   * inside it, from the response passed as a light userdata. */
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, deliver);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  lua_pushlightuserdata(L, (void *)resp);
  luaL_unref(L, LUA_REGISTRYINDEX, ref); /* the stack holds the callback now */
  if (lua_pcall(L, 2, 0, base + 1) != LUA_OK)
    fprintf(stderr, "moor: fetch callback: %s\n", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)");
  lua_settop(L, base);
}

/* In a protected call: onData (1), the piece (2, light userdata), its length (3). */
static int deliver_piece(lua_State *L) {
  const char *data = lua_touserdata(L, 2);
  size_t len = (size_t)lua_tointeger(L, 3);
  lua_settop(L, 1);
  lua_pushlstring(L, data, len);
  lua_call(L, 1, 0);
  return 0;
}

/* A streaming request's body piece. p stays in flight: onData may cancel
 * it (freeing p), so nothing of p is read after the call. */
static void on_data(const char *data, size_t len, void *ud) {
  pending *p = ud;
  lua_State *L = p->b->L;
  if (!lua_checkstack(L, 6)) {
    fprintf(stderr, "moor: fetch onData: Lua stack overflow\n");
    return;
  }
  int base = lua_gettop(L);
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, deliver_piece);
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->data_ref);
  lua_pushlightuserdata(L, (void *)data);
  lua_pushinteger(L, (lua_Integer)len);
  if (lua_pcall(L, 3, 0, base + 1) != LUA_OK)
    fprintf(stderr, "moor: fetch onData: %s\n", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error)");
  lua_settop(L, base);
}

/* ------------------------------------------------------------ functions */

static binding *get_binding(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

static const char *const FIELDS[] = {"url", "method", "headers", "body", "timeout", "connectTimeout",
                                     "redirects", "onData", NULL};

static const char *opt_string(lua_State *L, const char *field, size_t *len) {
  int t = lua_getfield(L, 1, field);
  if (t == LUA_TNIL) return NULL;
  if (t != LUA_TSTRING) luaL_error(L, "fetch.start: req.%s must be a string (got %s)", field, lua_typename(L, t));
  return lua_tolstring(L, -1, len); /* stays on the stack until start returns */
}

static long opt_ms(lua_State *L, const char *field) {
  int t = lua_getfield(L, 1, field);
  long ms = 0;
  if (t != LUA_TNIL) {
    lua_Number n = lua_tonumber(L, -1);
    if (t != LUA_TNUMBER || !(n >= 1 && n <= 2147483647.0))
      luaL_error(L, "fetch.start: req.%s must be a positive number of milliseconds", field);
    ms = (long)n;
  }
  lua_pop(L, 1);
  return ms;
}

/* headers = { ["Name"] = "value" } -> a NULL-terminated array of "Name: value"
 * in a userdata, the strings anchored in a table; both left on the stack. */
static const char *const *build_headers(lua_State *L) {
  int t = lua_getfield(L, 1, "headers");
  if (t == LUA_TNIL) return NULL;
  if (t != LUA_TTABLE) luaL_error(L, "fetch.start: req.headers must be a table (got %s)", lua_typename(L, t));
  int tbl = lua_gettop(L);
  lua_newtable(L);
  int anchor = tbl + 1;
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, tbl)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "fetch.start: req.headers keys must be header names (got a %s)", luaL_typename(L, -2));
    size_t nlen, vlen;
    const char *name = lua_tolstring(L, -2, &nlen);
    int vt = lua_type(L, -1);
    if (vt != LUA_TSTRING && vt != LUA_TNUMBER)
      luaL_error(L, "fetch.start: req.headers[\"%s\"] must be a string (got %s)", name, lua_typename(L, vt));
    lua_pushvalue(L, -1); /* a copy: converting a number in place would upset lua_next */
    const char *value = lua_tolstring(L, -1, &vlen);
    if (nlen == 0 || strlen(name) != nlen || strpbrk(name, ":; \t\r\n"))
      luaL_error(L, "fetch.start: bad header name \"%s\"", name);
    if (strlen(value) != vlen || strpbrk(value, "\r\n"))
      luaL_error(L, "fetch.start: req.headers[\"%s\"] contains CR, LF or NUL", name); /* never the value */
    if (vlen == 0) lua_pushfstring(L, "%s;", name); /* curl's way to send an empty header */
    else lua_pushfstring(L, "%s: %s", name, value);
    lua_rawseti(L, anchor, ++n);
    lua_pop(L, 2);
  }
  const char **arr = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *arr, 0);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, anchor, i + 1);
    arr[i] = lua_tostring(L, -1); /* the anchor table keeps the string alive */
    lua_pop(L, 1);
  }
  arr[n] = NULL;
  return arr;
}

static int l_start(lua_State *L) {
  binding *b = get_binding(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  if (!b->f) return luaL_error(L, "fetch.start: the client is closed");
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    int known = 0;
    for (int i = 0; k && FIELDS[i]; i++) known |= strcmp(k, FIELDS[i]) == 0;
    if (!known) {
      if (k) return luaL_error(L, "fetch.start: unknown request field '%s'", k);
      return luaL_error(L, "fetch.start: request fields must be named (got a %s key)", luaL_typename(L, -2));
    }
    lua_pop(L, 1);
  }

  moor_fetch_request req;
  memset(&req, 0, sizeof req);
  size_t len;
  req.url = opt_string(L, "url", &len);
  if (!req.url) return luaL_error(L, "fetch.start: req.url must be a string (got nil)");
  if (strlen(req.url) != len) return luaL_error(L, "fetch.start: req.url contains NUL");
  req.method = opt_string(L, "method", &len);
  if (req.method && strlen(req.method) != len) return luaL_error(L, "fetch.start: req.method contains NUL");
  req.body = opt_string(L, "body", &req.body_len);
  req.timeout_ms = opt_ms(L, "timeout");
  req.connect_timeout_ms = opt_ms(L, "connectTimeout");
  if (lua_getfield(L, 1, "redirects") != LUA_TNIL) {
    int isint;
    lua_Integer n = lua_tointegerx(L, -1, &isint);
    if (!isint || n < 0 || n > MOOR_FETCH_REDIRECTS_MAX)
      return luaL_error(L, "fetch.start: req.redirects must be an integer from 0 to %d", MOOR_FETCH_REDIRECTS_MAX);
    req.max_redirects = n == 0 ? -1 : (int)n;
  }
  int dt = lua_getfield(L, 1, "onData");
  if (dt != LUA_TNIL && dt != LUA_TFUNCTION)
    return luaL_error(L, "fetch.start: req.onData must be a function (got %s)", lua_typename(L, dt));
  int data_idx = lua_gettop(L);
  req.headers = build_headers(L);

  /* Everything that can raise is done; from here each failure undoes. */
  lua_pushvalue(L, 2);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  int data_ref = LUA_NOREF;
  if (dt == LUA_TFUNCTION) {
    lua_pushvalue(L, data_idx);
    data_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  pending *p = calloc(1, sizeof *p);
  if (!p) {
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    luaL_unref(L, LUA_REGISTRYINDEX, data_ref);
    return luaL_error(L, "fetch.start: out of memory");
  }
  p->b = b;
  p->ref = ref;
  p->data_ref = data_ref;
  if (data_ref != LUA_NOREF) {
    req.on_data = on_data;
    req.data_ud = p;
  }
  int rc = moor_fetch_start(b->f, &req, on_done, p, &p->id);
  if (rc != 0) {
    free(p);
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    luaL_unref(L, LUA_REGISTRYINDEX, data_ref);
    return luaL_error(L, "fetch.start: %s", moor_fetch_errmsg(b->f));
  }
  p->next = b->head;
  if (b->head) b->head->prev = p;
  b->head = p;
  lua_pushinteger(L, (lua_Integer)p->id);
  return 1;
}

static int l_cancel(lua_State *L) {
  binding *b = get_binding(L);
  lua_Integer id = luaL_checkinteger(L, 1);
  for (pending *p = b->head; p; p = p->next) {
    if (p->id != (unsigned long long)id) continue;
    moor_fetch_cancel(b->f, p->id);
    unlink_pending(p);
    luaL_unref(L, LUA_REGISTRYINDEX, p->ref);
    luaL_unref(L, LUA_REGISTRYINDEX, p->data_ref);
    free(p);
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  return 1;
}

static int l_active(lua_State *L) {
  binding *b = get_binding(L);
  lua_pushinteger(L, b->f ? (lua_Integer)moor_fetch_active(b->f) : 0);
  return 1;
}

int moor_fetch_lua_push(lua_State *L, moor_fetch *f) {
  luaL_checkstack(L, 6, "fetch");
  if (!f) return luaL_error(L, "fetch: no client");
  binding *b = NULL;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, f) == LUA_TUSERDATA) {
    b = lua_touserdata(L, -1);
    if (b->f != f) b = NULL; /* a closed client's, at a reused address */
  }
  if (!b) {
    lua_pop(L, 1);
    b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    if (luaL_newmetatable(L, BINDING_MT)) {
      lua_pushcfunction(L, binding_gc);
      lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    b->L = lua_tothread(L, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, f); /* anchored before the hook points at it */
    if (moor_fetch_on_close(f, on_client_close, b) != 0) {
      lua_pushnil(L);
      lua_rawsetp(L, LUA_REGISTRYINDEX, f);
      return luaL_error(L, "fetch: this client is bound to another Lua state");
    }
    b->f = f;
  }
  int ud = lua_gettop(L);
  lua_createtable(L, 0, 3);
  static const luaL_Reg fns[] = {{"start", l_start}, {"cancel", l_cancel}, {"active", l_active}, {NULL, NULL}};
  for (const luaL_Reg *r = fns; r->name; r++) {
    lua_pushvalue(L, ud);
    lua_pushcclosure(L, r->func, 1);
    lua_setfield(L, -2, r->name);
  }
  lua_remove(L, ud);
  return 1;
}
