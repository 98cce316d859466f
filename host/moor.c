/* The public API of host/moor.h: opens the store and the lock, creates the
 * app Lua state with the engine in it, and drives it on the libuv loop. */
#include "host.h"
#include "json.h"
#include "lock.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MOOR_LUA_DIR
#define MOOR_LUA_DIR "lua"
#endif

#ifndef MOOR_NO_CJSON
int luaopen_cjson(lua_State *L);
#endif

static int set_err(moor *m, int code, const char *fmt, const char *a) {
  snprintf(m->err, sizeof m->err, fmt, a ? a : "");
  return code;
}

const char *moor_errmsg(const moor *m) { return m ? m->err : "out of memory"; }

const char *moor_strerror(int code) {
  switch (code) {
    case MOOR_OK: return "ok";
    case MOOR_EINVAL: return "invalid argument";
    case MOOR_ENOMEM: return "out of memory";
    case MOOR_EIO: return "storage error";
    case MOOR_ELOCKED: return "database in use by another process";
    case MOOR_ELOAD: return "agent failed to load";
    case MOOR_EJSON: return "invalid JSON";
    case MOOR_ENOTFOUND: return "not found";
    case MOOR_ELUA: return "engine error";
    case MOOR_ETOOL: return "tool failed";
    default: return "unknown error";
  }
}

/* mkdir -p for the database's parent directory (.moor/ by default). The
 * directories it creates are 0700: the state in them is the user's alone. */
static int make_parent(const char *path) {
  char *dup = strdup(path);
  if (!dup) return MOOR_ENOMEM;
  char *slash = strrchr(dup, '/');
  if (slash && slash != dup) {
    *slash = 0;
    for (char *p = dup + 1; *p; p++) {
      if (*p != '/') continue;
      *p = 0;
      mkdir(dup, 0700);
      *p = '/';
    }
    if (mkdir(dup, 0700) != 0 && errno != EEXIST) {
      free(dup);
      return MOOR_EIO;
    }
  }
  free(dup);
  return 0;
}

/* Call engine[fn] with nargs arguments already pushed; leaves nres results.
 * A Lua error becomes MOOR_ELUA with its message. */
int moor_call_engine(moor *m, const char *fn, int nargs, int nres) {
  lua_State *L = m->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, m->engine_ref);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_insert(L, -(nargs + 1));
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "traceback");
  lua_remove(L, -2);
  int h = lua_gettop(L) - nargs - 1;
  lua_insert(L, h);
  int rc = lua_pcall(L, nargs, nres, h);
  lua_remove(L, h);
  if (rc != LUA_OK) {
    set_err(m, MOOR_ELUA, "engine error: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return MOOR_ELUA;
  }
  return 0;
}

static int open_fetch(lua_State *L) {
  moor *m = moor_from_lua(L);
  if (!m || !m->fetch) return luaL_error(L, "moor.fetch: the engine has no HTTP client");
  return moor_fetch_lua_push(L, m->fetch);
}

static int open_lua(moor *m, const char *lua_dir) {
  lua_State *L = luaL_newstate();
  if (!L) return MOOR_ENOMEM;
  m->L = L;
  luaL_openlibs(L);
  moor_core_bind(L, m);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_moor_core);
  lua_setfield(L, -2, "moor.core");
  lua_pushcfunction(L, luaopen_moor_json);
  lua_setfield(L, -2, "moor.json.core");
#ifndef MOOR_NO_CJSON
  lua_pushcfunction(L, luaopen_cjson);
  lua_setfield(L, -2, "cjson");
#endif
  lua_pushcfunction(L, open_fetch);
  lua_setfield(L, -2, "moor.fetch.core");
  lua_pop(L, 1);
  /* Our lua/ comes first so an installed copy elsewhere never shadows it. */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", lua_dir, lua_dir, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moor.engine");
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    set_err(m, MOOR_ELUA, "cannot load the engine: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return MOOR_ELUA;
  }
  m->engine_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

/* What every engine has, whoever owns the Lua state: the loop, the HTTP
 * client, the lock and the store. */
