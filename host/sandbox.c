/* The sandbox for model-written programs (DESIGN.md "Sandbox for
 * model-written programs"): one fresh lua_State per program, never the
 * host's; a lua_Alloc with a byte cap; a count hook, set before the first
 * instruction, that charges an instruction budget and checks a monotonic
 * deadline (time parked between run and resume does not count), with a
 * sticky kill that re-raises on every hook so pcall, xpcall handlers and
 * __close cannot swallow it; text chunks only; a fresh environment of
 * copies of the safe base functions, string (no dump), table, math, utf8
 * and a coroutine library whose yields cannot reach the host. Values cross
 * the boundary deep-copied, raw (no metamethod runs), with depth, size and
 * key limits, inside a protected call of the state that allocates.
 *
 * The program talks to the host only through ctx.agent, ctx.all and
 * ctx.race. The scheduler of its tasks is Lua (PRELUDE below, compiled once
 * per process and loaded as bytecode into every sandbox): ctx.agent yields a
 * request to it, and once every task is waiting, sb:run()/sb:resume()
 * return the batch of requests ("calls") to the host, which answers with
 * sb:resume(replies). The bindings (core.sandbox_new and the methods of its
 * userdata) are at the end of this file. */
#include "sandbox.h"

#include <lualib.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SB_NEW, SB_LOADED, SB_PARKED, SB_FINISHED };

/* The allocator's pool (see sb_alloc) */
#define POOL_MAX 256
#define POOL_GRAIN 16
#define POOL_CLASSES (POOL_MAX / POOL_GRAIN)
#define POOL_CHUNK 8192

enum { KILL_NONE, KILL_MEMORY, KILL_INSTRUCTIONS, KILL_TIME, KILL_COROUTINES };

typedef struct moor__sandbox {
  lua_State *S;            /* the program's state; NULL once freed */
  int state;               /* SB_* */
  size_t mem_used, mem_limit;
  long long instr_used, instr_limit;
  double seconds;          /* the time limit as given */
  uint64_t time_limit_ns, elapsed_ns, entered_ns, deadline_ns;
  uint64_t slice_ns;       /* when the current entry's slice ends (the host gets its loop back) */
  uint64_t slice_len_ns;   /* how long a slice is; 0: the program runs until it waits or ends */
  int paused;              /* the hook yielded a task or coroutine at the end of a slice */
  size_t source_max, output_max, result_max, message_max;
  long long coroutines_max, seed;
  int kill;                /* KILL_*: sticky once set */
  char killmsg[96];
  void *free_list[POOL_CLASSES]; /* the allocator's pool: free blocks by size class */
  char *bump, *bump_end;
  union pool_chunk *chunks;
  char *out;               /* captured print output (malloc, outside the budget) */
  size_t out_len, out_cap;
  int out_full;
} sandbox;

#define SB_MT "moor.sandbox"
static const char prelude_key = 0; /* S's registry: the prelude's entry table */
static const char *const TRUNCATED = "[output truncated]\n";

/* Every sandbox's bytes and how many states are open (core.sandbox_stats):
 * per thread, as the Lua states that own the sandboxes are. */
static _Thread_local size_t g_bytes;
static _Thread_local long g_states;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fmt_bytes(char *buf, size_t n, size_t v) {
  if (v >= ((size_t)1 << 20) && v % ((size_t)1 << 20) == 0) snprintf(buf, n, "%zu MiB", v >> 20);
  else if (v >= 1024 && v % 1024 == 0) snprintf(buf, n, "%zu KiB", v >> 10);
  else snprintf(buf, n, "%zu bytes", v);
}

static void sb_kill(sandbox *sb, int why) {
  char b[32];
  if (sb->kill) return;
  sb->kill = why;
  switch (why) {
  case KILL_MEMORY:
    fmt_bytes(b, sizeof b, sb->mem_limit);
    snprintf(sb->killmsg, sizeof sb->killmsg, "memory limit of %s reached", b);
    break;
  case KILL_INSTRUCTIONS:
    snprintf(sb->killmsg, sizeof sb->killmsg, "instruction limit of %lld reached", sb->instr_limit);
    break;
  case KILL_TIME:
    snprintf(sb->killmsg, sizeof sb->killmsg, "time limit of %g s reached", sb->seconds);
    break;
  default:
    snprintf(sb->killmsg, sizeof sb->killmsg, "coroutine limit of %lld reached", sb->coroutines_max);
  }
}

/* --- the allocator: a byte cap ---------------------------------------------- */

/* Objects up to POOL_MAX bytes come from the sandbox's own chunks (free
 * lists by 16-byte class): a program's state is thousands of small objects,
 * and malloc for each made opening a sandbox twice as slow. The cap counts
 * whole chunks and each bigger block, so what is counted is what is held;
 * every chunk goes back when the state closes. */

typedef union pool_chunk {
  union pool_chunk *next;
  max_align_t align;
} pool_chunk;

static size_t cls_of(size_t n) { return (n + POOL_GRAIN - 1) / POOL_GRAIN - 1; }

static int mem_charge(sandbox *sb, size_t n, int force) {
  if (!force && (n > sb->mem_limit || sb->mem_used + n > sb->mem_limit)) {
    sb_kill(sb, KILL_MEMORY); /* Lua raises its memory error now, the hook re-raises after */
    return 0;
  }
  sb->mem_used += n;
  g_bytes += n;
  return 1;
}

static void mem_uncharge(sandbox *sb, size_t n) {
  sb->mem_used -= n;
  g_bytes -= n;
}

/* force: Lua shrinks and must not fail; the cap may be passed by a chunk */
static void *pool_get(sandbox *sb, size_t n, int force) {
  size_t c = cls_of(n), sz = (c + 1) * POOL_GRAIN;
  void *p = sb->free_list[c];
  if (p) {
    sb->free_list[c] = *(void **)p;
    return p;
  }
  if ((size_t)(sb->bump_end - sb->bump) < sz) {
    if (!mem_charge(sb, POOL_CHUNK, force)) return NULL;
    pool_chunk *k = malloc(POOL_CHUNK);
    if (!k) {
      mem_uncharge(sb, POOL_CHUNK);
      return NULL;
    }
    k->next = sb->chunks;
    sb->chunks = k;
    sb->bump = (char *)(k + 1);
    sb->bump_end = (char *)k + POOL_CHUNK;
  }
  p = sb->bump;
  sb->bump += sz;
  return p;
}

static void pool_put(sandbox *sb, void *p, size_t n) {
  size_t c = cls_of(n);
  *(void **)p = sb->free_list[c];
  sb->free_list[c] = p;
}

static void pool_release(sandbox *sb) {
  while (sb->chunks) {
    pool_chunk *k = sb->chunks;
    sb->chunks = k->next;
    free(k);
    mem_uncharge(sb, POOL_CHUNK);
  }
  memset(sb->free_list, 0, sizeof sb->free_list);
  sb->bump = sb->bump_end = NULL;
}

static void block_free(sandbox *sb, void *p, size_t n) {
  if (n <= POOL_MAX) {
    pool_put(sb, p, n);
  } else {
    free(p);
    mem_uncharge(sb, n);
  }
}

static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  sandbox *sb = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    if (ptr) block_free(sb, ptr, old);
    return NULL;
  }
  if (nsize <= POOL_MAX) {
    if (ptr && old <= POOL_MAX && cls_of(old) == cls_of(nsize)) return ptr;
    void *p = pool_get(sb, nsize, ptr && nsize <= old);
    if (p && ptr) {
      memcpy(p, ptr, old < nsize ? old : nsize);
      block_free(sb, ptr, old);
    }
    return p;
  }
  if (ptr && old > POOL_MAX) { /* a big block grows or shrinks */
    if (nsize > old && !mem_charge(sb, nsize - old, 0)) return NULL;
    void *p = realloc(ptr, nsize);
    if (!p && nsize > old) {
      mem_uncharge(sb, nsize - old);
      return NULL;
    }
    if (nsize < old) mem_uncharge(sb, old - nsize);
    return p ? p : ptr; /* a failed shrink keeps the bigger block */
  }
  if (!mem_charge(sb, nsize, 0)) return NULL;
  void *p = malloc(nsize);
  if (!p) {
    mem_uncharge(sb, nsize);
    return NULL;
  }
  if (ptr) {
    memcpy(p, ptr, old);
    pool_put(sb, ptr, old);
  }
  return p;
}

