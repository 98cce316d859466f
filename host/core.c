/* moor.core: the host primitives the Lua engine runs on. The engine itself
 * (scheduling, replay, retries) is Lua in lua/moor/engine.lua; this file
 * gives it the store, the clock, the loop's timer and a few OS helpers. */
#include "host.h"
#include "regex.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const char SELF_KEY = 0;

moor *moor_from_lua(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &SELF_KEY);
  moor *m = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return m;
}

static moor *self(lua_State *L) {
  moor *m = moor_from_lua(L);
  if (!m) luaL_error(L, "moor.core used outside an engine");
  return m;
}

static void bind_args(lua_State *L, sqlite3_stmt *st, int first, int n) {
  for (int i = 0; i < n; i++) {
    int idx = first + i;
    switch (lua_type(L, idx)) {
      case LUA_TNIL: sqlite3_bind_null(st, i + 1); break;
      case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) sqlite3_bind_int64(st, i + 1, lua_tointeger(L, idx));
        else sqlite3_bind_double(st, i + 1, lua_tonumber(L, idx));
        break;
      default: {
        size_t len;
        const char *s = luaL_checklstring(L, idx, &len);
        sqlite3_bind_text(st, i + 1, s, (int)len, SQLITE_TRANSIENT);
      }
    }
  }
}

static void push_column(lua_State *L, sqlite3_stmt *st, int c) {
  switch (sqlite3_column_type(st, c)) {
    case SQLITE_INTEGER: lua_pushinteger(L, sqlite3_column_int64(st, c)); break;
    case SQLITE_FLOAT: lua_pushnumber(L, sqlite3_column_double(st, c)); break;
    case SQLITE_NULL: lua_pushnil(L); break;
    default:
      lua_pushlstring(L, (const char *)sqlite3_column_text(st, c), (size_t)sqlite3_column_bytes(st, c));
  }
}

/* Statements are finalized on every path: a userdata with __gc would also
 * do, but nothing between prepare and finalize here can raise except
 * bind_args' checklstring, which runs before the first step. */
static int run_sql(lua_State *L, int want_rows) {
  moor *m = self(L);
  const char *sql = luaL_checkstring(L, 1);
  int n = lua_gettop(L) - 1;
  for (int i = 0; i < n; i++) {
    int t = lua_type(L, 2 + i);
    if (t != LUA_TNIL && t != LUA_TNUMBER && t != LUA_TSTRING)
      return luaL_argerror(L, 2 + i, "expected nil, number or string");
  }
  if (!want_rows && moor_store_begin(&m->store)) {
    lua_pushnil(L);
    lua_pushstring(L, m->store.err);
    return 2;
  }
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(m->store.db, sql, -1, &st, NULL) != SQLITE_OK) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s (in: %s)", sqlite3_errmsg(m->store.db), sql);
    return 2;
  }
  bind_args(L, st, 2, n);
  lua_newtable(L);
  int rows = 0, rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int cols = sqlite3_column_count(st);
    lua_createtable(L, 0, cols);
    for (int c = 0; c < cols; c++) {
      push_column(L, st, c);
      lua_setfield(L, -2, sqlite3_column_name(st, c));
    }
    lua_rawseti(L, -2, ++rows);
  }
  if (rc != SQLITE_DONE) {
    lua_pushnil(L);
    lua_pushstring(L, sqlite3_errmsg(m->store.db));
    sqlite3_finalize(st);
    return 2;
  }
  sqlite3_finalize(st);
  lua_pushinteger(L, sqlite3_changes(m->store.db));
  return 2;
}

/* query(sql, ...) -> rows, changes: read without opening a write transaction. */
static int l_query(lua_State *L) { return run_sql(L, 1); }
/* exec(sql, ...) -> rows, changes: a write inside the current group-commit
 * transaction (rows come from RETURNING). On failure: nil, message. */
static int l_exec(lua_State *L) { return run_sql(L, 0); }

