/* Unit tests for moor's error vocabulary at the C boundary: every MOOR_E*
 * code has its own message in moor_strerror (none falls through to "unknown
 * error", no two share one), and the engine's error codes map to the MOOR_E*
 * the C API has always answered for them (host/error.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "host.h" /* moor__error_code */
#include "moor.h"

/* Written out by hand, so a code added to moor.h without a message (or
 * missing from the map) fails here. */
static const int codes[] = {MOOR_OK,      MOOR_EINVAL, MOOR_ENOMEM,    MOOR_EIO,  MOOR_ELOCKED, MOOR_ELOAD,
                            MOOR_EJSON, MOOR_ENOTFOUND, MOOR_ELUA, MOOR_ETOOL, MOOR_ECONFLICT,
                            MOOR_EBUSY};
#define NCODES (sizeof codes / sizeof codes[0])

static void test_every_code_has_a_message(void **state) {
  (void)state;
  const char *unknown = moor_strerror(12345);
  assert_non_null(unknown);
  for (size_t i = 0; i < NCODES; i++) {
    const char *s = moor_strerror(codes[i]);
    assert_non_null(s);
    if (!strcmp(s, unknown) || strstr(s, "unknown")) fail_msg("moor_strerror(%d) is \"%s\"", codes[i], s);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(s, moor_strerror(codes[j])))
        fail_msg("moor_strerror(%d) and moor_strerror(%d) are both \"%s\"", codes[i], codes[j], s);
  }
}

/* The map in moor.h: every entry is a code of its own with a message of its own. */
static void test_errno_map(void **state) {
  (void)state;
  size_t n = 0;
#define XX(name, value, message)                                 \
  assert_int_equal(MOOR_##name, value);                          \
  assert_string_equal(moor_strerror(MOOR_##name), message);      \
  n++;
  MOOR_ERRNO_MAP(XX)
#undef XX
  assert_int_equal(n, NCODES - 1); /* all but MOOR_OK */
}

/* Engine codes (today's, as lua/moor/ writes them) and the C API's answer. */
static void test_engine_codes(void **state) {
  (void)state;
  static const struct {
    const char *code;
    int rc;
  } cases[] = {
    {"unknown", MOOR_ENOTFOUND}, {"not_found", MOOR_ENOTFOUND}, {"json", MOOR_EJSON},
    {"input", MOOR_EINVAL}, {"bad_request", MOOR_EINVAL}, {"invalid_option", MOOR_EINVAL},
    {"freeform_not_allowed", MOOR_EINVAL}, {"approval_unbound", MOOR_EINVAL},
    {"too_many_deliveries", MOOR_EINVAL}, {"already_resolved", MOOR_ECONFLICT},
    {"already_settled", MOOR_ECONFLICT}, {"approval_mismatch", MOOR_ECONFLICT},
    {"storage_unavailable", MOOR_EIO},
    {"store", MOOR_EIO}, /* moor_call on a full disk: an I/O error, not a usage error */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (moor__error_code(cases[i].code, 12345) != cases[i].rc)
      fail_msg("engine code '%s' gives %d, not %d", cases[i].code, moor__error_code(cases[i].code, 12345),
               cases[i].rc);
  /* No code, or one the table does not know: the caller's default. */
  assert_int_equal(moor__error_code(NULL, MOOR_ELOAD), MOOR_ELOAD);
  assert_int_equal(moor__error_code("no_such_code", MOOR_EIO), MOOR_EIO);
}

static void test_unknown_codes(void **state) {
  (void)state;
  assert_string_equal(moor_strerror(1), moor_strerror(-1000));
  assert_non_null(strstr(moor_strerror(1), "unknown"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_code_has_a_message),
      cmocka_unit_test(test_errno_map),
      cmocka_unit_test(test_engine_codes),
      cmocka_unit_test(test_unknown_codes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
