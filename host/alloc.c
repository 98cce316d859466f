/* alloc.c: the allocator of the engine's Lua state (moor_open's; a Lua state
 * a host program owns keeps its own). Lua gives the old size with every free
 * and realloc, so a small block needs no header: blocks of each size class
 * (16-byte steps up to MOOR_ALLOC_SMALL_MAX) come from slabs of
 * MOOR_ALLOC_SLAB bytes, aligned to their size, that serve that class alone;
 * a block's slab is its address rounded down. An allocation or a free is a
 * few instructions (glibc's malloc and free were an eighth of a step's).
 * Larger blocks go to malloc.
 *
 * Slabs come from malloc MOOR_ALLOC_MAP_SLABS at a time. A slab whose blocks
 * are all free leaves its class for any class to take: kept warm while no
 * more than twice as many slabs are empty as in use (or fewer than
 * MOOR_ALLOC_KEEP_SLABS),
 * else its pages go back to the system (madvise) and it waits, cold, behind
 * the warm ones. So memory a class no longer uses serves the others (a
 * burst of small tables, then long strings) or leaves, while a heap that
 * swings between its live size and the collector's twice that keeps its
 * pages (giving them back and faulting them in again cost 5-8 page faults
 * a commit). Each class keeps its last slab, so one block taken and freed
 * over and over moves no slab. The chunks go back to malloc at close.
 *
 * Under AddressSanitizer the pool is off unless $MOOR_LUA_ALLOC=pool (its
 * blocks have no redzones and are reused at once, which would hide
 * overflows and uses after free from the sanitizer); when on, free blocks
 * are poisoned. $MOOR_LUA_ALLOC=malloc turns it off anywhere. */
#include "host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOOR__ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(MOOR__ASAN)
#define MOOR__ASAN 1
#endif
#ifdef MOOR__ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define GRAIN 16 /* every class a multiple of it: Lua's largest alignment (long double) */
#define CLASSES (MOOR_ALLOC_SMALL_MAX / GRAIN)

_Static_assert(MOOR_ALLOC_SMALL_MAX % GRAIN == 0 && MOOR_ALLOC_SMALL_MAX > 0,
               "MOOR_ALLOC_SMALL_MAX must be a positive multiple of 16");
_Static_assert((MOOR_ALLOC_SLAB & (MOOR_ALLOC_SLAB - 1)) == 0 && MOOR_ALLOC_SLAB >= 8 * MOOR_ALLOC_SMALL_MAX,
               "MOOR_ALLOC_SLAB must be a power of two holding at least 8 of the largest blocks");

typedef struct slab slab;
struct slab {
  slab *next, *prev; /* in its class's list of slabs with room, or an empty list */
  void *free;        /* its free blocks, linked through their first word */
  char *cur;         /* the start of its uncut bytes */
  unsigned live;     /* blocks handed out */
  int listed;        /* in its class's list (it has room) */
};

typedef struct chunk chunk;
struct chunk {
  chunk *next;
  void *mem; /* MOOR_ALLOC_MAP_SLABS slabs, from posix_memalign */
};

struct moor__pool {
  slab *room[CLASSES + 1]; /* room[c]: slabs of class c with a free or uncut block */
  slab *warm;              /* empty slabs whose pages are in memory: taken first */
  slab *cold;              /* empty slabs whose pages went back (MADV_DONTNEED) or were never touched */
  unsigned nwarm;          /* warm empty slabs */
  unsigned nused;          /* slabs serving a class */
  chunk *chunks;
  size_t page;             /* the system's page size; 0: pages never go back (a page as large as a slab,
                              or madvise refused) */
};

#define HEAD ((sizeof(slab) + GRAIN - 1) / GRAIN * GRAIN)
#define SLAB_OF(b) ((slab *)((uintptr_t)(b) & ~(uintptr_t)(MOOR_ALLOC_SLAB - 1)))
#define END(s) ((char *)(s) + MOOR_ALLOC_SLAB)