static int init_engine(moor *m, const moor_config *cfg) {
  m->lock_fd = -1;
  m->engine_ref = LUA_NOREF;
  m->cfg = *cfg;
  const char *db = cfg->db_path;
  if (!db || !*db) db = getenv("MOOR_DB");
  if (!db || !*db) db = ".moor/moor.db";
  if (!(m->db_path = strdup(db))) return MOOR_ENOMEM;
  if (uv_loop_init(&m->loop) != 0) return set_err(m, MOOR_EIO, "cannot start the event loop%s", NULL);
  uv_timer_init(&m->loop, &m->timer);
  m->loop_ok = 1;
  if (moor_fetch_open(&m->loop, &m->fetch)) return set_err(m, MOOR_EIO, "cannot start the HTTP client%s", NULL);
  if (cfg->read_only) {
    /* Inspecting creates nothing: a mistyped --db is an error, not a new file. */
    struct stat st;
    if (stat(db, &st) != 0 || !S_ISREG(st.st_mode))
      return set_err(m, MOOR_ENOTFOUND, "no database at %s (check --db or $MOOR_DB)", db);
  } else {
    if (make_parent(db)) return set_err(m, MOOR_EIO, "cannot create the directory for %s", db);
    int rc = moor_lock_acquire(db, &m->lock_fd, m->err, sizeof m->err);
    if (rc) return rc;
  }
  int durability = cfg->durability;
  const char *d = getenv("MOOR_DURABILITY");
  if (d && strcmp(d, "full") == 0) durability = MOOR_DURABILITY_FULL;
  int rc = moor_store_open(&m->store, db, durability, cfg->read_only);
  if (rc) {
    snprintf(m->err, sizeof m->err, "%s %s: %s", rc == MOOR_ENOTFOUND ? "no database at" : "cannot open database",
             db, m->store.err);
    return rc;
  }
  return 0;
}

int moor_open(moor **out, const moor_config *cfg) {
  moor_config def = {0};
  if (!cfg) cfg = &def;
  *out = NULL;
  moor *m = calloc(1, sizeof *m);
  if (!m) return MOOR_ENOMEM;
  *out = m; /* even on failure, so the caller can read moor_errmsg, then moor_close */
  m->owns_L = 1;
  int rc = init_engine(m, cfg);
  if (rc) return rc;
  const char *lua_dir = cfg->lua_dir;
  if (!lua_dir || !*lua_dir) lua_dir = getenv("MOOR_LUA_DIR");
  if (!lua_dir || !*lua_dir) lua_dir = MOOR_LUA_DIR;
  return open_lua(m, lua_dir);
}

/* Module mode: `require "moor.core"` from a stock Lua (the rockspec) opens an
 * engine on that Lua state. The state owns the engine through a userdata in
 * the registry whose __gc closes it. */
static int module_gc(lua_State *L) {
  moor **pm = lua_touserdata(L, 1);
  if (pm && *pm) {
    moor_store_commit(&(*pm)->store); /* nothing recorded is lost */
    moor_close(*pm);
    *pm = NULL;
  }
  return 0;
}

int moor_open_module(lua_State *L) {
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
  int rc = init_engine(m, &cfg);
  if (rc) return luaL_error(L, "moor: %s", m->err);
  m->L = L;
  moor_core_bind(L, m);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_moor_json);
  lua_setfield(L, -2, "moor.json.core");
  lua_pushcfunction(L, open_fetch);
  lua_setfield(L, -2, "moor.fetch.core");
  lua_pop(L, 1);
  return 0;
}

static void on_close(uv_handle_t *h) { (void)h; }

void moor_close(moor *m) {
  if (!m) return;
  if (m->http) {
    moor_http_stop(m->http);
    m->http = NULL;
  }
  if (m->fetch) {
    moor_fetch_close(m->fetch);
    m->fetch = NULL;
  }
  if (m->L) {
    if (m->engine_ref != LUA_NOREF) {
      /* Flush anything still uncommitted: a closed engine loses nothing. */
      if (moor_call_engine(m, "shutdown", 0, 0)) fprintf(stderr, "moor: %s\n", m->err);
    }
    moor_core_close_afters(m);
    if (m->owns_L) lua_close(m->L);
  }
  moor_store_close(&m->store);
  if (m->loop_ok) {
    uv_close((uv_handle_t *)&m->timer, on_close);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
  }
  moor_lock_release(m->lock_fd);
  free(m->db_path);
  free(m);
}

void moor_on_event(moor *m, moor_event_cb cb, void *ud) {
  m->cb = cb;
  m->cb_ud = ud;
}

int moor_load_agent(moor *m, const char *dir) {
  lua_State *L = m->L;
  lua_pushstring(L, dir ? dir : "agent");
  int rc = moor_call_engine(m, "load_agent", 1, 2);
  if (rc) return rc;
  if (!lua_toboolean(L, -2)) {
    set_err(m, MOOR_ELOAD, "%s", lua_tostring(L, -1));
    rc = MOOR_ELOAD;
  }
  lua_pop(L, 2);
  return rc;
}

int moor_call(moor *m, const char *tool, const char *input_json, char *run_id, size_t run_id_size) {
  lua_State *L = m->L;
  lua_pushstring(L, tool);
  lua_pushstring(L, input_json ? input_json : "{}");
  lua_createtable(L, 0, 1);
  lua_pushboolean(L, m->cfg.no_input);
  lua_setfield(L, -2, "noInput");
  int rc = moor_call_engine(m, "call", 3, 3);
  if (rc) return rc;
  if (lua_isnil(L, -3)) {
    const char *code = lua_tostring(L, -1);
    rc = code && strcmp(code, "unknown") == 0 ? MOOR_ENOTFOUND
         : code && strcmp(code, "json") == 0  ? MOOR_EJSON
                                              : MOOR_EINVAL;
    set_err(m, rc, "%s", lua_tostring(L, -2));
  } else if (run_id && run_id_size) {
    snprintf(run_id, run_id_size, "%s", lua_tostring(L, -3));
  }
  lua_pop(L, 3);
  return rc;
}