/* --- the count hook: instructions, the deadline, the sticky kill ----------- */

static sandbox *sb_of(lua_State *S) { return *(sandbox **)lua_getextraspace(S); }

static void sb_hook(lua_State *S, lua_Debug *ar) {
  (void)ar;
  sandbox *sb = sb_of(S);
  if (!sb->kill) {
    sb->instr_used += MOOR_SANDBOX_HOOK_COUNT;
    uint64_t now = mono_ns();
    if (sb->instr_used > sb->instr_limit) sb_kill(sb, KILL_INSTRUCTIONS);
    else if (now > sb->deadline_ns) sb_kill(sb, KILL_TIME);
    else if (now > sb->slice_ns && !sb->paused && lua_isyieldable(S)) {
      /* The slice is over: this coroutine yields (no values) to its
       * resumer in the prelude, which passes the pause up to the scheduler;
       * sb:run/resume answers "slice" and the host resumes it later. Not
       * where a C call stands in between (a sort comparator, a gsub
       * callback): the next hook tries again. */
      sb->paused = 1;
      lua_yield(S, 0);
      return;
    }
  }
  if (sb->kill) {
    /* every instruction of this thread raises from now on */
    lua_sethook(S, sb_hook, LUA_MASKCOUNT, 1);
    lua_pushstring(S, sb->killmsg);
    lua_error(S);
  }
}

/* Work a C helper did in one call (n steps, each charged as an
 * instruction): the hook counts only VM instructions, so a helper whose cost
 * grows with its table (next scans it) checks the limits itself, and its
 * kill is the hook's, sticky. */
static void sb_charge(lua_State *S, long long n) {
  sandbox *sb = sb_of(S);
  if (!sb->kill) {
    sb->instr_used += n;
    if (sb->instr_used > sb->instr_limit) sb_kill(sb, KILL_INSTRUCTIONS);
    else if (mono_ns() > sb->deadline_ns) sb_kill(sb, KILL_TIME);
  }
  if (sb->kill) {
    lua_sethook(S, sb_hook, LUA_MASKCOUNT, 1);
    lua_pushstring(S, sb->killmsg);
    lua_error(S);
  }
}

/* Around every entry into S: its clock runs only between these. */
static void sb_enter(sandbox *sb) {
  sb->entered_ns = mono_ns();
  sb->slice_ns = sb->slice_len_ns ? sb->entered_ns + sb->slice_len_ns : UINT64_MAX;
  uint64_t left = sb->elapsed_ns < sb->time_limit_ns ? sb->time_limit_ns - sb->elapsed_ns : 0;
  sb->deadline_ns = sb->entered_ns + left;
}

static void sb_leave(sandbox *sb) { sb->elapsed_ns += mono_ns() - sb->entered_ns; }

/* --- helpers the prelude puts in the program's world ------------------------ */

/* tostring without addresses: __tostring, else numbers, strings, booleans
 * and nil as Lua prints them, else the type (or __name). */
static int sb_tostring(lua_State *S) {
  luaL_checkany(S, 1);
  if (luaL_callmeta(S, 1, "__tostring")) {
    if (!lua_isstring(S, -1)) return luaL_error(S, "'__tostring' must return a string");
    return 1;
  }
  switch (lua_type(S, 1)) {
  case LUA_TNUMBER: case LUA_TSTRING: case LUA_TBOOLEAN: case LUA_TNIL:
    luaL_tolstring(S, 1, NULL);
    return 1;
  default:
    if (luaL_getmetafield(S, 1, "__name") == LUA_TSTRING) return 1;
    lua_pushstring(S, luaL_typename(S, 1));
    return 1;
  }
}

static void out_add(sandbox *sb, const char *s, size_t n) {
  if (sb->out_full) return;
  size_t room = sb->output_max - sb->out_len, tl = strlen(TRUNCATED);
  int cut = n > room;
  if (cut) n = room;
  size_t need = sb->out_len + n + (cut ? tl : 0);
  if (need > sb->out_cap) {
    size_t cap = sb->out_cap ? sb->out_cap : 256;
    while (cap < need) cap *= 2;
    if (cap > sb->output_max + tl) cap = sb->output_max + tl;
    char *p = realloc(sb->out, cap);
    if (!p) { sb->out_full = 1; return; }
    sb->out = p;
    sb->out_cap = cap;
  }
  memcpy(sb->out + sb->out_len, s, n);
  sb->out_len += n;
  if (cut) {
    memcpy(sb->out + sb->out_len, TRUNCATED, tl);
    sb->out_len += tl;
    sb->out_full = 1;
  }
}

static int sb_print(lua_State *S) {
  sandbox *sb = sb_of(S);
  int n = lua_gettop(S);
  for (int i = 1; i <= n; i++) {
    size_t len;
    lua_pushcfunction(S, sb_tostring);
    lua_pushvalue(S, i);
    lua_call(S, 1, 1);
    const char *s = lua_tolstring(S, -1, &len);
    if (i > 1) out_add(sb, "\t", 1);
    out_add(sb, s, len);
    lua_pop(S, 1);
  }
  out_add(sb, "\n", 1);
  return 0;
}

/* Key order for next and pairs: numbers, then strings (bytewise), then
 * false and true; the hash seed and addresses play no part. */
typedef struct {
  int rank, isint, b, slot;
  lua_Integer i;
  double d;
  const char *s;
  size_t len;
} sortkey;

static int key_read(lua_State *S, int idx, sortkey *k) {
  memset(k, 0, sizeof *k);
  switch (lua_type(S, idx)) {
  case LUA_TNUMBER:
    k->rank = 0;
    k->isint = lua_isinteger(S, idx);
    if (k->isint) k->i = lua_tointeger(S, idx);
    k->d = lua_tonumber(S, idx);
    return 1;
  case LUA_TSTRING:
    k->rank = 1;
    k->s = lua_tolstring(S, idx, &k->len);
    return 1;
  case LUA_TBOOLEAN:
    k->rank = 2;
    k->b = lua_toboolean(S, idx);
    return 1;
  default:
    return 0;
  }
}

static int key_cmp(const sortkey *a, const sortkey *b) {
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  switch (a->rank) {
  case 0:
    if (a->isint && b->isint) return a->i < b->i ? -1 : a->i > b->i;
    if (a->d != b->d) return a->d < b->d ? -1 : 1;
    if (a->isint != b->isint) return a->isint ? 1 : -1; /* equal as floats: the float first */
    return a->isint ? (a->i < b->i ? -1 : a->i > b->i) : 0;
  case 1: {
    int c = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);
    if (c) return c < 0 ? -1 : 1;
    return a->len < b->len ? -1 : a->len > b->len;
  }
  default:
    return a->b - b->b;
  }
}

static int key_qcmp(const void *a, const void *b) { return key_cmp(a, b); }

static int bad_key(lua_State *S, const char *fn, int idx) {
  return luaL_error(S, "%s: a table key of type %s has no stable order in the sandbox "
                    "(keep such keys in an array and iterate that)", fn, luaL_typename(S, idx));
}