static void list_push(slab **head, slab *s) {
  s->prev = NULL;
  s->next = *head;
  if (*head) (*head)->prev = s;
  *head = s;
}

static void list_remove(slab **head, slab *s) {
  if (s->prev) s->prev->next = s->next;
  else *head = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
}

/* MOOR_ALLOC_MAP_SLABS slabs at once from malloc's heap (aligned to a slab:
 * posix_memalign of one slab each left the heap around them in pieces, 10%
 * more memory a parked run; from the heap, memory an earlier engine of the
 * process gave back is taken again without page faults), all cold. */
static int add_chunk(moor__pool *p) {
  chunk *ch = malloc(sizeof *ch);
  void *mem = NULL;
  if (!ch || posix_memalign(&mem, MOOR_ALLOC_SLAB, (size_t)MOOR_ALLOC_MAP_SLABS * MOOR_ALLOC_SLAB) != 0) {
    free(ch);
    return -1;
  }
  ch->mem = mem;
  ch->next = p->chunks;
  p->chunks = ch;
  POISON(mem, (size_t)MOOR_ALLOC_MAP_SLABS * MOOR_ALLOC_SLAB);
  for (int i = MOOR_ALLOC_MAP_SLABS - 1; i >= 0; i--) {
    slab *s = (slab *)((char *)mem + (size_t)i * MOOR_ALLOC_SLAB);
    UNPOISON(s, HEAD);
    list_push(&p->cold, s);
  }
  return 0;
}

/* A slab for class c: a warm empty one, else a cold one, else a new chunk's. */
static slab *new_slab(moor__pool *p, unsigned c) {
  slab *s = p->warm;
  if (s) {
    list_remove(&p->warm, s);
    p->nwarm--;
  } else {
    if (!p->cold && add_chunk(p)) return NULL;
    s = p->cold;
    list_remove(&p->cold, s);
  }
  p->nused++;
  s->free = NULL;
  s->cur = (char *)s + HEAD;
  s->live = 0;
  s->listed = 1;
  list_push(&p->room[c], s);
  return s;
}

static void *take(moor__pool *p, unsigned c) {
  slab *s = p->room[c];
  if (!s && !(s = new_slab(p, c))) return NULL;
  size_t bytes = (size_t)c * GRAIN;
  void *b = s->free;
  if (b) {
    UNPOISON(b, bytes);
    s->free = *(void **)b;
  } else {
    b = s->cur;
    s->cur += bytes;
    UNPOISON(b, bytes);
  }
  s->live++;
  if (!s->free && (size_t)(END(s) - s->cur) < bytes) { /* full: out of the list until a block comes back */
    list_remove(&p->room[c], s);
    s->listed = 0;
  }
  return b;
}

static void give(moor__pool *p, void *b, unsigned c) {
  slab *s = SLAB_OF(b);
  *(void **)b = s->free;
  s->free = b;
  POISON(b, (size_t)c * GRAIN);
  if (!s->listed) {
    list_push(&p->room[c], s);
    s->listed = 1;
  }
  if (--s->live == 0 && (s->next || s->prev)) { /* empty, and not its class's only slab with room */
    list_remove(&p->room[c], s);
    s->listed = 0;
    p->nused--;
    list_push(&p->warm, s);
    p->nwarm++;
    /* Twice as many empty as in use (past the few always kept): pages go
     * back to the system past the header's, the slabs stay, cold (one to
     * three a slab emptied) */
    while (p->page && p->nwarm > MOOR_ALLOC_KEEP_SLABS && p->nwarm > 2 * p->nused) {
      slab *w = p->warm;
      if (madvise((char *)w + p->page, MOOR_ALLOC_SLAB - p->page, MADV_DONTNEED) != 0) {
        p->page = 0; /* (refused: they stay, warm) */
        break;
      }
      list_remove(&p->warm, w);
      p->nwarm--;
      POISON((char *)w + HEAD, MOOR_ALLOC_SLAB - HEAD);
      list_push(&p->cold, w);
    }
  }
}

