/* moor.core's clock and timers: wall and monotonic time, a blocking wait
 * for moor.testing, and after(ms, fn), the loop's non-durable timers. The
 * engine's durable timers are Lua (a heap over the log); these are not. */
#include "host.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

/* The wait is over: stop the loop, so uv_run(UV_RUN_ONCE) does not go on to
 * block in its poll until the next timer or I/O (which may be far off). */
static void on_wait_timer(uv_timer_t *t) { uv_stop(t->loop); }

/* wait(ms): block the loop up to ms (for moor.testing, which drives the
 * engine from a spec rather than from moor_run). The loop's cached time is
 * refreshed first: a stale one would make the timer due at once. */
static int l_wait(lua_State *L) {
  moor *m = moor__self(L);
  lua_Integer ms = luaL_checkinteger(L, 1);
  if (ms < 0) ms = 0;
  uv_update_time(&m->loop);
  uv_timer_start(&m->timer, on_wait_timer, (uint64_t)ms, 0);
  uv_run(&m->loop, UV_RUN_ONCE);
  uv_timer_stop(&m->timer);
  return 0;
}

/* after(ms, fn): call fn once from the loop after ms (non-durable: a step's
 * backoff between provider retries). The timer owns its callback's ref. */
typedef struct moor__after {
  uv_timer_t t;
  lua_State *L;
  int ref;
  struct moor__after *next, **prev; /* in m->afters, so moor_close can drop them */
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

void moor__timers_close(moor *m) {
  while (m->afters) {
    after_timer *a = m->afters;
    after_unlink(a);
    luaL_unref(a->L, LUA_REGISTRYINDEX, a->ref);
    uv_close((uv_handle_t *)&a->t, after_closed);
  }
}

static int l_after(lua_State *L) {
  moor *m = moor__self(L);
  lua_Integer ms = luaL_checkinteger(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  after_timer *a = malloc(sizeof *a);
  if (!a) return luaL_error(L, "out of memory");
  /* The callback runs on the main thread: L may be a coroutine (a step's,
   * a script's) that is suspended or gone when the timer fires. */
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  a->L = lua_tothread(L, -1);
  lua_pop(L, 1);
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

const luaL_Reg moor__core_clock_fns[] = {
  {"now", l_now}, {"mono", l_mono}, {"wait", l_wait}, {"after", l_after}, {NULL, NULL}};