/* next(t, k): the key after k in the order above (a scan: O(#t) a call). */
static int sb_next(lua_State *S) {
  sortkey cur, best, k;
  luaL_checktype(S, 1, LUA_TTABLE);
  lua_settop(S, 2);
  int have_cur = !lua_isnil(S, 2);
  if (have_cur && !key_read(S, 2, &cur)) return bad_key(S, "next", 2);
  lua_pushnil(S); /* 3: best key so far */
  int have_best = 0;
  long long scanned = 0;
  lua_pushnil(S);
  while (lua_next(S, 1)) {
    lua_pop(S, 1);
    scanned++;
    if (!key_read(S, -1, &k)) return bad_key(S, "next", -1);
    if ((!have_cur || key_cmp(&k, &cur) > 0) && (!have_best || key_cmp(&k, &best) < 0)) {
      lua_copy(S, -1, 3);
      key_read(S, 3, &best);
      have_best = 1;
    }
  }
  sb_charge(S, scanned);
  if (!have_best) {
    lua_pushnil(S);
    return 1;
  }
  lua_pushvalue(S, 3);
  lua_pushvalue(S, 3);
  lua_rawget(S, 1);
  return 2;
}

/* pairs(t) without __pairs: a snapshot of the keys, sorted; keys removed
 * during the loop are skipped. Upvalues: t, keys, order, position. */
static int pairs_iter(lua_State *S) {
  sortkey *order = lua_touserdata(S, lua_upvalueindex(3));
  lua_Integer n = (lua_Integer)(lua_rawlen(S, lua_upvalueindex(3)) / sizeof *order);
  lua_Integer i = lua_tointeger(S, lua_upvalueindex(4));
  while (i < n) {
    lua_rawgeti(S, lua_upvalueindex(2), order[i++].slot);
    lua_pushvalue(S, -1);
    if (lua_rawget(S, lua_upvalueindex(1)) != LUA_TNIL) {
      lua_pushinteger(S, i);
      lua_replace(S, lua_upvalueindex(4));
      return 2;
    }
    lua_pop(S, 2);
  }
  lua_pushinteger(S, i);
  lua_replace(S, lua_upvalueindex(4));
  lua_pushnil(S);
  return 1;
}

static int sb_pairs(lua_State *S) {
  luaL_checktype(S, 1, LUA_TTABLE);
  lua_settop(S, 1);
  size_t n = 0;
  lua_newtable(S); /* 2: keys */
  lua_pushnil(S);
  while (lua_next(S, 1)) {
    lua_pop(S, 1);
    if (lua_type(S, -1) != LUA_TNUMBER && lua_type(S, -1) != LUA_TSTRING && lua_type(S, -1) != LUA_TBOOLEAN)
      return bad_key(S, "pairs", -1);
    if (n >= (size_t)INT32_MAX) return luaL_error(S, "pairs: table too big");
    lua_pushvalue(S, -1);
    lua_rawseti(S, 2, (lua_Integer)++n);
  }
  sortkey *order = lua_newuserdatauv(S, n * sizeof *order, 0); /* 3 */
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(S, 2, (lua_Integer)i + 1);
    key_read(S, -1, &order[i]);
    order[i].slot = (int)i + 1;
    lua_pop(S, 1); /* the key stays anchored by keys: its string pointer stays valid */
  }
  qsort(order, n, sizeof *order, key_qcmp);
  lua_pushvalue(S, 1);
  lua_pushvalue(S, 2);
  lua_pushvalue(S, 3);
  lua_pushinteger(S, 0);
  lua_pushcclosure(S, pairs_iter, 4);
  lua_pushvalue(S, 1);
  lua_pushnil(S);
  return 3; /* iterator, t, nil */
}

/* The pattern functions' caps. A Lua pattern match is one C call the hook
 * cannot interrupt, and backtracking makes it cost up to about
 * (n + 1) ^ (q + 1) steps for a subject of n bytes and q repetitions that
 * can fail after them (*, +, - not at the end, %b, back references), or
 * m * n for a pattern of m bytes without them; one start position fewer in
 * the exponent when anchored. Measured, a step is 2 to 4 ns ("a*b" on 30,000
 * a's takes 4 s, "a*a*b" on 2,000 takes 12 s). A call whose bound is over
 * MOOR_SANDBOX_PATTERN_COST is refused before it starts. */
static double pattern_cost(const char *p, size_t m, size_t n, int can_anchor) {
  size_t i = 0;
  int q = 0;
  int anchored = can_anchor && m > 0 && p[0] == '^';
  if (anchored) i = 1;
  if (strcspn(p + i, "^$*+?.([%-") == m - i) return (double)(m + 1) * (double)(n + 1); /* plain */
  while (i < m) {
    char c = p[i];
    if (c == '(' || c == ')') { i++; continue; }
    if (c == '%') {
      if (i + 1 >= m) { i++; continue; }
      char d = p[i + 1];
      if (d == 'b') { q++; i += 4; continue; }
      if (d >= '0' && d <= '9') { q++; i += 2; continue; }
      if (d == 'f') { i += 2; if (i < m && p[i] == '[') c = '['; else continue; }
      else i += 2;
    }
    if (c == '[') {
      i++;
      if (i < m && p[i] == '^') i++;
      do {
        if (i < m && p[i] == '%') i++;
        i++;
      } while (i < m && p[i] != ']');
      i++;
    } else if (c != '%') {
      i++;
    }
    if (i < m && (p[i] == '*' || p[i] == '+' || p[i] == '-')) {
      size_t j = ++i;
      while (j < m && p[j] == ')') j++;
      if (j < m) q++;
    } else if (i < m && p[i] == '?') {
      i++;
    }
  }
  return (q ? 1.0 : (double)(m + 1)) * pow((double)n + 1, q + (anchored ? 0 : 1));
}

/* upvalue 1: the original function; 2: its name; 3: 1 for find (plain
 * flag), 2 for gmatch (no anchor) */
static int sb_pattern(lua_State *S) {
  size_t n, m;
  const char *name = lua_tostring(S, lua_upvalueindex(2));
  int kind = (int)lua_tointeger(S, lua_upvalueindex(3));
  luaL_checklstring(S, 1, &n);
  const char *p = luaL_checklstring(S, 2, &m);
  char why[200];
  if (m > MOOR_SANDBOX_PATTERN_MAX) {
    snprintf(why, sizeof why, "string.%s: a pattern of %zu bytes is over the sandbox's %d", name, m,
             MOOR_SANDBOX_PATTERN_MAX);
    return luaL_error(S, "%s", why);
  }
  if (n > MOOR_SANDBOX_SUBJECT_MAX) {
    snprintf(why, sizeof why, "string.%s: a subject of %zu bytes is over the sandbox's %zu", name, n,
             (size_t)MOOR_SANDBOX_SUBJECT_MAX);
    return luaL_error(S, "%s", why);
  }
  double cost = kind == 1 && lua_toboolean(S, 4) ? (double)(m + 1) * (double)(n + 1)
                                                 : pattern_cost(p, m, n, kind != 2);
  if (cost > MOOR_SANDBOX_PATTERN_COST) {
    snprintf(why, sizeof why, "string.%s: this pattern could backtrack too long on a subject of %zu bytes "
             "in the sandbox; use a shorter subject or fewer repetitions", name, n);
    return luaL_error(S, "%s", why);
  }
  lua_pushvalue(S, lua_upvalueindex(1));
  lua_insert(S, 1);
  lua_call(S, lua_gettop(S) - 1, LUA_MULTRET);
  return lua_gettop(S);
}

/* string.rep with a cap on the result */
static int sb_rep(lua_State *S) {
  size_t l, lsep;
  luaL_checklstring(S, 1, &l);
  lua_Integer n = luaL_checkinteger(S, 2);
  luaL_optlstring(S, 3, "", &lsep);
  if (n > 0) {
    double total = (double)l * (double)n + (double)lsep * (double)(n - 1);
    if (total > (double)MOOR_SANDBOX_REP_MAX) {
      char why[120];
      snprintf(why, sizeof why, "string.rep: a result of %.0f bytes is over the sandbox's %zu", total,
               (size_t)MOOR_SANDBOX_REP_MAX);
      return luaL_error(S, "%s", why);
    }
  }
  lua_pushvalue(S, lua_upvalueindex(1));
  lua_insert(S, 1);
  lua_call(S, lua_gettop(S) - 1, 1);
  return 1;
}

