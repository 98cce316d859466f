/* alloc.c: the allocator of the engine's Lua state (moor_open's; a Lua state
 * a host program owns keeps its own). Lua gives the old size with every free
 * and realloc, so a small block needs no header: each size class (16-byte
 * steps up to MOOR_ALLOC_SMALL_MAX) has a free list of blocks cut from slabs
 * of MOOR_ALLOC_SLAB bytes, and a free or a realloc within a class is a few
 * instructions. Larger blocks go to malloc. A step's tables, closures,
 * strings and coroutine frames are nearly all small: glibc's malloc and free
 * were an eighth of a step's instructions.
 *
 * What a class frees it keeps for its own next blocks; slabs go back only
 * when the state closes (moor__pool_close). Freed blocks are poisoned under
 * AddressSanitizer, so a use after free of a pooled block is still caught
 * until the block is handed out again. $MOOR_LUA_ALLOC=malloc turns the pool
 * off (every block from malloc, as a stock Lua state). */
#include "host.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define GRAIN 16 /* every class a multiple of it: Lua's largest alignment (long double) */
#define CLASSES (MOOR_ALLOC_SMALL_MAX / GRAIN)

struct moor__slab {
  struct moor__slab *next;
  size_t size;
  /* (then the blocks, from the first GRAIN-aligned byte) */
};

struct moor__pool {
  void *free[CLASSES + 1];  /* free[c]: the free blocks of c * GRAIN bytes, linked through their first word */
  char *cur, *end;          /* the uncut rest of the newest slab */
  struct moor__slab *slabs; /* every slab, newest first */
  size_t slab_bytes;        /* (for moor__pool_stats) */
};

#define SLAB_HEAD ((sizeof(struct moor__slab) + GRAIN - 1) / GRAIN * GRAIN)

static void give(moor__pool *p, void *b, size_t c) {
  *(void **)b = p->free[c];
  p->free[c] = b;
  POISON(b, c * GRAIN);
}

static void *cut(moor__pool *p, size_t bytes) {
  if ((size_t)(p->end - p->cur) < bytes) {
    /* What is left of this slab goes to the free lists, largest class first. */
    while (p->end - p->cur >= GRAIN) {
      size_t rest = (size_t)(p->end - p->cur), c = rest / GRAIN > CLASSES ? CLASSES : rest / GRAIN;
      void *b = p->cur;
      p->cur += c * GRAIN;
      UNPOISON(b, c * GRAIN);
      give(p, b, c);
    }
    struct moor__slab *s = malloc(MOOR_ALLOC_SLAB);
    if (!s) return NULL;
    s->next = p->slabs;
    s->size = MOOR_ALLOC_SLAB;
    p->slabs = s;
    p->slab_bytes += MOOR_ALLOC_SLAB;
    p->cur = (char *)s + SLAB_HEAD;
    p->end = (char *)s + MOOR_ALLOC_SLAB;
    POISON(p->cur, (size_t)(p->end - p->cur));
  }
  void *b = p->cur;
  p->cur += bytes;
  UNPOISON(b, bytes);
  return b;
}

static void *take(moor__pool *p, size_t c) {
  void *b = p->free[c];
  if (b) {
    UNPOISON(b, c * GRAIN);
    p->free[c] = *(void **)b;
    return b;
  }
  return cut(p, c * GRAIN);
}

/* lua_Alloc. ptr NULL: osize is the kind of object, not a size. */
void *moor__pool_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  moor__pool *p = ud;
  size_t oc = ptr && osize <= MOOR_ALLOC_SMALL_MAX ? (osize + GRAIN - 1) / GRAIN : 0;
  if (nsize == 0) {
    if (oc) give(p, ptr, oc);
    else free(ptr);
    return NULL;
  }
  size_t nc = nsize <= MOOR_ALLOC_SMALL_MAX ? (nsize + GRAIN - 1) / GRAIN : 0;
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
  if (e && strcmp(e, "malloc") == 0) return NULL;
  return calloc(1, sizeof(moor__pool));
}

void moor__pool_close(moor__pool *p) {
  if (!p) return;
  for (struct moor__slab *s = p->slabs, *next; s; s = next) {
    next = s->next;
    UNPOISON(s, s->size);
    free(s);
  }
  free(p);
}

size_t moor__pool_bytes(const moor__pool *p) { return p ? p->slab_bytes : 0; }