/* lua_Alloc. ptr NULL: osize is the kind of object, not a size. */
void *moor__pool_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  moor__pool *p = ud;
  unsigned oc = ptr && osize <= MOOR_ALLOC_SMALL_MAX ? (unsigned)((osize + GRAIN - 1) / GRAIN) : 0;
  if (nsize == 0) {
    if (oc) give(p, ptr, oc);
    else free(ptr);
    return NULL;
  }
  unsigned nc = nsize <= MOOR_ALLOC_SMALL_MAX ? (unsigned)((nsize + GRAIN - 1) / GRAIN) : 0;
  if (!ptr) return nc ? take(p, nc) : malloc(nsize);
  if (oc == nc) return oc ? ptr : realloc(ptr, nsize); /* (same class: the block already fits) */
  void *b = nc ? take(p, nc) : malloc(nsize);
  if (!b) return NULL; /* (Lua keeps the old block) */
  memcpy(b, ptr, osize < nsize ? osize : nsize);
  if (oc) give(p, ptr, oc);
  else free(ptr);
  return b;
}

moor__pool *moor__pool_open(void) {
  const char *e = getenv("MOOR_LUA_ALLOC");
#ifdef MOOR__ASAN
  if (!e || strcmp(e, "pool") != 0) return NULL;
#else
  if (e && strcmp(e, "malloc") == 0) return NULL;
#endif
  moor__pool *p = calloc(1, sizeof(moor__pool));
  long page = sysconf(_SC_PAGESIZE);
  if (p && page > 0 && (size_t)page < MOOR_ALLOC_SLAB && MOOR_ALLOC_SLAB % (size_t)page == 0) p->page = (size_t)page;
  return p;
}

/* (after lua_close: blocks still handed out go with their chunks) */
void moor__pool_close(moor__pool *p) {
  if (!p) return;
  for (chunk *ch = p->chunks, *next; ch; ch = next) {
    next = ch->next;
    UNPOISON(ch->mem, (size_t)MOOR_ALLOC_MAP_SLABS * MOOR_ALLOC_SLAB);
    free(ch->mem);
    free(ch);
  }
  free(p);
}

/* (slabs serving a class or warm: the cold ones' pages went back) */
size_t moor__pool_bytes(const moor__pool *p) { return p ? (size_t)(p->nused + p->nwarm) * MOOR_ALLOC_SLAB : 0; }

/* --- a state on the pool, as luaL_newstate makes one ---------------------- */

/* An error outside any protected call ends the process. */
static int panic(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "PANIC: unprotected error in call to Lua API (%s)\n", msg ? msg : "error object is not a string");
  return 0;
}

/* warn(): off until "@on", as lauxlib's ("@on" and "@off" switch it). */
static void warn_on(void *ud, const char *msg, int tocont);

static int warn_control(lua_State *L, const char *msg, int tocont, lua_WarnFunction on, lua_WarnFunction off) {
  if (tocont || msg[0] != '@') return 0;
  if (strcmp(msg + 1, "off") == 0) lua_setwarnf(L, off, L);
  else if (strcmp(msg + 1, "on") == 0) lua_setwarnf(L, on, L);
  return 1;
}

static void warn_off(void *ud, const char *msg, int tocont) { warn_control(ud, msg, tocont, warn_on, warn_off); }

static void warn_cont(void *ud, const char *msg, int tocont) {
  fputs(msg, stderr);
  if (tocont) {
    lua_setwarnf(ud, warn_cont, ud);
  } else {
    fputs("\n", stderr);
    lua_setwarnf(ud, warn_on, ud);
  }
}

static void warn_on(void *ud, const char *msg, int tocont) {
  if (warn_control(ud, msg, tocont, warn_on, warn_off)) return;
  fputs("Lua warning: ", stderr);
  warn_cont(ud, msg, tocont);
}

lua_State *moor__pool_newstate(moor__pool *p) {
  lua_State *L = lua_newstate(moor__pool_alloc, p);
  if (L) {
    lua_atpanic(L, panic);
    lua_setwarnf(L, warn_off, L);
  }
  return L;
}