/* string.format without %p, and %s of a table or function through the
 * sandbox's tostring (no address). */
static int sb_format(lua_State *S) {
  size_t fl;
  const char *f = luaL_checklstring(S, 1, &fl);
  int arg = 1;
  for (size_t i = 0; i < fl; i++) {
    if (f[i] != '%') continue;
    if (++i < fl && f[i] == '%') continue;
    while (i < fl && strchr("-+ #0123456789.", f[i])) i++;
    if (i >= fl) break;
    arg++;
    if (f[i] == 'p') return luaL_error(S, "string.format: '%%p' is not allowed in the sandbox");
    if (f[i] == 's' && arg <= lua_gettop(S) && lua_type(S, arg) != LUA_TSTRING && lua_type(S, arg) != LUA_TNUMBER) {
      lua_pushcfunction(S, sb_tostring);
      lua_pushvalue(S, arg);
      lua_call(S, 1, 1);
      lua_replace(S, arg);
    }
  }
  lua_pushvalue(S, lua_upvalueindex(1));
  lua_insert(S, 1);
  lua_call(S, lua_gettop(S) - 1, 1);
  return 1;
}

/* table.sort, deterministic: Lua's own picks a random pivot (clock and
 * time) on unbalanced partitions, so equal elements could land in another
 * order on replay. This is a stable bottom-up merge sort through a scratch
 * table, raw reads and writes; the comparator (or <) is called as Lua's. */
static int sort_less(lua_State *S, int has_comp) {
  int r;
  if (has_comp) {
    lua_pushvalue(S, 2);
    lua_pushvalue(S, -3);
    lua_pushvalue(S, -3);
    lua_call(S, 2, 1);
    r = lua_toboolean(S, -1);
    lua_pop(S, 1);
  } else {
    r = lua_compare(S, -2, -1, LUA_OPLT);
  }
  return r;
}

static int sb_sort(lua_State *S) {
  luaL_checktype(S, 1, LUA_TTABLE);
  lua_Integer n = luaL_len(S, 1);
  int has_comp = !lua_isnoneornil(S, 2);
  if (has_comp) luaL_checktype(S, 2, LUA_TFUNCTION);
  luaL_argcheck(S, n < INT32_MAX, 1, "array too big");
  lua_settop(S, 2);
  if (n < 2) return 0;
  lua_createtable(S, (int)n, 0); /* 3: scratch */
  int src = 1, dst = 3;
  for (lua_Integer w = 1; w < n; w *= 2) {
    for (lua_Integer lo = 1; lo <= n; lo += 2 * w) {
      lua_Integer mid = lo + w <= n + 1 ? lo + w : n + 1, hi = lo + 2 * w <= n + 1 ? lo + 2 * w : n + 1;
      lua_Integer i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        lua_rawgeti(S, src, j);
        lua_rawgeti(S, src, i);
        if (sort_less(S, has_comp)) { /* src[j] < src[i]: j first (stable: i wins ties) */
          lua_pop(S, 1);
          j++;
        } else {
          lua_remove(S, -2);
          i++;
        }
        lua_rawseti(S, dst, k++);
      }
      for (; i < mid; i++) {
        lua_rawgeti(S, src, i);
        lua_rawseti(S, dst, k++);
      }
      for (; j < hi; j++) {
        lua_rawgeti(S, src, j);
        lua_rawseti(S, dst, k++);
      }
    }
    int t = src;
    src = dst;
    dst = t;
  }
  if (src != 1) {
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(S, 3, i);
      lua_rawseti(S, 1, i);
    }
  }
  return 0;
}

/* copy(lib, extra?): a table of lib's fields and extra's, sized once */
static int sb_copy(lua_State *S) {
  int n = 0;
  luaL_checktype(S, 1, LUA_TTABLE);
  lua_settop(S, 2);
  for (int t = 1; t <= 2; t++) {
    if (!lua_istable(S, t)) continue;
    lua_pushnil(S);
    while (lua_next(S, t)) {
      lua_pop(S, 1);
      n++;
    }
  }
  lua_createtable(S, 0, n);
  for (int t = 1; t <= 2; t++) {
    if (!lua_istable(S, t)) continue;
    lua_pushnil(S);
    while (lua_next(S, t)) {
      lua_pushvalue(S, -2);
      lua_insert(S, -2);
      lua_rawset(S, 3);
    }
  }
  return 1;
}

static int sb_newtable(lua_State *S) {
  lua_createtable(S, 0, (int)luaL_checkinteger(S, 1));
  return 1;
}

static int sb_rawmeta(lua_State *S) {
  luaL_checkany(S, 1);
  if (!lua_getmetatable(S, 1)) lua_pushnil(S);
  return 1;
}

static int sb_force_setmetatable(lua_State *S) {
  luaL_checktype(S, 1, LUA_TTABLE);
  luaL_argexpected(S, lua_isnoneornil(S, 2) || lua_istable(S, 2), 2, "nil or table");
  lua_settop(S, 2);
  lua_setmetatable(S, 1);
  return 0;
}

static int ctx_newindex(lua_State *S) { return luaL_error(S, "ctx is read-only"); }

/* ctx: a userdata (rawset cannot touch it) whose fields are api's */
static int sb_make_ctx(lua_State *S) {
  luaL_checktype(S, 1, LUA_TTABLE);
  lua_newuserdatauv(S, 0, 0);
  lua_createtable(S, 0, 4);
  lua_pushvalue(S, 1);
  lua_setfield(S, -2, "__index");
  lua_pushcfunction(S, ctx_newindex);
  lua_setfield(S, -2, "__newindex");
  lua_pushboolean(S, 0);
  lua_setfield(S, -2, "__metatable");
  lua_pushliteral(S, "ctx");
  lua_setfield(S, -2, "__name");
  lua_setmetatable(S, -2);
  return 1;
}

/* paused(): did the hook stop a coroutine at the end of a slice?
 * unpause(): that pause is taken (by the scheduler, or a resumer that cannot
 * pass it up). */
static int sb_paused(lua_State *S) {
  lua_pushboolean(S, sb_of(S)->paused);
  return 1;
}

static int sb_unpause(lua_State *S) {
  sb_of(S)->paused = 0;
  return 0;
}

static int sb_kill_coroutines(lua_State *S) {
  sandbox *sb = sb_of(S);
  sb_kill(sb, KILL_COROUTINES);
  lua_pushstring(S, sb->killmsg);
  return lua_error(S);
}

/* --- values across the boundary ---------------------------------------------- */

/* A deep copy from one state to another (or within one), raw: no metamethod
 * runs and metatables stay behind. JSON values only: nil, booleans, finite
 * numbers, strings, tables with string or integer keys; no cycles, at most
 * MOOR_SANDBOX_DEPTH deep, and `budget` bytes as JSON (roughly). It reads
 * `from` with calls that neither allocate nor raise, and raises its errors
 * (with the path of the value) in `to`, which the caller protects. */
typedef struct {
  lua_State *from, *to;
  size_t budget;
  const char *limit_name;       /* "result limit of 1 MiB" */
  const void *seen[MOOR_SANDBOX_DEPTH + 1];
  char path[160];
  size_t plen;
} copier;

static void copy_fail(copier *c, const char *why) {
  luaL_error(c->to, "%s %s", c->path, why);
}

static void charge(copier *c, size_t n) {
  if (n > c->budget) {
    luaL_error(c->to, "%s is over the %s (as JSON)", c->path, c->limit_name);
  }
  c->budget -= n;
}

static void path_key(copier *c, int kidx) {
  size_t room = sizeof c->path - c->plen;
  if (lua_type(c->from, kidx) == LUA_TNUMBER)
    snprintf(c->path + c->plen, room, "[%lld]", (long long)lua_tointeger(c->from, kidx));
  else
    snprintf(c->path + c->plen, room, ".%.40s", lua_tostring(c->from, kidx));
  c->plen += strlen(c->path + c->plen);
}