int moor_resume_all(moor *m) {
  int rc = moor_call_engine(m, "resume_all", 0, 2);
  if (rc) return rc;
  if (lua_isnil(m->L, -2)) {
    set_err(m, MOOR_EIO, "%s", lua_tostring(m->L, -1));
    rc = MOOR_EIO;
  }
  lua_pop(m->L, 2);
  return rc;
}

/* One scheduler round of the engine, without running the loop (on_check
 * runs inside the loop). */
static int engine_tick(moor *m, long long *next_due_ms) {
  int rc = moor_call_engine(m, "tick", 0, 3);
  if (rc) return rc;
  if (next_due_ms) *next_due_ms = (long long)luaL_optinteger(m->L, -3, -1);
  if (lua_isstring(m->L, -2)) {
    /* A commit failed: it was rolled back and the engine took back what it
     * held of it; the runs it touched replay from their logs when retried. */
    set_err(m, MOOR_EIO, "cannot write the database: %s", lua_tostring(m->L, -2));
    rc = MOOR_EIO;
  }
  m->store_ok = lua_toboolean(m->L, -1);
  lua_pop(m->L, 3);
  return rc;
}

int moor_tick(moor *m, long long *next_due_ms) {
  uv_run(&m->loop, UV_RUN_NOWAIT);
  return engine_tick(m, next_due_ms);
}

static void on_due(uv_timer_t *t) { (void)t; }

int moor_run(moor *m) {
  for (;;) {
    long long due;
    int rc = moor_tick(m, &due);
    if (rc) return rc;
    if (due < 0) return 0;
    if (due > 0) {
      uv_timer_start(&m->timer, on_due, (uint64_t)due, 0);
      uv_run(&m->loop, UV_RUN_ONCE);
      uv_timer_stop(&m->timer);
    }
  }
}

char *moor_term_clean(char *s) {
  if (!s) return s;
  unsigned char *r = (unsigned char *)s, *w = r;
  for (; *r; r++) {
    unsigned char c = *r;
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) continue;
    if (c == 0xc2 && r[1] >= 0x80 && r[1] <= 0x9f) { /* U+0080..U+009F: C1 controls (CSI, OSC...) */
      r++;
      continue;
    }
    *w++ = c;
  }
  *w = 0;
  return s;
}

static char *dup_top(lua_State *L, int idx) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (!s) return NULL;
  char *d = malloc(len + 1);
  if (d) memcpy(d, s, len + 1);
  return d;
}

int moor_run_info(moor *m, const char *run_id, char **status, char **json) {
  *status = *json = NULL;
  lua_pushstring(m->L, run_id);
  int rc = moor_call_engine(m, "run_info", 1, 2);
  if (rc) return rc;
  if (lua_isnil(m->L, -2)) {
    set_err(m, MOOR_ENOTFOUND, "%s", lua_tostring(m->L, -1));
    lua_pop(m->L, 2);
    return MOOR_ENOTFOUND;
  }
  *status = dup_top(m->L, -2);
  *json = dup_top(m->L, -1);
  lua_pop(m->L, 2);
  if (!*status || !*json) {
    free(*status);
    free(*json);
    *status = *json = NULL;
    return MOOR_ENOMEM;
  }
  return 0;
}

static int json_result(moor *m, const char *fn, const char *arg, int as_json, char **json) {
  *json = NULL;
  lua_pushboolean(m->L, as_json);
  int nargs = 1;
  if (arg) {
    lua_pushstring(m->L, arg);
    nargs = 2;
  }
  int rc = moor_call_engine(m, fn, nargs, 2);
  if (rc) return rc;
  if (lua_isnil(m->L, -2)) {
    set_err(m, MOOR_ENOTFOUND, "%s", lua_tostring(m->L, -1));
    rc = MOOR_ENOTFOUND;
  } else if (!(*json = dup_top(m->L, -2))) {
    rc = MOOR_ENOMEM;
  } else if (!as_json) {
    moor_term_clean(*json); /* a run's log as text goes to a terminal */
  }
  lua_pop(m->L, 2);
  return rc;
}

int moor_list_runs(moor *m, int as_json, char **out) {
  return json_result(m, "list_runs", NULL, as_json, out);
}

int moor_list_events(moor *m, const char *run_id, int as_json, char **out) {
  return json_result(m, "list_events", run_id, as_json, out);
}