/* append(run_id, seq, op|nil, kind, name|nil, payload, time) */
static int l_append(lua_State *L) {
  moor *m = self(L);
  const char *run = luaL_checkstring(L, 1);
  lua_Integer seq = luaL_checkinteger(L, 2);
  lua_Integer op = luaL_optinteger(L, 3, 0);
  const char *kind = luaL_checkstring(L, 4);
  const char *name = luaL_optstring(L, 5, NULL);
  size_t plen;
  const char *payload = luaL_checklstring(L, 6, &plen);
  lua_Integer t = luaL_checkinteger(L, 7);
  if (moor_store_append(&m->store, run, seq, op, kind, name, payload, plen, t)) {
    lua_pushnil(L);
    lua_pushstring(L, m->store.err);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* commit() -> true, wrote (a transaction was open) | nil, cause. On failure
 * the transaction has been rolled back: nothing of it is in the file. */
static int l_commit(lua_State *L) {
  moor *m = self(L);
  int wrote = m->store.in_tx;
  if (moor_store_commit(&m->store)) {
    lua_pushnil(L);
    lua_pushstring(L, m->store.err);
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_pushboolean(L, wrote);
  return 2;
}

/* events(run_id) -> n, last_seq, ops, kinds, names, payloads, times: one
 * array per column (in seq order), which replay reads far faster than a
 * table per event. ops[i] and names[i] are false where the column is NULL. */
static int l_events(lua_State *L) {
  moor *m = self(L);
  size_t len;
  const char *run = luaL_checklstring(L, 1, &len);
  sqlite3_stmt *st = m->store.events;
  sqlite3_bind_text(st, 1, run, (int)len, SQLITE_TRANSIENT);
  int base = lua_gettop(L);
  for (int c = 1; c < 6; c++) lua_newtable(L);
  int n = 0, rc;
  lua_Integer last = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    n++;
    last = sqlite3_column_int64(st, 0);
    for (int c = 1; c < 6; c++) {
      if (sqlite3_column_type(st, c) == SQLITE_NULL) lua_pushboolean(L, 0);
      else push_column(L, st, c);
      lua_rawseti(L, base + c, n);
    }
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_DONE) {
    lua_settop(L, base);
    lua_pushnil(L);
    lua_pushstring(L, sqlite3_errmsg(m->store.db));
    return 2;
  }
  lua_pushinteger(L, n);
  lua_insert(L, base + 1);
  lua_pushinteger(L, last);
  lua_insert(L, base + 2);
  return 7;
}

static int l_now(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  lua_pushinteger(L, (lua_Integer)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
  return 1;
}

static int l_mono(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)(uv_hrtime() / 1000));  /* microseconds */
  return 1;
}

/* emit(run_id, seq, kind, name|nil, payload): hand a committed event to the embedder. */
static int l_emit(lua_State *L) {
  moor *m = self(L);
  if (!m->cb) return 0;
  moor_event ev = {luaL_checkstring(L, 1), (long long)luaL_checkinteger(L, 2), luaL_checkstring(L, 3),
                   luaL_optstring(L, 4, NULL), luaL_checkstring(L, 5)};
  m->cb(&ev, m->cb_ud);
  return 0;
}

static int l_has_listener(lua_State *L) {
  lua_pushboolean(L, self(L)->cb != NULL);
  return 1;
}

/* listdir(dir) -> sorted names (no dot entries) | nil, err */
static int l_listdir(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  DIR *d = opendir(dir);
  if (!d) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", dir, strerror(errno));
    return 2;
  }
  /* Collect into a Lua table first (Lua owns the memory), then sort. */
  lua_newtable(L);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -2, ++n);
  }
  closedir(d);
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "sort");
  lua_pushvalue(L, -3);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
  return 1;
}

/* hash(s) -> 16 hex digits of FNV-1a 64: identifies a tool's source text. */
static int l_hash(lua_State *L) {
  size_t len;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &len);
  unsigned long long h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= s[i];
    h *= 1099511628211ULL;
  }
  char out[17];
  static const char hex[] = "0123456789abcdef";
  for (int i = 15; i >= 0; i--, h >>= 4) out[i] = hex[h & 15];
  lua_pushlstring(L, out, 16);
  return 1;
}

/* sha256(s) -> 64 hex digits of SHA-256 (OpenSSL's libcrypto): binds an
 * approval to the exact input it shows. */