static void copy_value(copier *c, int idx, int depth) {
  lua_State *F = c->from, *T = c->to;
  idx = lua_absindex(F, idx);
  if (!lua_checkstack(T, 4)) copy_fail(c, "cannot be copied (stack)");
  switch (lua_type(F, idx)) {
  case LUA_TNIL:
    charge(c, 4);
    lua_pushnil(T);
    return;
  case LUA_TBOOLEAN:
    charge(c, 5);
    lua_pushboolean(T, lua_toboolean(F, idx));
    return;
  case LUA_TNUMBER:
    charge(c, 24);
    if (lua_isinteger(F, idx)) {
      lua_pushinteger(T, lua_tointeger(F, idx));
    } else {
      lua_Number d = lua_tonumber(F, idx);
      if (!isfinite(d)) copy_fail(c, "is NaN or infinite: not a JSON number");
      lua_pushnumber(T, d);
    }
    return;
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(F, idx, &len);
    charge(c, len + 2);
    lua_pushlstring(T, s, len);
    return;
  }
  case LUA_TTABLE:
    break;
  default: {
    char why[80];
    snprintf(why, sizeof why, "is a %s: only JSON values cross the sandbox", luaL_typename(F, idx));
    copy_fail(c, why);
  }
  }
  const void *p = lua_topointer(F, idx);
  for (int i = 0; i < depth; i++)
    if (c->seen[i] == p) copy_fail(c, "refers back to a table that contains it (a cycle)");
  if (depth >= MOOR_SANDBOX_DEPTH) {
    char why[64];
    snprintf(why, sizeof why, "is nested deeper than %d tables", MOOR_SANDBOX_DEPTH);
    copy_fail(c, why);
  }
  if (!lua_checkstack(F, 4)) copy_fail(c, "cannot be copied (stack)");
  c->seen[depth] = p;
  charge(c, 2);
  lua_newtable(T);
  int dst = lua_gettop(T);
  lua_pushnil(F);
  while (lua_next(F, idx)) {
    int v = lua_gettop(F), k = v - 1;
    size_t saved = c->plen;
    if (lua_type(F, k) == LUA_TSTRING) {
      size_t kl;
      const char *ks = lua_tolstring(F, k, &kl);
      path_key(c, k);
      charge(c, kl + 4);
      lua_pushlstring(T, ks, kl);
    } else if (lua_isinteger(F, k)) {
      path_key(c, k);
      charge(c, 8);
      lua_pushinteger(T, lua_tointeger(F, k));
    } else {
      char why[96];
      snprintf(why, sizeof why, "has a key of type %s: only string and integer keys cross the sandbox",
               lua_type(F, k) == LUA_TNUMBER ? "float" : luaL_typename(F, k));
      copy_fail(c, why);
    }
    copy_value(c, v, depth + 1);
    lua_rawset(T, dst);
    c->plen = saved;
    c->path[saved] = 0;
    lua_pop(F, 1);
  }
}

static void copier_init(copier *c, lua_State *from, lua_State *to, const char *root, size_t budget,
                        const char *limit_name) {
  memset(c, 0, sizeof *c);
  c->from = from;
  c->to = to;
  c->budget = budget;
  c->limit_name = limit_name;
  snprintf(c->path, sizeof c->path, "%.60s", root);
  c->plen = strlen(c->path);
}

/* clone(v, what, max_bytes) inside the sandbox: the program's catchable
 * error when v is not a JSON value (ctx.agent's outputSchema). */
static int sb_clone(lua_State *S) {
  copier c;
  char lim[48], b[24];
  const char *what = luaL_checkstring(S, 2);
  lua_Integer max = luaL_checkinteger(S, 3);
  fmt_bytes(b, sizeof b, (size_t)max);
  snprintf(lim, sizeof lim, "message limit of %s", b);
  lua_settop(S, 1);
  copier_init(&c, S, S, what, (size_t)max, lim);
  copy_value(&c, 1, 0);
  return 1;
}

/* --- the prelude ------------------------------------------------------------ */

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverlength-strings"
static const char PRELUDE[] =
#include "sandbox_prelude.h"
    ;
#pragma GCC diagnostic pop

static char *g_prelude;      /* PRELUDE compiled (lua_dump, stripped), once per process */
static size_t g_prelude_len;
static pthread_once_t g_prelude_once = PTHREAD_ONCE_INIT;

typedef struct { char *p; size_t len, cap; int fail; } dumpbuf;

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud) {
  (void)L;
  dumpbuf *d = ud;
  if (d->len + sz > d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8192;
    while (cap < d->len + sz) cap *= 2;
    char *q = realloc(d->p, cap);
    if (!q) { d->fail = 1; return 1; }
    d->p = q;
    d->cap = cap;
  }
  memcpy(d->p + d->len, p, sz);
  d->len += sz;
  return 0;
}

static void compile_prelude(void) {
  dumpbuf d = {0};
  lua_State *L = luaL_newstate();
  if (!L) return;
  if (luaL_loadbufferx(L, PRELUDE, sizeof PRELUDE - 1, "=sandbox", "t") != LUA_OK) {
    fprintf(stderr, "moor: the sandbox prelude does not compile: %s\n", lua_tostring(L, -1));
  } else if (lua_dump(L, dump_writer, &d, 1) == 0 && !d.fail) {
    g_prelude = d.p;
    g_prelude_len = d.len;
    d.p = NULL;
  }
  free(d.p);
  lua_close(L);
}

/* --- entries into the sandbox state (each under lua_pcall in S) -------------- */

static int fn_init(lua_State *S) {
  sandbox *sb = lua_touserdata(S, 1);
  static const struct { const char *name, *key; lua_CFunction open; } libs[] = {
    {"_G", "base", luaopen_base}, {LUA_COLIBNAME, "coroutine", luaopen_coroutine},
    {LUA_TABLIBNAME, "table", luaopen_table}, {LUA_STRLIBNAME, "string", luaopen_string},
    {LUA_MATHLIBNAME, "math", luaopen_math}, {LUA_UTF8LIBNAME, "utf8", luaopen_utf8}};
  static const luaL_Reg helpers[] = {
    {"tostring", sb_tostring}, {"print", sb_print}, {"next", sb_next}, {"pairs", sb_pairs},
    {"rawmeta", sb_rawmeta}, {"force_setmetatable", sb_force_setmetatable}, {"make_ctx", sb_make_ctx},
    {"kill_coroutines", sb_kill_coroutines}, {"paused", sb_paused}, {"unpause", sb_unpause}, {"clone", sb_clone}, {"sort", sb_sort},
    {"copy", sb_copy}, {"newtable", sb_newtable}, {NULL, NULL}};
  static const struct { const char *name; int kind; } pats[] = {
    {"find", 1}, {"match", 0}, {"gmatch", 2}, {"gsub", 0}};
  char b[32];

  lua_createtable(S, 0, 8); /* 2: raw */
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
    luaL_requiref(S, libs[i].name, libs[i].open, 0);
    lua_setfield(S, 2, libs[i].key);
  }
  lua_newtable(S); /* 3: raw.c */
  luaL_setfuncs(S, helpers, 0);
  lua_pushinteger(S, sb->coroutines_max);
  lua_setfield(S, 3, "coroutines");
  lua_pushinteger(S, MOOR_SANDBOX_NAME_MAX);
  lua_setfield(S, 3, "name_max");
  lua_pushinteger(S, (lua_Integer)sb->message_max);
  lua_setfield(S, 3, "message_max");
  fmt_bytes(b, sizeof b, sb->message_max);
  lua_pushstring(S, b);
  lua_setfield(S, 3, "message_limit");
  lua_pushinteger(S, sb->seed);
  lua_setfield(S, 3, "seed");
  lua_newtable(S); /* 4: raw.c.string, the wrapped string functions */
  lua_getfield(S, 2, "string");
  for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
    lua_getfield(S, 5, pats[i].name);
    lua_pushstring(S, pats[i].name);
    lua_pushinteger(S, pats[i].kind);
    lua_pushcclosure(S, sb_pattern, 3);
    lua_setfield(S, 4, pats[i].name);
  }
  lua_getfield(S, 5, "rep");
  lua_pushcclosure(S, sb_rep, 1);
  lua_setfield(S, 4, "rep");
  lua_getfield(S, 5, "format");
  lua_pushcclosure(S, sb_format, 1);
  lua_setfield(S, 4, "format");
  lua_pop(S, 1);
  lua_setfield(S, 3, "string");
  lua_setfield(S, 2, "c");
  if (luaL_loadbufferx(S, g_prelude, g_prelude_len, "=sandbox", "b") != LUA_OK) return lua_error(S);
  lua_pushvalue(S, 2);
  lua_call(S, 1, 1);
  lua_rawsetp(S, LUA_REGISTRYINDEX, &prelude_key);
  return 0;
}