/* One column of a one-parameter query, each row through fn. */
static int each_row(moor *m, const char *sql, const char *arg, void (*fn)(FILE *, const char *, const char *, void *),
                    FILE *f, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(m->store.db, sql, -1, &st, NULL) != SQLITE_OK)
    return set_err(m, MOOR_EIO, "cannot read the database: %s", sqlite3_errmsg(m->store.db));
  if (arg) sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
  int n = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *a = (const char *)sqlite3_column_text(st, 0);
    const char *b = sqlite3_column_count(st) > 1 ? (const char *)sqlite3_column_text(st, 1) : NULL;
    fn(f, a ? a : "", b ? b : "", ud);
    n++;
  }
  sqlite3_finalize(st);
  return n;
}

typedef struct waits {
  const char *run, *tool;
  int n;
} waits;

static void wait_line(FILE *f, waits *w, const char *what) {
  if (w->n++) fprintf(f, "  and on %s\n", what);
  else fprintf(f, "%s (%s) waits on %s\n", w->run, w->tool, what);
}

static void on_question(FILE *f, const char *req, const char *unused, void *ud) {
  (void)unused;
  char what[256];
  snprintf(what, sizeof what, "a question %s: 'moor answer %s OPTION' (or --text TEXT)", req, req);
  wait_line(f, ud, what);
}

static void on_hook(FILE *f, const char *kind, const char *count, void *ud) {
  waits *w = ud;
  char what[256];
  if (!strcmp(w->tool, "moor__session"))
    snprintf(what, sizeof what, "its next message: 'moor chat' or 'moor dev' continues it");
  else
    snprintf(what, sizeof what, "%s %s%s: 'moor dev' serves %s", count, kind, strcmp(count, "1") ? "s" : "",
             !strcmp(kind, "webhook") ? "its webhook URL" : "POST /v1/hooks/TOKEN");
  wait_line(f, ud, what);
}

static void on_child(FILE *f, const char *child, const char *tool, void *ud) {
  char what[256];
  snprintf(what, sizeof what, "its child run %s (%s)", child, tool);
  wait_line(f, ud, what);
}

typedef struct run_list {
  char **ids, **tools;
  size_t n, cap;
  int oom;
} run_list;

static void on_run(FILE *f, const char *id, const char *tool, void *ud) {
  (void)f;
  run_list *l = ud;
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **ids = realloc(l->ids, cap * sizeof *ids);
    if (ids) l->ids = ids;
    char **tools = ids ? realloc(l->tools, cap * sizeof *tools) : NULL;
    if (tools) l->tools = tools;
    if (!ids || !tools) {
      l->oom = 1;
      return;
    }
    l->cap = cap;
  }
  l->ids[l->n] = strdup(id);
  l->tools[l->n] = strdup(tool);
  if (!l->ids[l->n] || !l->tools[l->n]) {
    free(l->ids[l->n]);
    free(l->tools[l->n]);
    l->oom = 1;
    return;
  }
  l->n++;
}

int moor_describe_waiting(moor *m, char **out) {
  *out = NULL;
  run_list l = {0};
  int rc = each_row(m, "SELECT id, tool FROM runs WHERE status='running' ORDER BY started, id", NULL, on_run, NULL, &l);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = rc >= 0 && !l.oom && l.n ? open_memstream(&buf, &len) : NULL;
  if (rc >= 0 && !l.oom && l.n && !f) rc = MOOR_ENOMEM;
  for (size_t i = 0; f && i < l.n && rc >= 0; i++) {
    waits w = {l.ids[i], l.tools[i], 0};
    if ((rc = each_row(m, "SELECT request_id FROM inputs WHERE run_id=? AND status='pending' ORDER BY created, "
                       "request_id", w.run, on_question, f, &w)) < 0 ||
        (rc = each_row(m, "SELECT kind, count(*) FROM hooks WHERE run_id=? AND closed=0 GROUP BY kind ORDER BY kind",
                       w.run, on_hook, f, &w)) < 0 ||
        (rc = each_row(m, "SELECT id, tool FROM runs WHERE parent_id=? AND status='running' ORDER BY started, id",
                       w.run, on_child, f, &w)) < 0)
      break;
    if (!w.n) wait_line(f, &w, "nothing this process can see (a cancel's cleanup, or a step elsewhere)");
  }
  if (l.oom) rc = MOOR_ENOMEM;
  for (size_t i = 0; i < l.n; i++) {
    free(l.ids[i]);
    free(l.tools[i]);
  }
  free(l.ids);
  free(l.tools);
  if (f && fclose(f) != 0 && rc >= 0) rc = MOOR_ENOMEM;
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  return 0;
}

int moor_test(moor *m, int argc, char **argv) {
  lua_State *L = m->L;
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  int rc = moor_call_engine(m, "run_tests", 1, 1);
  if (rc) return rc;
  int status = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return status;
}

void *moor_loop(moor *m) { return &m->loop; }

