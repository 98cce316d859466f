/* Internal: the engine struct and the functions the host's files share
 * (moor__ names, as libuv's uv__; never exported). Dependencies run one way:
 *
 *   module.c (luaopen_moor_core, module mode)        -> moor.c, core.c
 *   serve.c (moor_listen, moor_serve), waiting.c      -> moor.c, error.c
 *   moor.c (the rest of moor.h)                        -> error.c, core*.c
 *   core.c (the moor.core table)                       -> core_store.c, core_clock.c,
 *                                                         core_http.c, core_os.c, harness.c -> core_engine.c;
 *                                                         sandbox.c (sandbox.h: its own states)
 *   all of them                                        -> store.c, http.c, fetch.c,
 *                                                         fetch_lua.c, json.c, lock.c, alloc.c
 *   fetch.c (and main.c)                               -> curl_dl.c (libcurl, dlopen'd at first use)
 *
 * The bindings never call the API; the API never calls the module entry
 * (ctest c_no_cycles checks the objects). The components at the bottom keep
 * their moor_<component>_ names: each header (store.h, http.h, fetch.h,
 * json.h, lock.h) is that component's interface, tested on its own. */
#ifndef MOOR_HOST_H
#define MOOR_HOST_H

#include <lauxlib.h>
#include <lua.h>
#include <uv.h>

#include "fetch.h"
#include "http.h"
#include "moor.h"
#include "moorconf.h"
#include "store.h"

typedef struct moor__pool moor__pool;

struct moor {
  uv_loop_t loop;
  uv_timer_t timer;       /* wakes the loop for the engine's next due timer */
  int loop_ok;            /* loop and timer initialised: close them */
  lua_State *L;
  moor__pool *pool;       /* the allocator of L when moor_open made it (alloc.c); NULL: malloc's */
  int engine_ref;         /* registry ref to require "moor.host" (the Lua face the C side calls) */
  moor_store store;
  int lock_fd;            /* flock()ed <db>.lock; -1 when read-only */
  char *db_path;
  moor_event_cb cb;
  void *cb_ud;
  int in_cb;              /* > 0 while cb runs: driving calls answer MOOR_EBUSY */
  moor_config cfg;        /* as opened (strings not owned) */
  moor_http *http;        /* the API server while moor_listen'd */
  moor_fetch *fetch;      /* the HTTP client (model providers, moor.fetch in steps) */
  uv_check_t check;       /* ticks the engine after each loop iteration (serve) */
  uv_signal_t sigint, sigterm;
  int serving;
  int serve_rc;           /* why moor_serve stopped: 0, or the fatal engine error */
  int store_failing;      /* a commit failed: the round is retried after store_backoff_ms */
  int store_ok;           /* the engine's last round: no failure since the last commit */
  unsigned store_backoff_ms;
  uint64_t store_retry_at; /* uv_now() of the next retry */
  int owns_L;             /* 0 in module mode: the Lua state is the host program's */
  struct moor__after *afters; /* core.after timers pending (core_clock.c) */
  struct moor__proc *procs;   /* core.spawn processes not yet reported (harness.c) */
  struct moor__usrv *usrvs;   /* core.unix_listen servers open (harness.c) */
  char err[8192];
};

/* --- alloc.c: the engine's Lua allocator ---------------------------------- */

/* Size classes for a Lua state's small blocks (see alloc.c). open returns
 * NULL when $MOOR_LUA_ALLOC=malloc, under ASan unless it is "pool", or when
 * memory is short: use luaL_newstate. close frees every slab, after lua_close. */
moor__pool *moor__pool_open(void);
void *moor__pool_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
void moor__pool_close(moor__pool *p);
size_t moor__pool_bytes(const moor__pool *p); /* slab bytes held */
/* A Lua state on pool p, as luaL_newstate's (its panic; warn() off until "@on"). */
lua_State *moor__pool_newstate(moor__pool *p);

/* --- moor.c: the engine's life and calls into the Lua engine --------------- */

/* Open the loop, the HTTP client, the lock and the store (whoever owns the
 * Lua state). On failure m->err says why; moor_close releases. */
int moor__engine_init(moor *m, const moor_config *cfg);
/* One scheduler round of the engine (engine.tick), without running the
 * loop: *next_due_ms (may be NULL) as moor_tick's; MOOR_EIO when a commit
 * failed (m->err says why); m->store_ok set from the round. */