#define PROGRAM_PREFIX "local ctx = ...; "

typedef struct {
  const char *src;
  size_t len;
  int part;
  char chunkname[72];
} load_args;

static const char *load_reader(lua_State *S, void *ud, size_t *size) {
  (void)S;
  load_args *a = ud;
  switch (a->part++) {
  case 0: *size = sizeof PROGRAM_PREFIX - 1; return PROGRAM_PREFIX;
  case 1: *size = a->len; return a->src;
  default: *size = 0; return NULL;
  }
}

/* -> true, or false and the message */
static int fn_load(lua_State *S) {
  load_args *a = lua_touserdata(S, 1);
  if (lua_load(S, load_reader, a, a->chunkname, "t") != LUA_OK) {
    lua_pushboolean(S, 0);
    lua_insert(S, -2);
    return 2;
  }
  lua_rawgetp(S, LUA_REGISTRYINDEX, &prelude_key);
  lua_getfield(S, -1, "env");
  lua_setupvalue(S, -3, 1); /* the chunk's _ENV */
  lua_getfield(S, -1, "set_program");
  lua_pushvalue(S, -3);
  lua_call(S, 1, 0);
  lua_pushboolean(S, 1);
  return 1;
}

/* After E.start or E.resume returned (status, value): an "error" becomes
 * ("error", message, code?) here, where reading the value may allocate. */
static int finish_in_sandbox(lua_State *S) {
  if (strcmp(lua_tostring(S, -2), "error") != 0) return 2;
  int e = lua_gettop(S);
  if (lua_type(S, e) == LUA_TSTRING) {
    lua_pushnil(S);
    return 3;
  }
  if (lua_type(S, e) == LUA_TTABLE) {
    lua_pushliteral(S, "message");
    if (lua_rawget(S, e) != LUA_TSTRING) {
      lua_pop(S, 1);
      lua_pushliteral(S, "(error object is a table value)");
    }
    lua_pushliteral(S, "code");
    if (lua_rawget(S, e) != LUA_TSTRING) {
      lua_pop(S, 1);
      lua_pushnil(S);
    }
  } else {
    lua_pushfstring(S, "(error object is a %s value)", luaL_typename(S, e));
    lua_pushnil(S);
  }
  lua_remove(S, e);
  return 3;
}

static int fn_start(lua_State *S) {
  lua_rawgetp(S, LUA_REGISTRYINDEX, &prelude_key);
  lua_getfield(S, -1, "start");
  lua_call(S, 0, 2);
  return finish_in_sandbox(S);
}

/* The host's replies, already checked and laid out by m_resume as a host
 * array { id, ok, payload, id, ok, payload, ... } at index `idx` of H. */
typedef struct {
  lua_State *H;
  int idx;
  lua_Integer n;
} import_args;

static int fn_resume(lua_State *S) {
  import_args *a = lua_touserdata(S, 1);
  lua_State *H = a->H;
  copier c;
  lua_newtable(S); /* 2: replies for E.resume: [id] = { ok, value } */
  for (lua_Integer i = 0; i < a->n; i++) {
    if (!lua_checkstack(H, 8)) return luaL_error(S, "sb:resume: host stack");
    lua_rawgeti(H, a->idx, 3 * i + 1);
    lua_Integer id = lua_tointeger(H, -1);
    lua_rawgeti(H, a->idx, 3 * i + 2);
    int ok = lua_toboolean(H, -1);
    lua_rawgeti(H, a->idx, 3 * i + 3);
    lua_createtable(S, 2, 0);
    lua_pushboolean(S, ok);
    lua_rawseti(S, -2, 1);
    copier_init(&c, H, S, ok ? "reply.value" : "reply.error", SIZE_MAX, "memory limit");
    copy_value(&c, -1, 0);
    lua_rawseti(S, -2, 2);
    lua_rawseti(S, 2, id);
    lua_pop(H, 3);
  }
  lua_rawgetp(S, LUA_REGISTRYINDEX, &prelude_key);
  lua_getfield(S, -1, "resume");
  lua_pushvalue(S, 2);
  lua_call(S, 1, 2);
  return finish_in_sandbox(S);
}

static int fn_entry(lua_State *S) {
  const char *name = lua_touserdata(S, 1);
  lua_rawgetp(S, LUA_REGISTRYINDEX, &prelude_key);
  lua_getfield(S, -1, name);
  lua_call(S, 0, 1);
  return 1;
}

/* lua_pcall(S, f(ud)) with the clock running; S's stack is emptied first. */
static int sb_pcall(sandbox *sb, lua_CFunction f, void *ud, int nres) {
  lua_State *S = sb->S;
  lua_settop(S, 0);
  lua_pushcfunction(S, f);
  lua_pushlightuserdata(S, ud);
  sb_enter(sb);
  int rc = lua_pcall(S, 1, nres, 0);
  sb_leave(sb);
  return rc;
}

static void sb_free_state(sandbox *sb, int run_close) {
  if (!sb->S) return;
  if (run_close && sb->state == SB_PARKED && !sb->kill)
    sb_pcall(sb, fn_entry, (void *)"close", 1); /* to-be-closed variables, under the same budget */
  lua_close(sb->S);
  sb->S = NULL;
  pool_release(sb);
  g_states--;
}

/* --- the bindings (host side) ------------------------------------------------ *
 *
 * core.sandbox_new{ memory, instructions, seconds, source, output, result,
 *     message, coroutines, seed }  -> sb, or nil, { code, message }
 *   (each field optional; defaults MOOR_SANDBOX_* in moorconf.h)
 * sb:load(source, chunkname?)   -> true | nil, { code = "syntax"|"limit", message }
 * sb:run()  and  sb:resume(replies)  ->
 *   "done", value                       (the program's return value, copied out;
 *                                         the state is freed)
 *   "calls", { { id, name, message, outputSchema? }, ... }
 *                                        (the requests made since the last return;
 *                                         may be empty while earlier ones are awaited)
 *   "error", { code = "runtime"|"limit"|"result", message, cause? }
 *                                        (cause: a raised { code, message } table;
 *                                         the state is freed)
 *   replies = { [id] = { ok = true, value = v } | { ok = false, error = { code, message } } };
 *   ids no longer awaited (a closed ctx.race branch) are ignored.
 * sb:pending()  -> the ids still awaited, ascending
 * sb:output()   -> the captured print text
 * sb:memory()   -> bytes the state holds (0 once freed)
 * sb:close()    -> runs pending to-be-closed variables under the budget left,
 *                  frees the state (idempotent; also __close and __gc)
 * sb:evict()    -> frees the state and runs nothing (a parked program the
 *                  engine will re-execute from its log)
 * core.sandbox_stats() -> { bytes, states } of this thread's sandboxes */

static sandbox *check_sb(lua_State *H) { return luaL_checkudata(H, 1, SB_MT); }

