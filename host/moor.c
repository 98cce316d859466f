/* The public API of host/moor.h: opens the store and the lock, creates the
 * app Lua state with the engine in it, and calls into the engine. Serving
 * HTTP is serve.c, what waiting runs wait on is waiting.c, errors are
 * error.c; the moor.core bindings (core*.c) are what the engine runs on. */
#include "host.h"
#include "json.h"
#include "lock.h"

#include <errno.h>
#include <limits.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef MOOR_NO_CJSON
int luaopen_cjson(lua_State *L);
#endif

/* The engine is inside a round while an event callback runs (core_engine.c
 * counts it): what would drive or change it from there is refused. */
int moor__busy(moor *m, const char *fn) {
  if (!m->in_cb) return 0;
  snprintf(m->err, sizeof m->err,
           "%s called from an event callback: the engine is in the middle of a round; a callback may only "
           "read (moor_run_info, moor_list_*, moor_format_*): note what to do and do it after the round returns",
           fn);
  return MOOR_EBUSY;
}

#define MOOR__NOT_IN_CB(m, fn)                \
  do {                                        \
    int busy_rc_ = moor__busy((m), (fn));     \
    if (busy_rc_) return busy_rc_;            \
  } while (0)

const char *moor__db_path(const char *db) {
  if (!db || !*db) db = getenv("MOOR_DB");
  if (!db || !*db) db = MOOR_DEFAULT_DB;
  return db;
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

/* $MOOR_TRACE_START (not empty, not 0): each phase of starting an engine
 * prints "moor-trace <CLOCK_MONOTONIC microseconds> <phase>" on stderr, for
 * tests/bench/resume.c's breakdown of a restart. Off, it costs one getenv. */
static int trace(const char *phase) {
  static int on = -1;
  if (on < 0) {
    const char *t = getenv("MOOR_TRACE_START");
    on = t && *t && strcmp(t, "0");
  }
  if (on && phase) fprintf(stderr, "moor-trace %llu %s\n", (unsigned long long)(uv_hrtime() / 1000), phase);
  return on;
}

/* (after the dynamic loader has mapped and relocated every library) */
__attribute__((constructor)) static void trace_loaded(void) { (void)trace("loaded"); }

/* Call engine[fn] with nargs arguments already pushed; leaves nres results.
 * A Lua error becomes MOOR_ELUA with its message. */
int moor__call_engine(moor *m, const char *fn, int nargs, int nres) {
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
    moor__set_err(m, MOOR_ELUA, "engine error: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return MOOR_ELUA;
  }
  return 0;
}

static int open_lua(moor *m, const char *lua_dir) {
  /* (the engine's state allocates from its own pool: alloc.c) */
  m->pool = moor__pool_open();
  lua_State *L = m->pool ? moor__pool_newstate(m->pool) : luaL_newstate();
  if (!L) return MOOR_ENOMEM;
  m->L = L;
  trace("lua.new");
  luaL_openlibs(L);
  moor__core_bind(L, m);
  moor__core_preload(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, moor__core_open);
  lua_setfield(L, -2, "moor.core");
#ifndef MOOR_NO_CJSON
  lua_pushcfunction(L, luaopen_cjson);
  lua_setfield(L, -2, "cjson");
#endif
  lua_pop(L, 1);
  /* Our lua/ comes first so an installed copy elsewhere never shadows it. */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", lua_dir, lua_dir, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
  /* moor's modules precompiled at build time, each used only while its
   * source is unchanged (luab.c); without the bundle, the sources. */
  char luab[PATH_MAX];
  if (!moor__luab_path(lua_dir, luab, sizeof luab) && moor__luab_install(L, luab) && trace(NULL))
    fprintf(stderr, "moor-trace lua.bytecode: %s not used (missing, malformed, or for another Lua release)\n", luab);
  trace("lua.libs");
  /* (no collection while moor's own modules load: what they allocate stays) */
  lua_gc(L, LUA_GCSTOP);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moor.host");
  int lrc = lua_pcall(L, 1, 1, 0);
  lua_gc(L, LUA_GCRESTART);
  if (lrc != LUA_OK) {
    moor__set_err(m, MOOR_ELUA, "cannot load the engine: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return MOOR_ELUA;
  }
  m->engine_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  trace("lua.engine");
  if (trace(NULL)) {
    int loaded, stale;
    moor__luab_counts(L, &loaded, &stale);
    fprintf(stderr, "moor-trace lua.bytecode: %d modules precompiled, %d changed since the build\n", loaded, stale);
  }
  return 0;
}

/* What every engine has, whoever owns the Lua state: the loop, the HTTP
 * client, the lock and the store. */
int moor__engine_init(moor *m, const moor_config *cfg) {
  trace("open");
  m->lock_fd = -1;
  m->engine_ref = LUA_NOREF;
  m->cfg = *cfg;
  const char *db = moor__db_path(cfg->db_path);
  if (!(m->db_path = strdup(db))) return MOOR_ENOMEM;
  if (uv_loop_init(&m->loop) != 0) return moor__set_err(m, MOOR_EIO, "cannot start the event loop%s", NULL);
  uv_timer_init(&m->loop, &m->timer);
  m->loop_ok = 1;
  if (moor_fetch_open(&m->loop, &m->fetch))
    return moor__set_err(m, MOOR_EIO, "cannot start the HTTP client%s", NULL);
  trace("loop+curl");
  if (cfg->read_only) {
    /* Inspecting creates nothing: a mistyped --db is an error, not a new file. */
    struct stat st;
    if (stat(db, &st) != 0 || !S_ISREG(st.st_mode))
      return moor__set_err(m, MOOR_ENOTFOUND, "no database at %s (check --db or $MOOR_DB)", db);
  } else {
    if (make_parent(db)) return moor__set_err(m, MOOR_EIO, "cannot create the directory for %s", db);
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
  trace("store");
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
  int rc = moor__engine_init(m, cfg);
  if (rc) return rc;
  char lua_dir[PATH_MAX]; /* cfg.lua_dir, $MOOR_LUA_DIR, else found from the install prefix (paths.c) */
  if ((rc = moor__lua_dir(cfg->lua_dir, lua_dir, sizeof lua_dir, m->err, sizeof m->err))) return rc;
  return open_lua(m, lua_dir);
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
      if (moor__call_engine(m, "shutdown", 0, 0)) fprintf(stderr, "moor: %s\n", m->err);
    }
    moor__timers_close(m);
    moor__harness_close(m);
    if (m->owns_L) lua_close(m->L);
  }
  moor__pool_close(m->pool);
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

void *moor_loop(moor *m) { return &m->loop; }

/* After an engine call with nres results: 0 when the first is a value, else
 * the error that follows it (error.c: m->err and its code, dflt when it names
 * none). The results stay on the stack. */
static int answer_rc(moor *m, int nres, int dflt) {
  return lua_toboolean(m->L, -nres) ? 0 : moor__lua_error(m, -nres + 1, dflt);
}

/* Engine API calls that answer true, or nil and an error. */
static int api_call(moor *m, const char *fn, int nargs) {
  int rc = moor__call_engine(m, fn, nargs, 4);
  if (rc) return rc;
  rc = answer_rc(m, 4, MOOR_EINVAL);
  lua_pop(m->L, 4);
  return rc;
}

static int api_call2(moor *m, const char *fn, const char *a, const char *b) {
  lua_pushstring(m->L, a);
  lua_pushstring(m->L, b);
  return api_call(m, fn, 2);
}

/* Engine calls that answer (id) or (nil, error): the id is copied into id. */
static int id_call(moor *m, const char *fn, int nargs, int nres, char *id, size_t size) {
  int rc = moor__call_engine(m, fn, nargs, nres);
  if (rc) return rc;
  rc = answer_rc(m, nres, MOOR_EINVAL);
  if (!rc && id && size) snprintf(id, size, "%s", lua_tostring(m->L, -nres));
  lua_pop(m->L, nres);
  return rc;
}

static char *dup_top(lua_State *L, int idx) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (!s) return NULL;
  char *d = malloc(len + 1);
  if (d) memcpy(d, s, len + 1);
  return d;
}

/* Engine calls that answer (text) or (nil, error): *out gets a copy, cleaned
 * for a terminal when clean. */
static int text_call(moor *m, const char *fn, int nargs, int clean, char **out) {
  *out = NULL;
  int rc = moor__call_engine(m, fn, nargs, 2);
  if (rc) return rc;
  rc = answer_rc(m, 2, MOOR_ENOTFOUND);
  if (!rc && !(*out = dup_top(m->L, -2))) rc = MOOR_ENOMEM;
  if (!rc && clean) moor_term_clean(*out);
  lua_pop(m->L, 2);
  return rc;
}

int moor_load_agent(moor *m, const char *dir) {
  MOOR__NOT_IN_CB(m, "moor_load_agent");
  lua_pushstring(m->L, dir ? dir : "agent");
  int rc = moor__call_engine(m, "load_agent", 1, 2);
  if (rc) return rc;
  rc = answer_rc(m, 2, MOOR_ELOAD);
  lua_pop(m->L, 2);
  trace("agent");
  return rc;
}

int moor_call(moor *m, const char *tool, const char *input_json, char *run_id, size_t run_id_size) {
  MOOR__NOT_IN_CB(m, "moor_call");
  lua_State *L = m->L;
  lua_pushstring(L, tool);
  lua_pushstring(L, input_json ? input_json : "{}");
  lua_createtable(L, 0, 1);
  lua_pushboolean(L, m->cfg.no_input);
  lua_setfield(L, -2, "noInput");
  return id_call(m, "call", 3, 3, run_id, run_id_size);
}

int moor_resume_all(moor *m) {
  MOOR__NOT_IN_CB(m, "moor_resume_all");
  int rc = moor__call_engine(m, "resume_all", 0, 2);
  if (rc) return rc;
  rc = answer_rc(m, 2, MOOR_EIO);
  lua_pop(m->L, 2);
  trace("resume_all");
  return rc;
}

/* The ms until the next timer the engine's tick answered (at idx), -1 for
 * none. Read without raising: this runs outside any protected call, where a
 * float (a due time past what an integer holds) would abort the process. */
static long long due_ms(lua_State *L, int idx) {
  int isnum = 0;
  lua_Number d = lua_tonumberx(L, idx, &isnum);
  if (!isnum || d != d || d < 0) return -1;
  if (d >= (lua_Number)MOOR_MAX_DUE_MS) return MOOR_MAX_DUE_MS;
  return (long long)d;
}

/* One scheduler round of the engine, without running the loop (serve.c's
 * check handler runs inside the loop). */
int moor__engine_tick(moor *m, long long *next_due_ms) { return moor__engine_round(m, 0, next_due_ms); }

int moor__engine_round(moor *m, long long budget_us, long long *next_due_ms) {
  int nargs = 0;
  if (budget_us > 0) {
    lua_pushinteger(m->L, (lua_Integer)budget_us);
    nargs = 1;
  }
  int rc = moor__call_engine(m, "tick", nargs, 3);
  if (rc) return rc;
  if (next_due_ms) *next_due_ms = due_ms(m->L, -3);
  if (lua_isstring(m->L, -2)) {
    /* A commit failed: it was rolled back and the engine took back what it
     * held of it; the runs it touched replay from their logs when retried. */
    moor__set_err(m, MOOR_EIO, "cannot write the database: %s", lua_tostring(m->L, -2));
    rc = MOOR_EIO;
  }
  m->store_ok = lua_toboolean(m->L, -1);
  lua_pop(m->L, 3);
  return rc;
}

int moor_tick(moor *m, long long *next_due_ms) { return moor_tick_budget(m, 0, next_due_ms); }

int moor_tick_budget(moor *m, long long max_us, long long *next_due_ms) {
  MOOR__NOT_IN_CB(m, max_us > 0 ? "moor_tick_budget" : "moor_tick");
  uv_run(&m->loop, UV_RUN_NOWAIT);
  return moor__engine_round(m, max_us, next_due_ms);
}

static void on_due(uv_timer_t *t) { (void)t; }

int moor_run(moor *m) {
  MOOR__NOT_IN_CB(m, "moor_run");
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

int moor_run_info(moor *m, const char *run_id, char **status, char **json) {
  *status = *json = NULL;
  lua_pushstring(m->L, run_id);
  int rc = moor__call_engine(m, "run_info", 1, 2);
  if (rc) return rc;
  if ((rc = answer_rc(m, 2, MOOR_ENOTFOUND))) {
    lua_pop(m->L, 2);
    return rc;
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

/* A run's log as text goes to a terminal: cleaned; JSON is left as it is. */
int moor_list_runs(moor *m, int as_json, char **out) {
  lua_pushboolean(m->L, as_json);
  return text_call(m, "list_runs", 1, !as_json, out);
}

int moor_list_events(moor *m, const char *run_id, int as_json, char **out) {
  lua_pushboolean(m->L, as_json);
  lua_pushstring(m->L, run_id);
  return text_call(m, "list_events", 2, !as_json, out);
}

int moor_format_input(moor *m, const char *request_id, char **out) {
  lua_pushstring(m->L, request_id);
  return text_call(m, "format_input", 1, 1, out);
}

int moor_answer(moor *m, const char *request_id, const char *option_id, const char *text) {
  MOOR__NOT_IN_CB(m, "moor_answer");
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
  return api_call(m, "answer", 3);
}

int moor_answer_line(moor *m, const char *request_id, const char *line) {
  MOOR__NOT_IN_CB(m, "moor_answer_line");
  return api_call2(m, "answer_line", request_id, line);
}

int moor_cancel(moor *m, const char *run_id) {
  MOOR__NOT_IN_CB(m, "moor_cancel");
  lua_pushstring(m->L, run_id);
  return api_call(m, "cancel", 1);
}

int moor_session_start(moor *m, const char *message, char *session_id, size_t size) {
  MOOR__NOT_IN_CB(m, "moor_session_start");
  if (message) lua_pushstring(m->L, message);
  else lua_pushnil(m->L);
  return id_call(m, "session_start", 1, 2, session_id, size);
}

int moor_session_send(moor *m, const char *session_id, const char *message, const char *turn_policy) {
  MOOR__NOT_IN_CB(m, "moor_session_send");
  lua_State *L = m->L;
  lua_pushstring(L, session_id);
  lua_createtable(L, 0, 2);
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  if (turn_policy) {
    lua_pushstring(L, turn_policy);
    lua_setfield(L, -2, "turnPolicy");
  }
  return api_call(m, "session_send", 2);
}

int moor_session_line(moor *m, const char *session_id, const char *line) {
  MOOR__NOT_IN_CB(m, "moor_session_line");
  return api_call2(m, "session_line", session_id, line);
}

int moor_format_event(moor *m, const moor_event *ev, char **out) {
  lua_State *L = m->L;
  *out = NULL;
  lua_pushstring(L, ev->run_id);
  lua_pushstring(L, ev->kind);
  lua_pushstring(L, ev->payload);
  int rc = moor__call_engine(m, "format_event", 3, 1);
  if (rc) return rc;
  if (!lua_isnil(L, -1) && !(*out = moor_term_clean(dup_top(L, -1)))) rc = MOOR_ENOMEM;
  lua_pop(L, 1);
  return rc;
}

int moor_test(moor *m, int argc, char **argv) {
  MOOR__NOT_IN_CB(m, "moor_test");
  lua_State *L = m->L;
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  int rc = moor__call_engine(m, "run_tests", 1, 1);
  if (rc) return rc;
  int status = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return status;
}