/* Engine API calls that answer (true) or (nil, http_status, code, message). */
static int api_result(moor *m, int rc) {
  lua_State *L = m->L;
  if (rc) return rc;
  if (lua_toboolean(L, -4)) {
    lua_pop(L, 4);
    return 0;
  }
  int status = (int)lua_tointeger(L, -3);
  set_err(m, 0, "%s", lua_tostring(L, -1));
  lua_pop(L, 4);
  return status == 404 ? MOOR_ENOTFOUND : status == 409 ? MOOR_ECONFLICT : status >= 500 ? MOOR_EIO : MOOR_EINVAL;
}

int moor_answer(moor *m, const char *request_id, const char *option_id, const char *text) {
  lua_State *L = m->L;
  lua_pushstring(L, request_id);
  lua_createtable(L, 0, 1);
  if (option_id) {
    lua_pushstring(L, option_id);
    lua_setfield(L, -2, "optionId");
  }
  if (text) {
    lua_pushstring(L, text);
    lua_setfield(L, -2, "text");
  }
  lua_pushboolean(L, 1); /* an in-process person channel: approvals bound to the request */
  return api_result(m, moor_call_engine(m, "answer", 3, 4));
}

int moor_answer_line(moor *m, const char *request_id, const char *line) {
  lua_pushstring(m->L, request_id);
  lua_pushstring(m->L, line);
  return api_result(m, moor_call_engine(m, "answer_line", 2, 4));
}

int moor_format_input(moor *m, const char *request_id, char **out) {
  *out = NULL;
  lua_pushstring(m->L, request_id);
  int rc = moor_call_engine(m, "format_input", 1, 2);
  if (rc) return rc;
  if (lua_isnil(m->L, -2)) {
    set_err(m, 0, "%s", lua_tostring(m->L, -1));
    lua_pop(m->L, 2);
    return MOOR_ENOTFOUND;
  }
  *out = moor_term_clean(dup_top(m->L, -2));
  lua_pop(m->L, 2);
  return *out ? 0 : MOOR_ENOMEM;
}

int moor_cancel(moor *m, const char *run_id) {
  lua_pushstring(m->L, run_id);
  return api_result(m, moor_call_engine(m, "cancel", 1, 4));
}

/* http://HOST[:PORT][/...] where HOST is 127.x.x.x, localhost or [::1].
 * Nothing else may follow the host but a port and a path: in
 * "http://127.0.0.1:1@host/" the loopback part is user info. */
static int is_loopback_url(const char *url) {
  if (strncmp(url, "http://", 7)) return 0;
  const char *h = url + 7;
  size_t n = strcspn(h, ":/");
  if (*h == '[') {
    n = strcspn(h, "]");
    if (h[n] != ']') return 0;
    n++;
  }
  const char *p = h + n;
  if (*p == ':')
    for (p++; *p >= '0' && *p <= '9'; p++) {}
  if (*p && *p != '/') return 0;
  if (n == 9 && !strncmp(h, "localhost", 9)) return 1;
  if (n == 5 && !strncmp(h, "[::1]", 5)) return 1;
  if (strncmp(h, "127.", 4)) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(h[i] == '.' || (h[i] >= '0' && h[i] <= '9'))) return 0;
  return 1;
}

int moor_find_server(const char *db_path, char *url, size_t url_size) {
  if (!db_path || !*db_path) db_path = getenv("MOOR_DB");
  if (!db_path || !*db_path) db_path = ".moor/moor.db";
  unsigned owner = 0;
  int rc = moor_lock_server_url(db_path, url, url_size, &owner);
  if (rc) return rc;
  /* The lock file says where to send $MOOR_API_TOKEN: believe it only when
   * this user wrote it and it names this machine's loopback. */
  if (owner != (unsigned)geteuid() || !is_loopback_url(url)) return MOOR_EINVAL;
  return 0;
}

/* The router's headers: a string of "Name: value\r\n" lines, or a list of
 * single lines joined here, each checked on its own so a CR or LF inside a
 * value cannot become a header of its own. *out is NULL for none, else
 * malloc'd; MOOR_EINVAL for a line that is not one header. */
static int router_headers(lua_State *L, int idx, char **out) {
  *out = NULL;
  if (lua_type(L, idx) == LUA_TSTRING) return (*out = strdup(lua_tostring(L, idx))) ? 0 : MOOR_ENOMEM;
  if (!lua_istable(L, idx)) return 0;
  size_t n = (size_t)lua_rawlen(L, idx), total = 1;
  for (size_t i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, idx, (lua_Integer)i);
    const char *line = lua_tolstring(L, -1, &len);
    int ok = line && strlen(line) == len && moor_http_header_ok(line, len) == 0;
    lua_pop(L, 1);
    if (!ok) return MOOR_EINVAL;
    total += len + 2;
  }
  char *buf = malloc(total), *p = buf;
  if (!buf) return MOOR_ENOMEM;
  for (size_t i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, idx, (lua_Integer)i);
    const char *line = lua_tolstring(L, -1, &len);
    memcpy(p, line, len);
    memcpy(p + len, "\r\n", 2);
    p += len + 2;
    lua_pop(L, 1);
  }
  *p = 0;
  *out = buf;
  return 0;
}