static void push_err(lua_State *H, const char *code, const char *msg, size_t len) {
  lua_createtable(H, 0, 2);
  lua_pushstring(H, code);
  lua_setfield(H, -2, "code");
  if (len > MOOR_SANDBOX_ERROR_MAX) len = MOOR_SANDBOX_ERROR_MAX;
  lua_pushlstring(H, msg, len);
  lua_setfield(H, -2, "message");
}

static int opt_size(lua_State *H, const char *field, size_t dflt, size_t min, size_t *out) {
  lua_getfield(H, 1, field);
  if (lua_isnil(H, -1)) {
    *out = dflt;
  } else {
    int isint;
    lua_Integer v = lua_tointegerx(H, -1, &isint);
    if (!isint || v < (lua_Integer)min)
      return luaL_error(H, "core.sandbox_new: %s must be an integer of at least %d", field, (int)min);
    *out = (size_t)v;
  }
  lua_pop(H, 1);
  return 0;
}

static int l_sandbox_new(lua_State *H) {
  size_t memory, instructions, source, output, result, message, coroutines;
  lua_Integer seed = 0;
  double seconds = MOOR_SANDBOX_SECONDS;
  if (lua_isnoneornil(H, 1)) {
    lua_settop(H, 0);
    lua_newtable(H);
  }
  luaL_checktype(H, 1, LUA_TTABLE);
  opt_size(H, "memory", MOOR_SANDBOX_MEMORY, 64 * 1024, &memory);
  opt_size(H, "instructions", MOOR_SANDBOX_INSTRUCTIONS, 1, &instructions);
  opt_size(H, "source", MOOR_SANDBOX_SOURCE, 0, &source);
  opt_size(H, "output", MOOR_SANDBOX_OUTPUT, 0, &output);
  opt_size(H, "result", MOOR_SANDBOX_RESULT, 16, &result);
  opt_size(H, "message", MOOR_SANDBOX_MESSAGE, 0, &message);
  opt_size(H, "coroutines", MOOR_SANDBOX_COROUTINES, 1, &coroutines);
  lua_getfield(H, 1, "seconds");
  if (!lua_isnil(H, -1)) {
    seconds = lua_tonumber(H, -1);
    if (!lua_isnumber(H, -1) || !(seconds > 0) || seconds > 1e6)
      return luaL_error(H, "core.sandbox_new: seconds must be a number above 0");
  }
  lua_getfield(H, 1, "seed");
  if (!lua_isnil(H, -1)) {
    int isint;
    seed = lua_tointegerx(H, -1, &isint);
    if (!isint) return luaL_error(H, "core.sandbox_new: seed must be an integer");
  }
  /* slice = true (MOOR_SANDBOX_SLICE_US) or microseconds: sb:run/resume
   * answers "slice" when the program has run that long, and sb:resume{}
   * goes on; left out, a program runs until it waits or ends. */
  uint64_t slice_len_ns = 0;
  lua_getfield(H, 1, "slice");
  if (lua_isboolean(H, -1)) {
    if (lua_toboolean(H, -1)) slice_len_ns = MOOR_SANDBOX_SLICE_US * 1000ull;
  } else if (!lua_isnil(H, -1)) {
    int isint;
    lua_Integer us = lua_tointegerx(H, -1, &isint);
    if (!isint || us < 100) return luaL_error(H, "core.sandbox_new: slice must be true or microseconds (>= 100)");
    slice_len_ns = (uint64_t)us * 1000ull;
  }
  lua_settop(H, 1);

  pthread_once(&g_prelude_once, compile_prelude);
  if (!g_prelude) {
    lua_pushnil(H);
    push_err(H, "internal", "the sandbox prelude is not available", 36);
    return 2;
  }
  sandbox *sb = lua_newuserdatauv(H, sizeof *sb, 0);
  memset(sb, 0, sizeof *sb);
  luaL_setmetatable(H, SB_MT);
  sb->mem_limit = memory;
  sb->instr_limit = (long long)instructions;
  sb->seconds = seconds;
  sb->time_limit_ns = (uint64_t)(seconds * 1e9);
  sb->source_max = source;
  sb->output_max = output;
  sb->result_max = result;
  sb->message_max = message;
  sb->coroutines_max = (long long)coroutines;
  sb->seed = seed;
  sb->slice_len_ns = slice_len_ns;
  sb->S = lua_newstate(sb_alloc, sb);
  if (!sb->S) {
    pool_release(sb);
    lua_pushnil(H);
    push_err(H, "limit", "memory limit reached opening the sandbox", 40);
    return 2;
  }
  g_states++;
  *(sandbox **)lua_getextraspace(sb->S) = sb;
  lua_sethook(sb->S, sb_hook, LUA_MASKCOUNT, MOOR_SANDBOX_HOOK_COUNT); /* before any instruction */
  lua_gc(sb->S, LUA_GCSTOP); /* opening allocates only what stays: no collection until it is done */
  int irc = sb_pcall(sb, fn_init, sb, 0);
  lua_gc(sb->S, LUA_GCRESTART);
  if (irc != LUA_OK) {
    const char *m = sb->kill ? sb->killmsg : lua_type(sb->S, -1) == LUA_TSTRING ? lua_tostring(sb->S, -1) : "?";
    lua_pushnil(H);
    push_err(H, sb->kill ? "limit" : "internal", m, strlen(m));
    sb_free_state(sb, 0);
    sb->state = SB_FINISHED;
    return 2;
  }
  lua_settop(sb->S, 0);
  return 1;
}

static int m_load(lua_State *H) {
  sandbox *sb = check_sb(H);
  load_args a = {0};
  a.src = luaL_checklstring(H, 2, &a.len);
  const char *name = luaL_optstring(H, 3, "workflow");
  if (sb->state != SB_NEW || !sb->S) return luaL_error(H, "sb:load: a program is already loaded");
  snprintf(a.chunkname, sizeof a.chunkname, "=%.60s", name);
  if (a.len > sb->source_max) {
    char b[32], m[64];
    fmt_bytes(b, sizeof b, sb->source_max);
    snprintf(m, sizeof m, "source limit of %s reached", b);
    lua_pushnil(H);
    push_err(H, "limit", m, strlen(m));
    return 2;
  }
  if (a.len > 0 && a.src[0] == LUA_SIGNATURE[0]) {
    char m[128];
    snprintf(m, sizeof m, "%s: binary chunks are refused: send Lua source text", a.chunkname + 1);
    lua_pushnil(H);
    push_err(H, "syntax", m, strlen(m));
    return 2;
  }
  int rc = sb_pcall(sb, fn_load, &a, 2);
  lua_State *S = sb->S;
  if (rc == LUA_OK && lua_toboolean(S, 1)) {
    lua_settop(S, 0);
    sb->state = SB_LOADED;
    lua_pushboolean(H, 1);
    return 1;
  }
  lua_pushnil(H);
  if (sb->kill) {
    push_err(H, "limit", sb->killmsg, strlen(sb->killmsg));
    sb_free_state(sb, 0);
    sb->state = SB_FINISHED;
  } else {
    size_t ml = 0;
    const char *m = lua_type(S, -1) == LUA_TSTRING ? lua_tolstring(S, -1, &ml) : "?";
    push_err(H, rc == LUA_OK ? "syntax" : "internal", m, ml);
    lua_settop(S, 0);
  }
  return 2;
}

typedef struct {
  copier c;
  int src;
} export_args;

static int fn_export(lua_State *H) {
  export_args *a = lua_touserdata(H, 1);
  copy_value(&a->c, a->src, 0);
  return 1;
}

/* After an entry into S (rc, and S's stack as fn_start/fn_resume left it):
 * push the result on H. */
