/* host/alloc.c, the engine's Lua allocator: blocks keep their bytes across
 * every move between classes and to and from malloc; a freed block is the
 * next of its class (and poisoned under AddressSanitizer); a Lua state on
 * the pool runs, collects and reuses what it freed, so a second round of
 * the same garbage takes no new slab; $MOOR_LUA_ALLOC=malloc turns it off. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "host.h"

#if defined(__SANITIZE_ADDRESS__)
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
#if defined(__SANITIZE_ADDRESS__)
  assert_true(__asan_address_is_poisoned(a));
  assert_false(__asan_address_is_poisoned(b));
#endif
  assert_ptr_equal(moor__pool_alloc(p, NULL, 0, 33), a); /* (33..48 bytes: one class) */
  /* a realloc within a class keeps the block */
  assert_ptr_equal(moor__pool_alloc(p, a, 33, 47), a);
  size_t held = moor__pool_bytes(p);
  assert_int_equal(held, MOOR_ALLOC_SLAB);
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
  assert_true(moor__pool_bytes(p) > MOOR_ALLOC_SLAB);
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
  size_t held = moor__pool_bytes(p);
  assert_true(held > 0);
  for (int i = 0; i < 3; i++) round_of_garbage(L);
  assert_int_equal(moor__pool_bytes(p), held); /* what was freed is taken again */
  lua_close(L);
  moor__pool_close(p);
}

static void test_off_by_environment(void **state) {
  (void)state;
  setenv("MOOR_LUA_ALLOC", "malloc", 1);
  assert_null(moor__pool_open());
  moor__pool_close(NULL);
  assert_int_equal(moor__pool_bytes(NULL), 0);
  unsetenv("MOOR_LUA_ALLOC");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_moves_keep_bytes),     cmocka_unit_test(test_free_block_is_reused),
      cmocka_unit_test(test_many_blocks),          cmocka_unit_test(test_lua_state_on_the_pool),
      cmocka_unit_test(test_off_by_environment),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