int moor__engine_tick(moor *m, long long *next_due_ms);
/* The same with a budget of budget_us microseconds (<= 0: none). */
int moor__engine_round(moor *m, long long budget_us, long long *next_due_ms);
/* MOOR_EBUSY (m->err naming fn) when called from an event callback, else 0. */
int moor__busy(moor *m, const char *fn);
/* Call engine[fn] with nargs pushed; leaves nres results, or MOOR_ELUA. */
int moor__call_engine(moor *m, const char *fn, int nargs, int nres);
/* The database path: db, else $MOOR_DB, else MOOR_DEFAULT_DB. */
const char *moor__db_path(const char *db);

/* --- error.c: the one error vocabulary at the C boundary ------------------- */

/* m->err = fmt with a (NULL reads as ""); returns code. */
int moor__set_err(moor *m, int code, const char *fmt, const char *a);
/* The MOOR_E* code for an engine error code ("not_found", ...), else dflt. */
int moor__error_code(const char *code, int dflt);
/* Read the engine error whose first value is at stack index idx (the value
 * after the nil or false): { code, message }, or today's (status, code,
 * message) and (message, code) forms, or a bare message. Sets m->err to the
 * message and returns the code's MOOR_E*, or dflt when it has none. */
int moor__lua_error(moor *m, int idx, int dflt);

/* --- core.c and core_*.c: the moor.core bindings --------------------------- */

/* core_engine.c: the engine that owns L (the registry entry moor__core_bind made), or NULL. */
moor *moor__from_lua(lua_State *L);
/* The same, raising when L has no engine (for bindings). */
moor *moor__self(lua_State *L);
/* Make m reachable from moor.core on L. */
void moor__core_bind(lua_State *L, moor *m);
/* core.c: push the moor.core table (the bindings of an engine already bound to L). */
int moor__core_open(lua_State *L);
/* package.preload the C modules the engine requires beside moor.core
 * (moor.json.core, moor.fetch.core). */
void moor__core_preload(lua_State *L);
/* core_clock.c: before the Lua state goes, drop pending core.after timers uncalled. */
void moor__timers_close(moor *m);
/* harness.c: before the Lua state goes, SIGKILL every live core.spawn process
 * group and close every core.unix_listen server, their callbacks uncalled. */
void moor__harness_close(moor *m);

/* paths.c: moor's own files, found from where the running code is (an
 * install prefix, else the build tree). moor__lua_dir: given (cfg.lua_dir),
 * else $MOOR_LUA_DIR, else <prefix>/share/lua/5.4; 0, or MOOR_ENOTFOUND with
 * where it looked in err. moor__wfa_path: $MOOR_WFA, else moor-wfa beside
 * the program or under <prefix>/bin or <prefix>/libexec; 0 or MOOR_ENOTFOUND. */
int moor__lua_dir(const char *given, char *out, size_t size, char *err, size_t errlen);
int moor__wfa_path(char *out, size_t size);
/* paths.c: the bundle of precompiled Lua (luab.c) for the Lua directory
 * lua_dir: the build's moor.luab for a program running from the build tree,
 * else <lua_dir>/moor/moor.luab (none for a NULL lua_dir); none
 * (MOOR_ENOTFOUND) when $MOOR_LUA_BYTECODE is 0 or off, and the bundle it
 * names when it is an absolute path. */
int moor__luab_path(const char *lua_dir, char *out, size_t size);

/* luab.c: package.searchers[2] becomes Lua's own searcher of package.path
 * that takes a module's chunk from the bundle at path when the file it
 * finds is the one the chunk was compiled from, unchanged; 0, or an error
 * (no bundle, a malformed one) with nothing changed. moor__luab_counts: the
 * modules loaded from it so far, and those it had but loaded from source. */
int moor__luab_install(lua_State *L, const char *path);
void moor__luab_counts(lua_State *L, int *loaded, int *stale);
/* luab.c: core.precompiled(name, file), the same check for a file the
 * loader loads itself (moor's built-in tools). */
extern const luaL_Reg moor__core_luab_fns[];

/* Each binding file's functions, assembled into moor.core by core.c. */
extern const luaL_Reg moor__core_engine_fns[]; /* core_engine.c: emit, has_listener, db_path */
extern const luaL_Reg moor__core_store_fns[]; /* core_store.c: query, exec, append, commit, events, store_stats */
extern const luaL_Reg moor__core_clock_fns[]; /* core_clock.c: now, mono, wait, after */
extern const luaL_Reg moor__core_http_fns[];  /* core_http.c: http_respond, http_stream_start, ... */
extern const luaL_Reg moor__core_os_fns[];    /* core_os.c: listdir, hash, sha256, random_bytes, getpid,
                                                 mkdir, chmod, rmdir, realpath */
extern const luaL_Reg moor__core_harness_fns[]; /* harness.c: spawn, pid_start, kill_group, unix_listen, unix_reply, ... */

#endif