/* HTTP requests go to the Lua router (lua/moor/http.lua), which answers
 * (status, content_type, headers (a string or a list of lines), body), or "stream" after starting an SSE
 * stream itself, or "later". */
static void on_http_request(moor_http *srv, const moor_http_request *req, void *ud) {
  moor *m = ud;
  lua_State *L = m->L;
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, (lua_Integer)req->conn);
  lua_setfield(L, -2, "conn");
  lua_pushstring(L, req->method);
  lua_setfield(L, -2, "method");
  lua_pushstring(L, req->path);
  lua_setfield(L, -2, "path");
  if (req->query) {
    lua_pushstring(L, req->query);
    lua_setfield(L, -2, "query");
  }
  lua_createtable(L, 0, (int)req->nheaders);
  for (size_t i = 0; i < req->nheaders; i++) {
    lua_pushstring(L, req->values[i]);
    lua_setfield(L, -2, req->names[i]);
  }
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, req->body, req->body_len);
  lua_setfield(L, -2, "body");
  if (moor_call_engine(m, "http_request", 1, 4)) {
    static const char fail[] = "{\"error\":{\"code\":\"internal\",\"message\":\"the engine failed; see the server log\"}}";
    fprintf(stderr, "moor: %s\n", m->err);
    moor_http_respond(srv, req->conn, 500, "application/json", NULL, fail, sizeof fail - 1);
    return;
  }
  if (lua_isinteger(L, -4)) {
    size_t len = 0;
    const char *body = lua_tolstring(L, -1, &len);
    char *headers = NULL;
    int rc = router_headers(L, lua_gettop(L) - 1, &headers);
    if (rc == 0)
      rc = moor_http_respond(srv, req->conn, (int)lua_tointeger(L, -4),
                             lua_type(L, -3) == LUA_TSTRING ? lua_tostring(L, -3) : NULL, headers,
                             body ? body : "", len);
    free(headers);
    if (rc == MOOR_EINVAL || rc == MOOR_ENOMEM) {
      /* The answer cannot be written as given (a CR/LF in a header, a bad
       * status): the client still gets one, and the header is not sent. */
      static const char bad[] = "{\"error\":{\"code\":\"bad_response\",\"message\":\"the response could not be "
                                "written (a header with CR, LF or a control byte, a bad header name or status); "
                                "see the server log\"}}";
      fprintf(stderr, "moor: the answer to %s %s was refused (status %d: a header with CR, LF or a control "
              "byte, a header name that is not a token, or a bad status); answered 500\n",
              req->method, req->path, (int)lua_tointeger(L, -4));
      moor_http_respond(srv, req->conn, 500, "application/json", NULL, bad, sizeof bad - 1);
    }
  }
  lua_pop(L, 4);
}

static void on_http_closed(moor_http *srv, unsigned long long conn, void *ud) {
  (void)srv;
  moor *m = ud;
  lua_pushinteger(m->L, (lua_Integer)conn);
  if (moor_call_engine(m, "http_closed", 1, 0)) fprintf(stderr, "moor: %s\n", m->err);
}

/* A positive whole number from the environment, at most max; 0 (the
 * default) when unset, zero, negative or not a number: "-1" must not read as
 * "no limit" (strtoul wraps it). */
static unsigned long long env_count(const char *name, unsigned long long max) {
  const char *env = getenv(name);
  char *end;
  if (!env || !*env || *env == '-') return 0;
  errno = 0;
  unsigned long long v = strtoull(env, &end, 10);
  if (errno || end == env || *end || v > max) return 0;
  return v;
}

#define MOOR__MIN_TOKEN 32 /* characters of MOOR_API_TOKEN for a non-loopback listen */

