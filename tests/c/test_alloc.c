/* host/alloc.c, the engine's Lua allocator: blocks keep their bytes across
 * every move between classes and to and from malloc; a freed block is the
 * next of its class (and poisoned under AddressSanitizer); slabs a class
 * emptied serve another class or go back to malloc; a Lua state on the pool
 * runs, collects and reuses what it freed, so a second round of the same
 * garbage takes no new slab; $MOOR_LUA_ALLOC=malloc turns it off (and it is
 * off under AddressSanitizer unless =pool, which this test sets). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "host.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(ASAN)
#define ASAN 1
#endif
#ifdef ASAN
#include <sanitizer/asan_interface.h>
#endif

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 7);
}

static void check(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed + i * 7)) fail_msg("byte %zu of %zu changed", i, n);
}

/* Every size from 1 to past the small limit, grown and shrunk through
 * every kind of move: same class, another class, to malloc and back. */
static void test_moves_keep_bytes(void **state) {
  (void)state;
  moor__pool *p = moor__pool_open();
  assert_non_null(p);
  static const size_t sizes[] = {1, 15, 16, 17, 40, 56, 64, 100, 255, 256, 257, 511, 512, 513, 1000, 4096, 70000};
  size_t n = sizeof sizes / sizeof sizes[0];
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < n; j++) {
      unsigned char *b = moor__pool_alloc(p, NULL, LUA_TTABLE, sizes[i]);
      assert_non_null(b);
      assert_int_equal((uintptr_t)b % 16, 0);
      fill(b, sizes[i], (unsigned)(i * 31 + j));
      unsigned char *c = moor__pool_alloc(p, b, sizes[i], sizes[j]);
      assert_non_null(c);
      check(c, sizes[i] < sizes[j] ? sizes[i] : sizes[j], (unsigned)(i * 31 + j));
      memset(c, 0xAB, sizes[j]); /* (all of it is writable: ASan would report) */
      assert_null(moor__pool_alloc(p, c, sizes[j], 0));
    }
  }
  moor__pool_close(p);
}

static void test_free_block_is_reused(void **state) {
  (void)state;
  moor__pool *p = moor__pool_open();
  void *a = moor__pool_alloc(p, NULL, 0, 48);
  void *b = moor__pool_alloc(p, NULL, 0, 48);
  assert_ptr_not_equal(a, b);
  moor__pool_alloc(p, a, 48, 0);
#ifdef ASAN
  assert_true(__asan_address_is_poisoned(a));
  assert_false(__asan_address_is_poisoned(b));
#endif
  assert_ptr_equal(moor__pool_alloc(p, NULL, 0, 33), a); /* (33..48 bytes: one class) */
  /* a realloc within a class keeps the block */
  assert_ptr_equal(moor__pool_alloc(p, a, 33, 47), a);
  size_t held = moor__pool_bytes(p);
  assert_int_equal(held, MOOR_ALLOC_SLAB); /* (one slab in use) */
  moor__pool_alloc(p, a, 47, 0);
  moor__pool_alloc(p, b, 48, 0);
  moor__pool_close(p);
}

/* Slabs run out: many blocks of many classes, all distinct and intact. */
static void test_many_blocks(void **state) {
  (void)state;
  moor__pool *p = moor__pool_open();
  enum { N = 20000 };
  unsigned char **v = calloc(N, sizeof *v);
  assert_non_null(v);
  for (unsigned i = 0; i < N; i++) {
    size_t sz = 1 + (i * 37u) % 600;
    v[i] = moor__pool_alloc(p, NULL, 0, sz);
    assert_non_null(v[i]);
    fill(v[i], sz, i);
  }
  assert_true(moor__pool_bytes(p) > (size_t)MOOR_ALLOC_MAP_SLABS * MOOR_ALLOC_SLAB);
  for (unsigned i = 0; i < N; i++) check(v[i], 1 + (i * 37u) % 600, i);
  for (unsigned i = 0; i < N; i += 2) moor__pool_alloc(p, v[i], 1 + (i * 37u) % 600, 0);
  size_t held = moor__pool_bytes(p);
  for (unsigned i = 0; i < N; i += 2) { /* (the freed half comes back from the free lists) */
    v[i] = moor__pool_alloc(p, NULL, 0, 1 + (i * 37u) % 600);
    fill(v[i], 1 + (i * 37u) % 600, i + 1);
  }
  assert_int_equal(moor__pool_bytes(p), held);
  for (unsigned i = 0; i < N; i++) check(v[i], 1 + (i * 37u) % 600, i % 2 ? i : i + 1);
  for (unsigned i = 0; i < N; i++) moor__pool_alloc(p, v[i], 1 + (i * 37u) % 600, 0);
  free(v);
  moor__pool_close(p);
}

/* Many slabs of one class, all freed: what is beyond the kept slabs goes
 * back to malloc, and another class takes the kept ones before any new. */
