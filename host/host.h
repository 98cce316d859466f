/* Internal: the engine struct shared by moor.c (public API) and core.c (the
 * Lua bindings the engine in lua/moor/ runs on). */
#ifndef MOOR_HOST_H
#define MOOR_HOST_H

#include <lua.h>
#include <uv.h>

#include "fetch.h"
#include "http.h"
#include "moor.h"
#include "store.h"

struct moor {
  uv_loop_t loop;
  uv_timer_t timer;       /* wakes the loop for the engine's next due timer */
  int loop_ok;            /* loop and timer initialised: close them */
  lua_State *L;
  int engine_ref;         /* registry ref to require "moor.engine" */
  moor_store store;
  int lock_fd;            /* flock()ed <db>.lock; -1 when read-only */
  char *db_path;
  moor_event_cb cb;
  void *cb_ud;
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
  struct after_timer *afters; /* core.after timers pending (core.c) */
  char err[8192];
};

MOOR_API int luaopen_moor_core(lua_State *L);
/* The engine that owns L (stored in the registry by moor_open). */
moor *moor_from_lua(lua_State *L);
void moor_core_bind(lua_State *L, moor *m);
void moor_core_close_afters(moor *m);
/* Module mode (require "moor.core" from a stock Lua): open an engine on L. */
int moor_open_module(lua_State *L);
/* Call engine[fn] with nargs pushed; leaves nres results, or MOOR_ELUA. */
int moor_call_engine(moor *m, const char *fn, int nargs, int nres);

#endif