static int is_loopback(const char *host) {
  return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

int moor_listen(moor *m, const char *addr, char *url, size_t url_size) {
  char host[256] = "127.0.0.1";
  int port = 7373;
  if (addr && *addr) {
    const char *colon = strrchr(addr, ':');
    const char *h = addr, *hend = colon ? colon : addr + strlen(addr);
    if (*h == '[') { /* [::1]:port */
      h++;
      if (hend > h && hend[-1] == ']') hend--;
    }
    if (hend - h >= (long)sizeof host) return set_err(m, MOOR_EINVAL, "address too long: %s", addr);
    if (hend > h) {
      memcpy(host, h, (size_t)(hend - h));
      host[hend - h] = 0;
    }
    if (colon) {
      char *end;
      long p = strtol(colon + 1, &end, 10);
      if (*end || p < 0 || p > 65535) return set_err(m, MOOR_EINVAL, "bad port in --listen %s", addr);
      port = (int)p;
    }
  }
  if (!strcmp(host, "localhost")) strcpy(host, "127.0.0.1");
  const char *token = getenv("MOOR_API_TOKEN");
  if (!is_loopback(host) && (!token || !*token))
    return set_err(m, MOOR_EINVAL,
                   "refusing to listen on %s without MOOR_API_TOKEN: set it to a long random secret "
                   "(every /v1 request must then send 'Authorization: Bearer <token>'), or listen on 127.0.0.1",
                   host);
  /* A token a remote peer can guess in reasonable time is no guard. */
  if (!is_loopback(host) && strlen(token) < MOOR__MIN_TOKEN) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "refusing to listen on %s: MOOR_API_TOKEN has %zu characters and needs at least %d "
             "(use a long random secret, e.g. the output of `openssl rand -hex 32`)",
             host, strlen(token), MOOR__MIN_TOKEN);
    return set_err(m, MOOR_EINVAL, "%s", msg);
  }
  size_t limit = m->cfg.body_limit;
  if (!limit) limit = (size_t)env_count("MOOR_BODY_LIMIT", SIZE_MAX);
  unsigned timeout = m->cfg.http_timeout_ms;
  if (!timeout) timeout = (unsigned)env_count("MOOR_HTTP_TIMEOUT_MS", UINT_MAX);
  /* libuv writes sockets with write(2): a peer that hung up would raise
   * SIGPIPE and kill the process. Ignore it unless the embedder chose. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  moor_http_config hc = {host, port, limit, timeout, 0, token, 0, 0, 0};
  /* Connection caps and the silent-client timeout (0 or unset: http.c's defaults). */
  hc.first_byte_ms = (unsigned)env_count("MOOR_HTTP_FIRST_BYTE_MS", UINT_MAX);
  hc.max_connections = (unsigned)env_count("MOOR_MAX_CONNECTIONS", UINT_MAX);
  hc.max_per_peer = (unsigned)env_count("MOOR_MAX_CONNECTIONS_PER_PEER", UINT_MAX);
  char err[256] = "";
  int rc = moor_http_start(&m->loop, &hc, on_http_request, on_http_closed, m, &m->http, err, sizeof err);
  if (rc) return set_err(m, rc, "cannot listen: %s", err);
  char u[600];
  snprintf(u, sizeof u, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, moor_http_port(m->http));
  if (url && url_size) snprintf(url, url_size, "%s", u);
  if (m->lock_fd >= 0) {
    /* A wildcard address also answers on loopback: note that URL, the one
     * the CLI will send the token to. */
    char note[600];
    if (!strcmp(host, "0.0.0.0"))
      snprintf(note, sizeof note, "http://127.0.0.1:%d", moor_http_port(m->http));
    else if (!strcmp(host, "::"))
      snprintf(note, sizeof note, "http://[::1]:%d", moor_http_port(m->http));
    else
      snprintf(note, sizeof note, "%s", u);
    moor_lock_note_url(m->lock_fd, note);
  }
  lua_pushstring(m->L, u);
  lua_pushboolean(m->L, !is_loopback(host));
  if ((rc = moor_call_engine(m, "serving", 2, 1))) return rc;
  if (lua_isstring(m->L, -1)) rc = set_err(m, MOOR_EINVAL, "%s", lua_tostring(m->L, -1));
  lua_pop(m->L, 1);
  return rc;
}

static void on_serve_due(uv_timer_t *t);

/* While commits fail (a full disk, an immutable WAL) moor dev keeps serving:
 * reads work, writes answer 503, and the engine's round is retried with a
 * backoff (0.1 s doubling to 5 s) until the database takes writes again. */
#define MOOR_STORE_BACKOFF_MIN 100
#define MOOR_STORE_BACKOFF_MAX 5000

static void on_check(uv_check_t *h) {
  moor *m = h->data;
  long long due;
  if (m->store_failing && uv_now(&m->loop) < m->store_retry_at) {
    if (!uv_is_active((uv_handle_t *)&m->timer))
      uv_timer_start(&m->timer, on_serve_due, m->store_retry_at - uv_now(&m->loop), 0);
    return;
  }
  int rc = engine_tick(m, &due);
  if (rc == MOOR_EIO) {
    unsigned b = m->store_backoff_ms;
    b = b ? b * 2 : MOOR_STORE_BACKOFF_MIN;
    if (b > MOOR_STORE_BACKOFF_MAX) b = MOOR_STORE_BACKOFF_MAX;
    if (!m->store_failing || b != m->store_backoff_ms)
      fprintf(stderr, "moor: %s; nothing of it was recorded. Retrying in %.1f s; reads are served and "
              "writes answer 503 until the database takes writes again\n", m->err, b / 1000.0);
    m->store_failing = 1;
    m->store_backoff_ms = b;
    m->store_retry_at = uv_now(&m->loop) + b;
    uv_timer_stop(&m->timer);
    uv_timer_start(&m->timer, on_serve_due, b, 0);
    return;
  }
  if (rc) {
    /* A fatal engine error: stop, and moor_serve reports it (non-zero). */
    fprintf(stderr, "moor: %s\n", m->err);
    m->serve_rc = rc;
    moor_stop(m);
    return;
  }
  if (m->store_failing && m->store_ok) { /* a commit went through (not a round that wrote nothing) */
    fprintf(stderr, "moor: the database takes writes again\n");
    m->store_failing = 0;
    m->store_backoff_ms = 0;
  }
  uv_timer_stop(&m->timer);
  if (due >= 0) uv_timer_start(&m->timer, on_serve_due, (uint64_t)due, 0);
}