static int results(lua_State *H, sandbox *sb, int rc) {
  lua_State *S = sb->S;
  const char *status = rc == LUA_OK ? lua_tostring(S, 1) : NULL;
  if (rc != LUA_OK || sb->kill) {
    const char *m = sb->kill ? sb->killmsg
                    : lua_type(S, -1) == LUA_TSTRING ? lua_tostring(S, -1) : "the sandbox failed";
    lua_pushstring(H, "error");
    push_err(H, sb->kill ? "limit" : "runtime", m, strlen(m));
    sb_free_state(sb, 0);
    sb->state = SB_FINISHED;
    return 2;
  }
  if (strcmp(status, "error") == 0) {
    size_t ml;
    const char *m = lua_tolstring(S, 2, &ml);
    lua_pushstring(H, "error");
    push_err(H, "runtime", m, ml);
    if (lua_type(S, 3) == LUA_TSTRING) {
      lua_createtable(H, 0, 2);
      lua_pushstring(H, lua_tostring(S, 3));
      lua_setfield(H, -2, "code");
      lua_pushlstring(H, m, ml > MOOR_SANDBOX_ERROR_MAX ? MOOR_SANDBOX_ERROR_MAX : ml);
      lua_setfield(H, -2, "message");
      lua_setfield(H, -2, "cause");
    }
    sb_free_state(sb, 0);
    sb->state = SB_FINISHED;
    return 2;
  }
  if (strcmp(status, "slice") == 0) { /* the program ran its slice: the host resumes it with sb:resume{} */
    lua_settop(S, 0);
    sb->state = SB_PARKED;
    lua_pushstring(H, "slice");
    lua_newtable(H);
    return 2;
  }
  int done = strcmp(status, "done") == 0;
  char b[32], lim[64];
  fmt_bytes(b, sizeof b, sb->result_max);
  snprintf(lim, sizeof lim, "result limit of %s", b);
  export_args a;
  copier_init(&a.c, S, H, done ? "result" : "calls", done ? sb->result_max : SIZE_MAX, lim);
  a.src = 2;
  lua_pushstring(H, done ? "done" : "calls");
  lua_pushcfunction(H, fn_export);
  lua_pushlightuserdata(H, &a);
  int erc = lua_pcall(H, 1, 1, 0);
  if (erc != LUA_OK) {
    size_t ml;
    const char *m = lua_tolstring(H, -1, &ml);
    lua_pushstring(H, "error");
    push_err(H, "result", m ? m : "the result cannot be copied", m ? ml : 27);
    sb_free_state(sb, 0);
    sb->state = SB_FINISHED;
    return 2;
  }
  lua_settop(S, 0);
  if (done) {
    sb_free_state(sb, 0);
    sb->state = SB_FINISHED;
  } else {
    sb->state = SB_PARKED;
  }
  return 2;
}

static int m_run(lua_State *H) {
  sandbox *sb = check_sb(H);
  if (sb->state != SB_LOADED) return luaL_error(H, "sb:run: %s", sb->state == SB_NEW ? "no program loaded" : "already started");
  return results(H, sb, sb_pcall(sb, fn_start, NULL, 3));
}

/* A reply the host gives must be a JSON value: checked here, in the host's
 * own protected call, so a host mistake is the host's error. */
static int host_check(lua_State *H) {
  copier c;
  copier_init(&c, H, H, lua_tostring(H, 2), SIZE_MAX, "memory limit");
  lua_settop(H, 1);
  copy_value(&c, 1, 0);
  return 0;
}

static int m_resume(lua_State *H) {
  sandbox *sb = check_sb(H);
  luaL_checktype(H, 2, LUA_TTABLE);
  if (sb->state != SB_PARKED) return luaL_error(H, "sb:resume: the program is not waiting on calls");
  lua_settop(H, 2);
  lua_newtable(H); /* 3: { id, ok, payload, ... } */
  lua_Integer n = 0;
  lua_pushnil(H);
  while (lua_next(H, 2)) {
    int isint;
    lua_Integer id = lua_tointegerx(H, -2, &isint);
    if (!isint || lua_type(H, -2) != LUA_TNUMBER) return luaL_error(H, "sb:resume: replies are keyed by call id (an integer)");
    if (!lua_istable(H, -1)) return luaL_error(H, "sb:resume: the reply to call %d must be a table { ok, value | error }", (int)id);
    lua_pushinteger(H, id);
    lua_rawseti(H, 3, 3 * n + 1);
    lua_getfield(H, -1, "ok");
    int ok = lua_toboolean(H, -1);
    lua_rawseti(H, 3, 3 * n + 2);
    lua_getfield(H, -1, ok ? "value" : "error");
    if (!ok && !lua_istable(H, -1)) return luaL_error(H, "sb:resume: the failed reply to call %d needs error = { code, message }", (int)id);
    lua_pushcfunction(H, host_check);
    lua_pushvalue(H, -2);
    lua_pushstring(H, ok ? "value" : "error");
    if (lua_pcall(H, 2, 0, 0) != LUA_OK)
      return luaL_error(H, "sb:resume: the reply to call %d: %s", (int)id, lua_tostring(H, -1));
    lua_rawseti(H, 3, 3 * n + 3);
    n++;
    lua_pop(H, 1);
  }
  import_args a = {H, 3, n};
  return results(H, sb, sb_pcall(sb, fn_resume, &a, 3));
}

static int m_pending(lua_State *H) {
  sandbox *sb = check_sb(H);
  lua_newtable(H);
  if (sb->state != SB_PARKED || !sb->S) return 1;
  if (sb_pcall(sb, fn_entry, (void *)"pending", 1) == LUA_OK) {
    lua_State *S = sb->S;
    lua_Integer n = (lua_Integer)lua_rawlen(S, 1);
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(S, 1, i);
      lua_pushinteger(H, lua_tointeger(S, -1));
      lua_rawseti(H, -2, i);
      lua_pop(S, 1);
    }
    lua_settop(S, 0);
  }
  return 1;
}

static int m_output(lua_State *H) {
  sandbox *sb = check_sb(H);
  lua_pushlstring(H, sb->out ? sb->out : "", sb->out_len);
  return 1;
}

static int m_memory(lua_State *H) {
  sandbox *sb = check_sb(H);
  lua_pushinteger(H, sb->S ? (lua_Integer)sb->mem_used : 0);
  return 1;
}

static int m_close(lua_State *H) {
  sandbox *sb = luaL_checkudata(H, 1, SB_MT);
  sb_free_state(sb, 1);
  sb->state = SB_FINISHED;
  return 0;
}

/* sb:evict(): free the state without running anything (the engine bounds
 * memory and will re-execute the program from its log) */
static int m_evict(lua_State *H) {
  sandbox *sb = check_sb(H);
  sb_free_state(sb, 0);
  sb->state = SB_FINISHED;
  return 0;
}

static int m_gc(lua_State *H) {
  sandbox *sb = luaL_checkudata(H, 1, SB_MT);
  sb_free_state(sb, 1);
  sb->state = SB_FINISHED;
  free(sb->out);
  sb->out = NULL;
  sb->out_len = sb->out_cap = 0;
  return 0;
}

static int l_sandbox_stats(lua_State *H) {
  lua_createtable(H, 0, 2);
  lua_pushinteger(H, (lua_Integer)g_bytes);
  lua_setfield(H, -2, "bytes");
  lua_pushinteger(H, (lua_Integer)g_states);
  lua_setfield(H, -2, "states");
  return 1;
}

static int l_sandbox_new_entry(lua_State *H) {
  if (luaL_newmetatable(H, SB_MT)) {
    static const luaL_Reg methods[] = {
      {"load", m_load}, {"run", m_run}, {"resume", m_resume}, {"pending", m_pending},
      {"output", m_output}, {"memory", m_memory}, {"close", m_close}, {"evict", m_evict},
      {NULL, NULL}};
    luaL_newlib(H, methods);
    lua_setfield(H, -2, "__index");
    lua_pushcfunction(H, m_gc);
    lua_setfield(H, -2, "__gc");
    lua_pushcfunction(H, m_close);
    lua_setfield(H, -2, "__close");
  }
  lua_pop(H, 1);
  return l_sandbox_new(H);
}

const luaL_Reg moor__core_sandbox_fns[] = {
  {"sandbox_new", l_sandbox_new_entry}, {"sandbox_stats", l_sandbox_stats}, {NULL, NULL}};