static int l_sha256(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (EVP_Digest(s, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
    return luaL_error(L, "sha256: libcrypto failed");
  char out[64];
  static const char hex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < 32; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  lua_pushlstring(L, out, 64);
  return 1;
}

/* random_bytes(n) -> n bytes from the kernel's CSPRNG (ids, tokens, seeds). */
static int l_random_bytes(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n > 0 && n <= 256, 1, "1..256");
  unsigned char buf[256];
  size_t got = 0;
  while (got < (size_t)n) {
    ssize_t r = getrandom(buf + got, (size_t)n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return luaL_error(L, "getrandom: %s", strerror(errno));
    }
    got += (size_t)r;
  }
  lua_pushlstring(L, (const char *)buf, (size_t)n);
  return 1;
}

static void on_wait_timer(uv_timer_t *t) { (void)t; }

/* wait(ms): block the loop up to ms (for moor.testing, which drives the
 * engine from a spec rather than from moor_run). */
static int l_wait(lua_State *L) {
  moor *m = self(L);
  lua_Integer ms = luaL_checkinteger(L, 1);
  if (ms < 0) ms = 0;
  uv_timer_start(&m->timer, on_wait_timer, (uint64_t)ms, 0);
  uv_run(&m->loop, UV_RUN_ONCE);
  uv_timer_stop(&m->timer);
  return 0;
}

static int l_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

static int l_db_path(lua_State *L) {
  lua_pushstring(L, self(L)->db_path);
  return 1;
}

/* The HTTP side of the Lua router: answer later, and Server-Sent Events. */
static int http_rc(lua_State *L, int rc) {
  lua_pushboolean(L, rc == 0);
  return 1;
}

static int l_http_respond(lua_State *L) {
  moor *m = self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  size_t len;
  const char *body = luaL_optlstring(L, 5, "", &len);
  return http_rc(L, moor_http_respond(m->http, (unsigned long long)luaL_checkinteger(L, 1),
                                      (int)luaL_checkinteger(L, 2), luaL_optstring(L, 3, NULL),
                                      luaL_optstring(L, 4, NULL), body, len));
}

static int l_http_stream_start(lua_State *L) {
  moor *m = self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  return http_rc(L, moor_http_stream_start(m->http, (unsigned long long)luaL_checkinteger(L, 1),
                                           (int)luaL_checkinteger(L, 2), luaL_optstring(L, 3, NULL),
                                           luaL_optstring(L, 4, NULL)));
}

static int l_http_write(lua_State *L) {
  moor *m = self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  return http_rc(L, moor_http_stream_write(m->http, (unsigned long long)luaL_checkinteger(L, 1), data, len));
}

static int l_http_end(lua_State *L) {
  moor *m = self(L);
  if (!m->http) return http_rc(L, MOOR_ENOTFOUND);
  return http_rc(L, moor_http_stream_end(m->http, (unsigned long long)luaL_checkinteger(L, 1)));
}

/* after(ms, fn): call fn once from the loop after ms (non-durable: a step's
 * backoff between provider retries). The timer owns its callback's ref. */
typedef struct after_timer {
  uv_timer_t t;
  lua_State *L;
  int ref;
  struct after_timer *next, **prev; /* in m->afters, so moor_close can drop them */
} after_timer;

static void after_closed(uv_handle_t *h) { free(h->data); }

static void after_unlink(after_timer *a) {
  *a->prev = a->next;
  if (a->next) a->next->prev = a->prev;
}

static void after_fired(uv_timer_t *t) {
  after_timer *a = t->data;
  lua_State *L = a->L;
  after_unlink(a);
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->ref);
  luaL_unref(L, LUA_REGISTRYINDEX, a->ref);
  uv_close((uv_handle_t *)t, after_closed);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    fprintf(stderr, "moor: timer callback: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
}

/* Before the Lua state goes: drop pending timers without calling them. */
void moor_core_close_afters(moor *m) {
  while (m->afters) {
    after_timer *a = m->afters;
    after_unlink(a);
    luaL_unref(a->L, LUA_REGISTRYINDEX, a->ref);
    uv_close((uv_handle_t *)&a->t, after_closed);
  }
}

static int l_after(lua_State *L) {
  moor *m = self(L);
  lua_Integer ms = luaL_checkinteger(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  after_timer *a = malloc(sizeof *a);
  if (!a) return luaL_error(L, "out of memory");
  a->L = L;
  lua_pushvalue(L, 2);
  a->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  uv_timer_init(&m->loop, &a->t);
  a->t.data = a;
  a->next = m->afters;
  if (a->next) a->next->prev = &a->next;
  a->prev = &m->afters;
  m->afters = a;
  uv_timer_start(&a->t, after_fired, (uint64_t)(ms < 0 ? 0 : ms), 0);
  return 0;
}

MOOR_API int luaopen_moor_core(lua_State *L) {
  /* Loaded by a stock Lua (not the moor host): open an engine on this state. */
  if (!moor_from_lua(L)) moor_open_module(L);
  static const luaL_Reg fns[] = {
    {"query", l_query},   {"exec", l_exec},       {"append", l_append},
    {"commit", l_commit}, {"events", l_events},   {"now", l_now},
    {"mono", l_mono},     {"emit", l_emit},       {"has_listener", l_has_listener},
    {"listdir", l_listdir}, {"hash", l_hash},     {"random_bytes", l_random_bytes},
    {"sha256", l_sha256},
    {"wait", l_wait},     {"getpid", l_getpid},   {"db_path", l_db_path},
    {"http_respond", l_http_respond}, {"http_stream_start", l_http_stream_start},
    {"http_write", l_http_write}, {"http_end", l_http_end}, {"after", l_after},
    {"regex_compile", moor__regex_compile},
    {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushliteral(L, MOOR_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}

/* Called by moor_open: make the engine reachable from moor.core. */
void moor_core_bind(lua_State *L, moor *m) {
  lua_pushlightuserdata(L, m);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &SELF_KEY);
}