/* While serving, the engine's timer runs a tick itself: a loop iteration
 * whose only event is this timer must still run what fell due. */
static void on_serve_due(uv_timer_t *t) {
  moor *m = t->data;
  on_check(&m->check);
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  moor_stop(h->data);
}

void moor_stop(moor *m) {
  if (!m->serving) return;
  m->serving = 0;
  uv_stop(&m->loop);
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

int moor_serve(moor *m) {
  m->serving = 1;
  m->serve_rc = 0;
  uv_check_init(&m->loop, &m->check);
  m->check.data = m;
  m->timer.data = m;
  uv_check_start(&m->check, on_check);
  uv_signal_init(&m->loop, &m->sigint);
  uv_signal_init(&m->loop, &m->sigterm);
  m->sigint.data = m->sigterm.data = m;
  uv_signal_start(&m->sigint, on_signal, SIGINT);
  uv_signal_start(&m->sigterm, on_signal, SIGTERM);
  on_check(&m->check); /* a first round before waiting */
  if (m->serving) uv_run(&m->loop, UV_RUN_DEFAULT);
  m->serving = 0;
  /* Shut down: no new requests, the engine's last writes committed. */
  if (m->http) {
    moor_http_stop(m->http);
    m->http = NULL;
  }
  uv_close((uv_handle_t *)&m->check, on_handle_closed);
  uv_close((uv_handle_t *)&m->sigint, on_handle_closed);
  uv_close((uv_handle_t *)&m->sigterm, on_handle_closed);
  uv_timer_stop(&m->timer);
  uv_run(&m->loop, UV_RUN_NOWAIT);
  char cause[2048];
  snprintf(cause, sizeof cause, "%.2000s", m->err);
  int rc = moor_call_engine(m, "shutdown", 0, 0);
  if (rc) return rc; /* the last writes could not be committed: m->err says why */
  if (m->serve_rc) {
    snprintf(m->err, sizeof m->err, "stopped on an engine error: %s", cause);
    return m->serve_rc;
  }
  if (m->store_failing) {
    snprintf(m->err, sizeof m->err, "stopped while the database could not be written (%s); what was "
             "answered is recorded, and the runs continue from their logs on the next start", cause);
    return MOOR_EIO;
  }
  return 0;
}

int moor_session_start(moor *m, const char *message, char *session_id, size_t size) {
  lua_State *L = m->L;
  if (message) lua_pushstring(L, message);
  else lua_pushnil(L);
  int rc = moor_call_engine(m, "session_start", 1, 2);
  if (rc) return rc;
  if (lua_isnil(L, -2)) {
    set_err(m, 0, "%s", lua_tostring(L, -1));
    lua_pop(L, 2);
    return MOOR_EINVAL;
  }
  if (session_id && size) snprintf(session_id, size, "%s", lua_tostring(L, -2));
  lua_pop(L, 2);
  return 0;
}

int moor_session_send(moor *m, const char *session_id, const char *message, const char *turn_policy) {
  lua_State *L = m->L;
  lua_pushstring(L, session_id);
  lua_createtable(L, 0, 2);
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  if (turn_policy) {
    lua_pushstring(L, turn_policy);
    lua_setfield(L, -2, "turnPolicy");
  }
  return api_result(m, moor_call_engine(m, "session_send", 2, 4));
}

int moor_session_line(moor *m, const char *session_id, const char *line) {
  lua_pushstring(m->L, session_id);
  lua_pushstring(m->L, line);
  return api_result(m, moor_call_engine(m, "session_line", 2, 4));
}

int moor_format_event(moor *m, const moor_event *ev, char **out) {
  lua_State *L = m->L;
  *out = NULL;
  lua_pushstring(L, ev->run_id);
  lua_pushstring(L, ev->kind);
  lua_pushstring(L, ev->payload);
  int rc = moor_call_engine(m, "format_event", 3, 1);
  if (rc) return rc;
  if (!lua_isnil(L, -1) && !(*out = moor_term_clean(dup_top(L, -1)))) rc = MOOR_ENOMEM;
  lua_pop(L, 1);
  return rc;
}