static void test_slabs_move_between_classes(void **state) {
  (void)state;
  moor__pool *p = moor__pool_open();
  enum { N = 200000 }; /* 48-byte blocks: about 150 slabs */
  void **v = calloc(N, sizeof *v);
  assert_non_null(v);
  for (unsigned i = 0; i < N; i++) assert_non_null(v[i] = moor__pool_alloc(p, NULL, 0, 48));
  size_t peak = moor__pool_bytes(p);
  assert_true(peak >= (size_t)(MOOR_ALLOC_KEEP_SLABS + 8) * MOOR_ALLOC_SLAB);
  for (unsigned i = 0; i < N; i++) moor__pool_alloc(p, v[i], 48, 0);
  size_t after = moor__pool_bytes(p);
  assert_true(after <= (size_t)(MOOR_ALLOC_KEEP_SLABS + 1) * MOOR_ALLOC_SLAB);
  /* 300-byte blocks filling the kept slabs take no new one */
  unsigned per = (MOOR_ALLOC_SLAB - 128) / 304, n = per * MOOR_ALLOC_KEEP_SLABS;
  for (unsigned i = 0; i < n; i++) {
    assert_non_null(v[i] = moor__pool_alloc(p, NULL, 0, 300));
    fill(v[i], 300, i);
  }
  assert_int_equal(moor__pool_bytes(p), after);
  for (unsigned i = 0; i < n; i++) check(v[i], 300, i);
  for (unsigned i = 0; i < n; i++) moor__pool_alloc(p, v[i], 300, 0);
  free(v);
  moor__pool_close(p);
}

/* Blocks still handed out when the pool closes go with their slabs (ASan's
 * leak check would report a slab left behind). */
static void test_close_with_blocks_out(void **state) {
  (void)state;
  moor__pool *p = moor__pool_open();
  for (int i = 0; i < 5000; i++) assert_non_null(moor__pool_alloc(p, NULL, 0, 16 + (size_t)(i % 30) * 16));
  moor__pool_close(p);
}

static const char garbage[] =
    "local t = {}\n"
    "for i = 1, 20000 do\n"
    "  t[i % 500 + 1] = { i, tostring(i) .. 'x', function() return i end, coroutine.create(print) }\n"
    "end\n"
    "local s = {}\n"
    "for i = 1, 3000 do s[#s + 1] = string.rep('y', i % 700) end\n"
    "return #table.concat(s)\n";

static void round_of_garbage(lua_State *L) {
  assert_int_equal(luaL_dostring(L, garbage), LUA_OK);
  lua_pop(L, 1);
  lua_gc(L, LUA_GCCOLLECT);
  lua_gc(L, LUA_GCCOLLECT);
}

static void test_lua_state_on_the_pool(void **state) {
  (void)state;
  moor__pool *p = moor__pool_open();
  lua_State *L = lua_newstate(moor__pool_alloc, p);
  assert_non_null(L);
  luaL_openlibs(L);
  round_of_garbage(L);
  size_t held = moor__pool_bytes(p), most = 0;
  assert_true(held > 0);
  for (int i = 0; i < 10; i++) { /* what was freed is taken again: ten more rounds grow nothing */
    round_of_garbage(L);
    if (moor__pool_bytes(p) > most) most = moor__pool_bytes(p);
  }
  assert_true(most <= held + (size_t)MOOR_ALLOC_MAP_SLABS * MOOR_ALLOC_SLAB); /* (one more mapping at most) */
  lua_close(L);
  moor__pool_close(p);
}

/* moor__pool_newstate's state warns as luaL_newstate's: nothing until "@on". */
static void test_newstate_warns_as_lauxlib(void **state) {
  (void)state;
  char path[] = "/tmp/moor-test-alloc-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  moor__pool *p = moor__pool_open();
  lua_State *L = moor__pool_newstate(p);
  assert_non_null(L);
  luaL_openlibs(L);
  int rc = luaL_dostring(L, "warn('hidden'); warn('@on'); warn('shown ', 'in parts'); warn('@off'); warn('gone')");
  lua_close(L);
  moor__pool_close(p);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  assert_int_equal(rc, LUA_OK);
  char out[256] = {0};
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(out, 1, sizeof out - 1, f);
  fclose(f);
  close(fd);
  unlink(path);
  out[n] = 0;
  assert_string_equal(out, "Lua warning: shown in parts\n");
}

static void test_off_by_environment(void **state) {
  (void)state;
  setenv("MOOR_LUA_ALLOC", "malloc", 1);
  assert_null(moor__pool_open());
  moor__pool_close(NULL);
  assert_int_equal(moor__pool_bytes(NULL), 0);
  setenv("MOOR_LUA_ALLOC", "pool", 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_moves_keep_bytes),     cmocka_unit_test(test_free_block_is_reused),
      cmocka_unit_test(test_many_blocks),          cmocka_unit_test(test_lua_state_on_the_pool),
      cmocka_unit_test(test_slabs_move_between_classes), cmocka_unit_test(test_close_with_blocks_out),
      cmocka_unit_test(test_newstate_warns_as_lauxlib), cmocka_unit_test(test_off_by_environment),
  };
  setenv("MOOR_LUA_ALLOC", "pool", 1); /* (the pool is off under ASan unless asked for) */
  return cmocka_run_group_tests(tests, NULL, NULL);
}
