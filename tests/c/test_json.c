/* Unit tests for the lossless JSON codec (host/json.c). Each test gets a fresh
 * lua_State with the standard libraries, the module as require "moor.json"
 * and a global `json`, plus a Lua helper `same(a, b)`: deep equality that
 * also compares math.type and the sign of zero. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <lauxlib.h>
#include <locale.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static const char helpers[] =
    "json = require 'moor.json'\n"
    "function same(a, b)\n"
    "  if type(a) ~= type(b) then return false end\n"
    "  if type(a) == 'number' then\n"
    "    if math.type(a) ~= math.type(b) then return false end\n"
    "    if a == 0 and math.type(a) == 'float' then return 1/a == 1/b end\n"
    "    return a == b\n"
    "  end\n"
    "  if type(a) ~= 'table' then return a == b end\n"
    "  for k, v in pairs(a) do if not same(v, b[k]) then return false end end\n"
    "  for k in pairs(b) do if a[k] == nil then return false end end\n"
    "  return true\n"
    "end\n";

static int setup(void **state) {
  lua_State *L = luaL_newstate();
  assert_non_null(L);
  luaL_openlibs(L);
  luaL_requiref(L, "moor.json", luaopen_moor_json, 0);
  lua_pop(L, 1);
  if (luaL_dostring(L, helpers)) fail_msg("helpers: %s", lua_tostring(L, -1));
  *state = L;
  return 0;
}

static int teardown(void **state) {
  lua_close(*state);
  return 0;
}

/* Run a Lua chunk; fail the test with its error message. */
static void run(lua_State *L, const char *code) {
  if (luaL_dostring(L, code)) fail_msg("%s", lua_tostring(L, -1));
  lua_settop(L, 0);
}

/* Push the value of a Lua expression. */
static void eval(lua_State *L, const char *expr) {
  char code[4096];
  snprintf(code, sizeof code, "return %s", expr);
  if (luaL_loadstring(L, code) || lua_pcall(L, 0, 1, 0)) fail_msg("eval %s: %s", expr, lua_tostring(L, -1));
}

static char text[1 << 16]; /* last result or message, copied off the stack */
static size_t text_len;

/* Encode the top value; pops it and leaves the result or message in `text`. */
static int encode_top(lua_State *L, size_t max, const char *root, const char **kind) {
  int top = lua_gettop(L);
  int rc = moor_json_encode(L, -1, max, root, kind);
  assert_int_equal(lua_gettop(L), top + 1); /* exactly one value pushed */
  const char *s = lua_tolstring(L, -1, &text_len);
  assert_non_null(s);
  assert_true(text_len < sizeof text);
  memcpy(text, s, text_len + 1);
  lua_pop(L, 2);
  return rc;
}

static void enc_ok(lua_State *L, const char *expr, const char *want) {
  const char *kind = "unset";
  eval(L, expr);
  int rc = encode_top(L, 0, NULL, &kind);
  if (rc != 0) fail_msg("encode %s failed: %s", expr, text);
  assert_null(kind);
  assert_string_equal(text, want);
}

static void enc_err(lua_State *L, const char *expr, size_t max, const char *root, const char *kind,
                    const char *msg) {
  const char *k = NULL;
  eval(L, expr);
  int rc = encode_top(L, max, root, &k);
  if (rc == 0) fail_msg("encode %s succeeded: %s", expr, text);
  assert_int_equal(rc, MOOR_EJSON);
  assert_non_null(k);
  assert_string_equal(k, kind);
  assert_string_equal(text, msg);
}

/* Decode s; on success leaves the value on the stack. */
static int decode(lua_State *L, const char *s, size_t len) {
  int top = lua_gettop(L);
  int rc = moor_json_decode(L, s, len);
  assert_int_equal(lua_gettop(L), top + 1);
  return rc;
}

static void dec_err(lua_State *L, const char *s, const char *msg) {
  int rc = decode(L, s, strlen(s));
  if (rc == 0) fail_msg("decode '%s' succeeded", s);
  assert_int_equal(rc, MOOR_EJSON);
  assert_string_equal(lua_tostring(L, -1), msg);
  lua_pop(L, 1);
}

/* expr encodes to want, want decodes to a value same() as expr, and that
 * value encodes to want again. */
static void roundtrip(lua_State *L, const char *expr, const char *want) {
  enc_ok(L, expr, want);
  assert_int_equal(decode(L, want, strlen(want)), 0);
  lua_setglobal(L, "decoded");
  char code[4096];
  snprintf(code, sizeof code, "return same(%s, decoded)", expr);
  if (luaL_dostring(L, code)) fail_msg("%s", lua_tostring(L, -1));
  if (!lua_toboolean(L, -1)) fail_msg("%s does not round-trip through %s", expr, want);
  lua_pop(L, 1);
  enc_ok(L, "decoded", want);
}

/* Decode s and check the result with a Lua predicate over `v`. */
static void dec_check(lua_State *L, const char *s, size_t len, const char *pred) {
  if (decode(L, s, len)) fail_msg("decode '%s': %s", s, lua_tostring(L, -1));
  lua_setglobal(L, "v");
  char code[4096];
  snprintf(code, sizeof code, "return %s", pred);
  if (luaL_dostring(L, code)) fail_msg("%s", lua_tostring(L, -1));
  if (!lua_toboolean(L, -1)) fail_msg("decode '%s': not %s", s, pred);
  lua_pop(L, 1);
}

/* ------------------------------------------------------------ numbers */

static void test_integers(void **state) {
  lua_State *L = *state;
  roundtrip(L, "0", "0");
  roundtrip(L, "5", "5");
  roundtrip(L, "-1", "-1");
  roundtrip(L, "9007199254740993", "9007199254740993");
  roundtrip(L, "123456789012345", "123456789012345");
  roundtrip(L, "math.maxinteger", "9223372036854775807");
  roundtrip(L, "math.mininteger", "-9223372036854775808");
  dec_check(L, "5", 1, "math.type(v) == 'integer' and v == 5");
  dec_check(L, "-0", 2, "math.type(v) == 'integer' and v == 0");
  dec_check(L, "-9223372036854775808", 20, "v == math.mininteger");
  dec_check(L, "9007199254740993", 16, "math.type(v) == 'integer' and v == 9007199254740993");
}

static void test_floats(void **state) {
  lua_State *L = *state;
  roundtrip(L, "0.1 + 0.2", "0.30000000000000004");
  roundtrip(L, "1e300", "1e+300");
  roundtrip(L, "5e-324", "4.94065645841247e-324");
  roundtrip(L, "-0.0", "-0.0");
  roundtrip(L, "3.0", "3.0");
  roundtrip(L, "1.5", "1.5");
  roundtrip(L, "0.1", "0.1");
  roundtrip(L, "2^53", "9007199254740992.0");
  roundtrip(L, "2^63", "9.223372036854776e+18");
  roundtrip(L, "1e15", "1e+15");
  roundtrip(L, "123456.0", "123456.0");
  roundtrip(L, "1/3", "0.3333333333333333");
  roundtrip(L, "-1e-7", "-1e-07");
  roundtrip(L, "1.7976931348623157e308", "1.7976931348623157e+308");
  roundtrip(L, "{x = 100.0, y = -2.5}", "{\"x\":100.0,\"y\":-2.5}");
  dec_check(L, "1E2", 3, "math.type(v) == 'float' and v == 100");
  dec_check(L, "1.0", 3, "math.type(v) == 'float' and v == 1");
  dec_check(L, "-0.0", 4, "math.type(v) == 'float' and 1/v < 0");
  dec_check(L, "2.5e-3", 6, "v == 0.0025");
  dec_check(L, "1e-400", 6, "math.type(v) == 'float' and v == 0");
}

static void test_big_integer_tokens(void **state) {
  lua_State *L = *state;
  dec_check(L, "123456789012345678901234567890", 30,
            "math.type(v) == 'float' and v == 1.2345678901234568e29");
  dec_check(L, "9223372036854775808", 19, "math.type(v) == 'float' and v == 2^63");
  dec_check(L, "-9223372036854775809", 20, "math.type(v) == 'float' and v == -2^63");
  dec_check(L, "[9223372036854775807,-9223372036854775807]", 42,
            "v[1] == math.maxinteger and v[2] == -math.maxinteger and math.type(v[2]) == 'integer'");
  /* a 70-digit token goes through the heap path of the float parser */
  dec_check(L, "1234567890123456789012345678901234567890123456789012345678901234567890", 70,
            "math.type(v) == 'float' and v == 1.2345678901234568e69");
  dec_err(L, "1e400", "invalid JSON at byte 0: number out of range");
  dec_err(L, "[-1e999]", "invalid JSON at byte 1: number out of range");
}

/* A locale with a decimal comma must not change the text (only runs where
 * such a locale is installed). */
static void test_decimal_comma_locale(void **state) {
  lua_State *L = *state;
  if (!setlocale(LC_NUMERIC, "de_DE.UTF-8") && !setlocale(LC_NUMERIC, "de_DE.utf8") &&
      !setlocale(LC_NUMERIC, "fr_FR.UTF-8")) {
    skip();
  }
  assert_string_equal(localeconv()->decimal_point, ",");
  roundtrip(L, "0.1 + 0.2", "0.30000000000000004");
  roundtrip(L, "1.5", "1.5");
  roundtrip(L, "3.0", "3.0");
  roundtrip(L, "-2.5e-300", "-2.5e-300");
  dec_check(L, "[1.25,7e1]", 10, "v[1] == 5/4 and v[2] == 70");
  dec_check(L, "1.2345678901234567890123456789012345678901234567890", 51,
            "v == 1.2345678901234568");
  setlocale(LC_NUMERIC, "C");
}

/* The float text is exactly the spec's rule, done the slow obvious way: the
 * first of %.15g, %.16g, %.17g that strtod reads back as d, plus ".0" when it
 * looks like an integer. Checked on random bit patterns and on values next to
 * rounding ties, where a shortcut would most likely go wrong. */
static void spec_float_text(double d, char *out, size_t size) {
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(out, size, "%.*g", prec, d);
    if (prec == 17 || strtod(out, NULL) == d) break;
  }
  if (!strpbrk(out, ".eni")) strcat(out, ".0");
}

static void float_matches_spec(lua_State *L, double d) {
  char want[64];
  if (!isfinite(d)) return;
  spec_float_text(d, want, sizeof want);
  lua_pushnumber(L, d);
  assert_int_equal(encode_top(L, 0, NULL, NULL), 0);
  if (strcmp(text, want) != 0) fail_msg("%.17g encodes as %s, want %s", d, text, want);
}

static void test_float_text_matches_spec(void **state) {
  lua_State *L = *state;
  uint64_t x = 88172645463325252u;
  char buf[64];
  for (int i = 0; i < 40000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    double d;
    memcpy(&d, &x, sizeof d);
    float_matches_spec(L, d);
    /* 17 digits then ...5: the double nearest sits by a 17-digit tie */
    snprintf(buf, sizeof buf, "%llu5e%d", (unsigned long long)(1e16 + (double)(x % 9000000000000000u)),
             (int)(x % 61) - 30);
    d = strtod(buf, NULL);
    float_matches_spec(L, d);
    float_matches_spec(L, nextafter(d, 0));
    float_matches_spec(L, nextafter(d, INFINITY));
    /* ties at 15 and 16 digits */
    snprintf(buf, sizeof buf, "%llu5e%d", (unsigned long long)(x % 100000000000000u), (int)(x % 41) - 20);
    float_matches_spec(L, strtod(buf, NULL));
    snprintf(buf, sizeof buf, "%llu5e%d", (unsigned long long)(x % 1000000000000000u), (int)(x % 41) - 20);
    float_matches_spec(L, strtod(buf, NULL));
    float_matches_spec(L, (double)(x % 100000) / (double)(1 + x % 977));
  }
  for (int e = -325; e <= 308; e++) { /* powers of ten and their neighbours: exponent carries */
    double p = pow(10, e);
    float_matches_spec(L, p);
    float_matches_spec(L, nextafter(p, 0));
    float_matches_spec(L, nextafter(p, INFINITY));
    float_matches_spec(L, -9.999999999999999 * p);
  }
}

/* ------------------------------------------------------------ strings */

static void test_string_escapes(void **state) {
  lua_State *L = *state;
  roundtrip(L, "'plain'", "\"plain\"");
  roundtrip(L, "''", "\"\"");
  roundtrip(L, "'q\"b\\\\s/'", "\"q\\\"b\\\\s/\"");
  roundtrip(L, "'\\n\\t\\r\\b\\f'", "\"\\n\\t\\r\\b\\f\"");
  roundtrip(L, "'caf\\u{e9} \\u{1F600}'", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\""); /* UTF-8 unchanged */
  roundtrip(L, "'\\x7f'", "\"\\u007f\"");
  roundtrip(L, "'\\0a'", "\"\\u0000a\"");
  dec_check(L, "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", 18, "v == '\"\\\\/\\b\\f\\n\\r\\t'");
  dec_check(L, "\"a\\u0041\\u00e9\\u20AC\"", 21, "v == 'aA\\u{e9}\\u{20ac}'");
  dec_check(L, "\"\\u0000\"", 8, "v == '\\0' and #v == 1");
  /* escapes near the end, and a long string that grows the scratch buffer */
  run(L, "local s = string.rep('x\\n', 100000) .. '\\\"'\n"
         "local t = assert(json.encode(s))\n"
         "assert(#t == 300004 and json.decode(t) == s)\n"
         "assert(json.decode(json.encode(s .. 'tail')) == s .. 'tail')");
}

static void test_unicode_surrogates(void **state) {
  lua_State *L = *state;
  dec_check(L, "\"\\ud83d\\ude00\"", 14, "v == '\\u{1F600}'");
  dec_check(L, "\"x\\uD834\\uDD1Ey\"", 16, "v == 'x\\u{1D11E}y'");
  dec_check(L, "\"\\udbff\\udfff\"", 14, "v == '\\u{10FFFF}'");
  dec_check(L, "\"\\u07ff\\u0800\\uffff\"", 20, "v == '\\u{7FF}\\u{800}\\u{FFFF}'");
  dec_err(L, "\"\\ud800\"", "invalid JSON at byte 1: lone surrogate in \\u escape");
  dec_err(L, "\"\\udc00\"", "invalid JSON at byte 1: lone surrogate in \\u escape");
  dec_err(L, "\"ab\\ud800\\u0041\"", "invalid JSON at byte 3: lone surrogate in \\u escape");
  dec_err(L, "\"\\ud800x\"", "invalid JSON at byte 1: lone surrogate in \\u escape");
}

static void test_control_chars(void **state) {
  lua_State *L = *state;
  enc_ok(L, "'\\1\\2\\31 \\127'", "\"\\u0001\\u0002\\u001f \\u007f\"");
  run(L, "for c = 0, 127 do\n"
         "  local s = string.char(c)\n"
         "  local t = assert(json.encode(s))\n"
         "  assert(json.decode(t) == s, c)\n"
         "  if c < 32 or c == 127 then assert(not t:find('[%z\\1-\\31\\127]'), c) end\n"
         "end\n"
         "for c = 128, 255 do assert(json.encode(string.char(c)) == '\"\\u{fffd}\"') end"); /* not UTF-8 */
  dec_err(L, "\"a\nb\"", "invalid JSON at byte 2: control character in string (must be escaped)");
  dec_err(L, "\"a\\nb\tc\"", "invalid JSON at byte 5: control character in string (must be escaped)");
  dec_check(L, "\"\x7f\xc3\xbf\"", 5, "v == '\\127\\u{ff}'"); /* DEL and raw UTF-8 are fine unescaped */
}

/* ------------------------------------------------------------ tables */

static void test_nested(void **state) {
  lua_State *L = *state;
  roundtrip(L, "{a = {b = {c = {1, 2, {d = true}}}}, e = false, s = 'x'}",
            "{\"a\":{\"b\":{\"c\":[1,2,{\"d\":true}]}},\"e\":false,\"s\":\"x\"}");
  roundtrip(L, "{{}, {{}}, {1.5, 'a'}}", "[{},[{}],[1.5,\"a\"]]");
  dec_check(L, " { \"a\" : [ 1 , { \"b\" : null } ] , \"c\" : { } } ", 46,
            "v.a[1] == 1 and v.a[2].b == json.null and next(v.c) == nil and json.isarray(v.a)"
            " and not json.isarray(v) and getmetatable(v) == nil");
  /* a shared (not cyclic) subtable is fine */
  run(L, "local s = {1}\n"
         "assert(json.encode({a = s, b = s, c = {s, s}}) == '{\"a\":[1],\"b\":[1],\"c\":[[1],[1]]}')");
  /* duplicate keys: the last one wins */
  dec_check(L, "{\"a\":1,\"a\":2}", 13, "v.a == 2");
}

static void test_sorted_keys(void **state) {
  lua_State *L = *state;
  enc_ok(L, "{b = 1, a = 2}", "{\"a\":2,\"b\":1}");
  /* bytewise: uppercase before lowercase, shorter prefix first, UTF-8 last */
  enc_ok(L, "{['b'] = 1, ['B'] = 2, ['a'] = 3, ['ab'] = 4, [''] = 5, ['\\u{e9}'] = 6, ['a\\0'] = 7}",
         "{\"\":5,\"B\":2,\"a\":3,\"a\\u0000\":7,\"ab\":4,\"b\":1,\"\xc3\xa9\":6}");
  /* many keys (the qsort path) and long keys (not interned by Lua) */
  run(L, "local t, keys = {}, {}\n"
         "for i = 1, 200 do\n"
         "  local k = string.format('%03d', (i * 37) % 200) .. string.rep('k', i % 50)\n"
         "  t[k] = i; keys[#keys + 1] = k\n"
         "end\n"
         "table.sort(keys)\n"
         "local parts = {}\n"
         "for _, k in ipairs(keys) do parts[#parts + 1] = string.format('%q:%d', k, t[k]) end\n"
         "local want = '{' .. table.concat(parts, ',') .. '}'\n"
         "local got = assert(json.encode(t))\n"
         "assert(got == want, got)\n"
         "assert(same(json.decode(got), t))");
  /* same table built in another insertion order gives the same text */
  run(L, "local a, b = {}, {}\n"
         "for i = 1, 50 do a['k' .. i] = i end\n"
         "for i = 50, 1, -1 do b['k' .. i] = i end\n"
         "assert(json.encode(a) == json.encode(b))");
}

static void test_empty_tables(void **state) {
  lua_State *L = *state;
  enc_ok(L, "{}", "{}");
  enc_ok(L, "json.array()", "[]");
  enc_ok(L, "json.array({})", "[]");
  enc_ok(L, "{a = json.array(), b = {}}", "{\"a\":[],\"b\":{}}");
  enc_ok(L, "json.array({1, 2})", "[1,2]");
  dec_check(L, "[]", 2, "json.isarray(v) and next(v) == nil and json.encode(v) == '[]'");
  dec_check(L, "{}", 2, "not json.isarray(v) and next(v) == nil and json.encode(v) == '{}'");
  dec_check(L, "[[],{}]", 7, "json.encode(v) == '[[],{}]'");
}

static void test_null(void **state) {
  lua_State *L = *state;
  enc_ok(L, "json.null", "null");
  enc_ok(L, "nil", "null");
  enc_ok(L, "{json.null, 1, json.null}", "[null,1,null]");
  enc_ok(L, "{a = json.null}", "{\"a\":null}");
  dec_check(L, "null", 4, "v == json.null and type(v) == 'userdata'");
  dec_check(L, "[null,true,false]", 17, "#v == 3 and v[1] == json.null and v[2] == true and v[3] == false");
  roundtrip(L, "{a = json.null, b = {json.null}}", "{\"a\":null,\"b\":[null]}");
  lua_pushlightuserdata(L, NULL);
  assert_int_equal(encode_top(L, 0, NULL, NULL), 0);
  assert_string_equal(text, "null");
}

/* ------------------------------------------------------------ encode errors */

static void test_err_type(void **state) {
  lua_State *L = *state;
  enc_err(L, "{items = {1, 2, {cb = print}}}", 0, NULL, "type", "value.items[3].cb: a function is not JSON");
  enc_err(L, "print", 0, NULL, "type", "value: a function is not JSON");
  enc_err(L, "{io.stdout}", 0, "result", "type", "result[1]: a userdata is not JSON");
  enc_err(L, "{co = coroutine.create(print)}", 0, NULL, "type", "value.co: a thread is not JSON");
  enc_err(L, "{['odd key'] = {['end'] = {['x\"y\\\\z\\n1'] = print}}}", 0, NULL, "type",
          "value[\"odd key\"][\"end\"][\"x\\\"y\\\\z\\0101\"]: a function is not JSON");
  enc_err(L, "{_ok9 = {['9no'] = print}}", 0, NULL, "type", "value._ok9[\"9no\"]: a function is not JSON");
  static int anchor;
  lua_newtable(L);
  lua_pushlightuserdata(L, &anchor);
  lua_setfield(L, -2, "p");
  const char *kind = NULL;
  assert_int_equal(encode_top(L, 0, NULL, &kind), MOOR_EJSON);
  assert_string_equal(kind, "type");
  assert_string_equal(text, "value.p: a userdata is not JSON");
}

static void test_err_nan_inf(void **state) {
  lua_State *L = *state;
  enc_err(L, "{x = 0/0}", 0, NULL, "type", "value.x: NaN is not JSON");
  enc_err(L, "{1, math.huge}", 0, NULL, "type", "value[2]: inf is not JSON");
  enc_err(L, "-math.huge", 0, "result", "type", "result: -inf is not JSON");
}

static void test_err_cycle(void **state) {
  lua_State *L = *state;
  enc_err(L, "(function() local t = {a = {b = {}}}; t.a.b.c = t; return t end)()", 0, NULL, "cycle",
          "value.a.b.c: cycle (table refers to itself)");
  enc_err(L, "(function() local t = {}; t[1] = t; return t end)()", 0, NULL, "cycle",
          "value[1]: cycle (table refers to itself)");
}

static void test_err_keys(void **state) {
  lua_State *L = *state;
  enc_err(L, "{list = {1, 2, x = 3}}", 0, NULL, "key", "value.list: table mixes array and object keys");
  enc_err(L, "{x = 1, 2}", 0, NULL, "key", "value: table mixes array and object keys");
  enc_err(L, "{1, 2, nil, 4}", 0, NULL, "key", "value: sparse array (index 3 missing)");
  enc_err(L, "{[2] = 'b'}", 0, NULL, "key", "value: sparse array (index 1 missing)");
  enc_err(L, "{[0] = 'a', [1] = 'b'}", 0, NULL, "key", "value: table has integer key 0 (arrays start at 1)");
  enc_err(L, "{a = {[1.5] = true}}", 0, NULL, "key", "value.a: table has a float key (1.5)");
  enc_err(L, "{[true] = 1}", 0, NULL, "key", "value: table has a boolean key");
  enc_err(L, "{[{}] = 1}", 0, NULL, "key", "value: table has a table key");
  enc_err(L, "json.array({a = 1})", 0, NULL, "key", "value: table is marked as an array but has string keys");
}

static void test_err_depth(void **state) {
  lua_State *L = *state;
  /* 200 levels encode and decode; 201 do not */
  run(L, "local function nest(n) local t = {} for i = 2, n do t = {t} end return t end\n"
         "local s = assert(json.encode(nest(200)))\n"
         "assert(s == string.rep('[', 199) .. '{}' .. string.rep(']', 199))\n"
         "assert(json.decode(s))\n"
         "local ok, msg, kind = json.encode(nest(201))\n"
         "assert(ok == nil and kind == 'depth', msg)\n"
         "assert(msg == 'value' .. string.rep('[1]', 200) .. ': nested deeper than 200 levels', msg)\n"
         "assert(json.decode(string.rep('[', 200) .. string.rep(']', 200)))\n"
         "local v, err = json.decode(string.rep('[', 201) .. string.rep(']', 201))\n"
         "assert(v == nil and err == 'invalid JSON at byte 200: nested deeper than 200 levels', err)\n"
         "v, err = json.decode(string.rep('{\"a\":', 201) .. '1' .. string.rep('}', 201))\n"
         "assert(v == nil and err == 'invalid JSON at byte 1000: nested deeper than 200 levels', err)\n"
         "v, err = json.decode(string.rep('[', 100000))\n"
         "assert(v == nil and err:find('nested deeper'), err)");
}

static void test_err_size(void **state) {
  lua_State *L = *state;
  enc_err(L, "{1, 2, 3}", 6, NULL, "size", "value is over the 6-byte limit as JSON");
  enc_err(L, "{a = string.rep('x', 100)}", 50, "result", "size", "result is over the 50-byte limit as JSON");
  enc_err(L, "'\\n\\n'", 5, NULL, "size", "value is over the 5-byte limit as JSON");
  enc_err(L, "0.1", 2, NULL, "size", "value is over the 2-byte limit as JSON");
  eval(L, "{1, 2, 3}");
  assert_int_equal(encode_top(L, 7, NULL, NULL), 0); /* exactly at the limit */
  assert_string_equal(text, "[1,2,3]");
  eval(L, "'\\n\\n'");
  assert_int_equal(encode_top(L, 6, NULL, NULL), 0);
  /* a big value stops at the limit rather than building all of it */
  run(L, "local t = {} for i = 1, 100000 do t[i] = string.rep('y', 100) end\n"
         "local s, msg, kind = json.encode(t, 1000)\n"
         "assert(s == nil and kind == 'size' and msg == 'value is over the 1000-byte limit as JSON')\n"
         "s, msg, kind = json.encode({{s = string.rep('z', 10000000)}}, 100)\n"
         "assert(s == nil and kind == 'size' and msg == 'value is over the 100-byte limit as JSON')\n"
         "assert(#json.encode(string.rep('z', 10000000)) == 10000002)");
}

/* ------------------------------------------------------------ decode errors */

static void test_decode_malformed(void **state) {
  lua_State *L = *state;
  dec_err(L, "", "invalid JSON at byte 0: expected a value but the text ended");
  dec_err(L, " \n\t", "invalid JSON at byte 3: expected a value but the text ended");
  dec_err(L, "{", "invalid JSON at byte 1: expected a string key or '}' but the text ended");
  dec_err(L, "[", "invalid JSON at byte 1: expected a value but the text ended");
  dec_err(L, "[1,]", "invalid JSON at byte 3: expected a value");
  dec_err(L, "[1 2]", "invalid JSON at byte 3: expected ',' or ']'");
  dec_err(L, "[1", "invalid JSON at byte 2: expected ',' or ']' but the text ended");
  dec_err(L, "{\"a\" 1}", "invalid JSON at byte 5: expected ':'");
  dec_err(L, "{\"a\":1,}", "invalid JSON at byte 7: expected a string key");
  dec_err(L, "{\"key\": 1, \"b\": 2\"c\"}", "invalid JSON at byte 17: expected ',' or '}'");
  dec_err(L, "{a:1}", "invalid JSON at byte 1: expected a string key or '}'");
  dec_err(L, "{\"a\":}", "invalid JSON at byte 5: expected a value");
  dec_err(L, "01", "invalid JSON at byte 1: leading zeros are not allowed");
  dec_err(L, "[-012]", "invalid JSON at byte 3: leading zeros are not allowed");
  dec_err(L, "-", "invalid JSON at byte 1: expected a digit but the text ended");
  dec_err(L, "-a", "invalid JSON at byte 1: expected a digit");
  dec_err(L, "1.", "invalid JSON at byte 2: expected a digit after '.' but the text ended");
  dec_err(L, "1.e5", "invalid JSON at byte 2: expected a digit after '.'");
  dec_err(L, "1e", "invalid JSON at byte 2: expected a digit in the exponent but the text ended");
  dec_err(L, "1e+", "invalid JSON at byte 3: expected a digit in the exponent but the text ended");
  dec_err(L, ".5", "invalid JSON at byte 0: expected a value");
  dec_err(L, "+1", "invalid JSON at byte 0: expected a value");
  dec_err(L, "NaN", "invalid JSON at byte 0: expected a value");
  dec_err(L, "Infinity", "invalid JSON at byte 0: expected a value");
  dec_err(L, "tru", "invalid JSON at byte 0: expected a value");
  dec_err(L, "nul", "invalid JSON at byte 0: expected a value");
  dec_err(L, "[truex]", "invalid JSON at byte 5: expected ',' or ']'");
  dec_err(L, "\"abc", "invalid JSON at byte 4: expected '\"' to close the string but the text ended");
  dec_err(L, "\"a\\nb", "invalid JSON at byte 5: expected '\"' to close the string but the text ended");
  dec_err(L, "\"a\\", "invalid JSON at byte 3: expected '\"' to close the string but the text ended");
  dec_err(L, "\"\\x\"", "invalid JSON at byte 1: invalid escape in string");
  dec_err(L, "\"\\u12\"", "invalid JSON at byte 1: expected 4 hex digits after \\u");
  dec_err(L, "\"\\u12g4\"", "invalid JSON at byte 1: expected 4 hex digits after \\u");
  dec_err(L, "[1] x", "invalid JSON at byte 4: expected end of text");
  dec_err(L, "1 2", "invalid JSON at byte 2: expected end of text");
  dec_err(L, "{}}", "invalid JSON at byte 2: expected end of text");
  dec_err(L, "'a'", "invalid JSON at byte 0: expected a value");
  /* text with an embedded NUL is not cut short */
  assert_int_equal(decode(L, "[1]\0", 4), MOOR_EJSON);
  assert_string_equal(lua_tostring(L, -1), "invalid JSON at byte 3: expected end of text");
  lua_pop(L, 1);
  /* NULL with no length is empty text */
  assert_int_equal(decode(L, NULL, 0), MOOR_EJSON);
  lua_pop(L, 1);
}

static void test_decode_whitespace(void **state) {
  lua_State *L = *state;
  dec_check(L, " \t\r\n 42 \n", 9, "v == 42");
  dec_check(L, "\n[ 1 ,\t2 ]\r\n", 12, "v[1] == 1 and v[2] == 2 and #v == 2");
  /* the text need not be NUL-terminated: only len bytes are read */
  dec_check(L, "123456", 3, "v == 123");
  dec_check(L, "1.5e3xyz", 5, "v == 1500.0");
  dec_check(L, "\"ab\"cd", 4, "v == 'ab'");
}

/* ------------------------------------------------------------ Lua module */

static void test_lua_module(void **state) {
  lua_State *L = *state;
  run(L,
      "local json = require 'moor.json'\n"
      "assert(json.encode({b = 1, a = 2}) == '{\"a\":2,\"b\":1}')\n"
      "local v = json.decode('{\"n\":9007199254740993,\"f\":0.1,\"a\":[],\"s\":\"\\\\u00e9\"}')\n"
      "assert(math.type(v.n) == 'integer' and v.n == 9007199254740993)\n"
      "assert(v.f == 0.1 and v.s == '\\u{e9}')\n"
      "assert(json.isarray(v.a) and #v.a == 0)\n"
      "assert(json.encode(v) == '{\"a\":[],\"f\":0.1,\"n\":9007199254740993,\"s\":\"\\u{e9}\"}')\n"
      "local s, msg, kind = json.encode({f = print})\n"
      "assert(s == nil and msg == 'value.f: a function is not JSON' and kind == 'type')\n"
      "s, msg, kind = json.encode({1, 2, 3}, 5, 'result')\n"
      "assert(s == nil and msg == 'result is over the 5-byte limit as JSON' and kind == 'size')\n"
      "assert(json.encode({1, 2, 3}, 7) == '[1,2,3]')\n"
      "assert(json.encode({1, 2, 3}, nil, 'r') == '[1,2,3]')\n"
      "s, msg, kind = json.encode({x = {y = 0/0}}, nil, 'input')\n"
      "assert(s == nil and msg == 'input.x.y: NaN is not JSON' and kind == 'type')\n"
      "local d, err = json.decode('[1,]')\n"
      "assert(d == nil and err == 'invalid JSON at byte 3: expected a value', err)\n"
      "assert(select('#', json.decode('[1,]')) == 2)\n"
      "assert(json.decode('null') == json.null and json.null ~= nil)\n"
      "assert(json.encode(json.null) == 'null' and json.encode(nil) == 'null')\n"
      "assert(json.encode(json.array()) == '[]')\n"
      "local t = {}\n"
      "assert(json.array(t) == t and json.isarray(t) and getmetatable(t) == json.array_mt)\n"
      "assert(json.array(t) == t)  -- marking twice is fine\n"
      "assert(json.array_mt.__name == 'moor.json.array' and json.array_mt.__jsontype == 'array')\n"
      "assert(debug.getregistry()['moor.json.array'] == json.array_mt)\n"
      "assert(not json.isarray({}) and not json.isarray(5) and not json.isarray(setmetatable({}, {})))\n"
      "assert(not json.isarray())\n"
      "-- wrong argument types raise\n"
      "assert(not pcall(json.decode, 5))\n"
      "assert(not pcall(json.decode))\n"
      "assert(not pcall(json.array, 5))\n"
      "assert(not pcall(json.array, setmetatable({}, {})))\n"
      "assert(not pcall(json.encode))\n"
      "assert(not pcall(json.encode, 1, -1))\n"
      "assert(not pcall(json.encode, 1, 'x'))\n"
      "assert(not pcall(json.encode, 1, nil, {}))\n"
      "-- tostring(math.mininteger) etc. via the module\n"
      "for _, n in ipairs({0, 5, -1, 9007199254740993, math.maxinteger, math.mininteger}) do\n"
      "  local x = json.decode(json.encode(n))\n"
      "  assert(x == n and math.type(x) == 'integer')\n"
      "end\n"
      "for _, n in ipairs({0.1 + 0.2, 1e300, 5e-324, -0.0, 3.0, 1.5, math.pi, -1e-300}) do\n"
      "  local x = json.decode(json.encode(n))\n"
      "  assert(same(x, n), n)\n"
      "end\n");
}

/* ------------------------------------------------------------ UTF-8 */

/* The decoder refuses text that is not UTF-8, with the byte offset. */
static void test_decode_invalid_utf8(void **state) {
  lua_State *L = *state;
  dec_err(L, "\"a\xff\"", "invalid JSON at byte 2: invalid UTF-8 in string");
  dec_err(L, "[\"ok\", \"\xc3\"]", "invalid JSON at byte 8: invalid UTF-8 in string");      /* truncated */
  dec_err(L, "\"\xc0\xaf\"", "invalid JSON at byte 1: invalid UTF-8 in string");            /* overlong / */
  dec_err(L, "\"\xe0\x80\xaf\"", "invalid JSON at byte 1: invalid UTF-8 in string");        /* overlong */
  dec_err(L, "\"\xed\xa0\x80\"", "invalid JSON at byte 1: invalid UTF-8 in string");        /* surrogate */
  dec_err(L, "\"\xf4\x90\x80\x80\"", "invalid JSON at byte 1: invalid UTF-8 in string");   /* > U+10FFFF */
  dec_err(L, "\"\x80\"", "invalid JSON at byte 1: invalid UTF-8 in string");                 /* continuation */
  dec_err(L, "{\"k\xfe\":1}", "invalid JSON at byte 3: invalid UTF-8 in string");            /* in a key */
  dec_err(L, "\"\\n\xff\"", "invalid JSON at byte 3: invalid UTF-8 in string");             /* after an escape */
  dec_err(L, "\"\\n\xe2\x82\"", "invalid JSON at byte 3: invalid UTF-8 in string");
  /* Valid text of every length, raw and around escapes, still decodes. */
  const char *ok = "\"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z\"";
  dec_check(L, ok, strlen(ok), "v == 'a\\u{e9}\\u{20ac}\\u{1f600}z'");
  const char *ok2 = "\"\\t\xc3\xa9\\n\xef\xbf\xbf\"";
  dec_check(L, ok2, strlen(ok2), "v == '\\t\\u{e9}\\n\\u{ffff}'");
}

/* The encoder never writes invalid UTF-8: each byte that does not start a
 * valid sequence becomes U+FFFD, so the text is always JSON. */
static void test_encode_invalid_utf8(void **state) {
  lua_State *L = *state;
  enc_ok(L, "'a\\xffb'", "\"a\xef\xbf\xbd" "b\"");
  enc_ok(L, "'\\xc3'", "\"\xef\xbf\xbd\"");
  enc_ok(L, "'\\xed\\xa0\\x80'", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  enc_ok(L, "{ ['k\\xfe'] = '\\xc0\\xaf' }", "{\"k\xef\xbf\xbd\":\"\xef\xbf\xbd\xef\xbf\xbd\"}");
  enc_ok(L, "'\\u{e9}\\u{20ac}\\u{1f600}'", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  /* Whatever bytes go in, what comes out decodes. */
  run(L,
      "math.randomseed(7)\n"
      "for i = 1, 5000 do\n"
      "  local t = {}\n"
      "  for j = 1, math.random(0, 16) do t[j] = string.char(math.random(0, 255)) end\n"
      "  local s = assert(json.encode({ [table.concat(t)] = table.concat(t, '', 1, #t // 2) }))\n"
      "  assert(json.decode(s) ~= nil, s)\n"
      "end\n");
}

/* Values built at random round-trip exactly: encode(decode(encode(v))) ==
 * encode(v) and decode(encode(v)) is the same value. Floats come from random
 * bit patterns, strings from random bytes. */
static void test_random_roundtrip(void **state) {
  lua_State *L = *state;
  run(L,
      "math.randomseed(12345)\n"
      "local function rfloat()\n"
      "  while true do\n"
      "    local d = string.unpack('<d', string.pack('<i8', math.random(0)))\n"
      "    if d == d and d ~= math.huge and d ~= -math.huge then return d end\n"
      "  end\n"
      "end\n"
      "local function rstr()\n"
      "  local t = {}\n"
      "  for i = 1, math.random(0, 12) do\n"
      "    local r = math.random(1, 4)\n"
      "    if r == 1 then t[i] = string.char(math.random(0, 127))\n"
      "    elseif r == 2 then t[i] = utf8.char(math.random(0x80, 0x7ff))\n"
      "    elseif r == 3 then t[i] = utf8.char(math.random(0x800, 0xd7ff))\n"
      "    else t[i] = utf8.char(math.random(0xe000, 0x10ffff)) end\n"
      "  end\n"
      "  return table.concat(t)\n"
      "end\n"
      "local rval\n"
      "function rval(depth)\n"
      "  local r = math.random(1, depth > 3 and 7 or 9)\n"
      "  if r == 1 then return math.random(0)\n"
      "  elseif r == 2 then return rfloat()\n"
      "  elseif r == 3 then return rstr()\n"
      "  elseif r == 4 then return math.random() < 0.5\n"
      "  elseif r == 5 then return json.null\n"
      "  elseif r == 6 then return math.random(-1000, 1000)\n"
      "  elseif r == 7 then return math.random(-1000, 1000) / 8\n"
      "  elseif r == 8 then local t = {}; for i = 1, math.random(0, 6) do t[i] = rval(depth + 1) end; return t\n"
      "  else local t = {}; for i = 1, math.random(1, 6) do t[rstr()] = rval(depth + 1) end; return t end\n"
      "end\n"
      "for i = 1, 3000 do\n"
      "  local v = rval(0)\n"
      "  local s = assert(json.encode(v))\n"
      "  local back = json.decode(s)\n"
      "  assert(back ~= nil, s)\n"
      "  assert(same(v, back), s)\n"
      "  assert(json.encode(back) == s, s)\n"
      "end\n"
      "for i = 1, 20000 do\n"
      "  local d = rfloat()\n"
      "  local s = json.encode(d)\n"
      "  local back = json.decode(s)\n"
      "  assert(math.type(back) == 'float' and (back == d) and (1/back == 1/d), s)\n"
      "  assert(#s <= 24, s)\n"
      "end\n");
}

/* __gc finalizers may run (and call the codec) during any allocation the
 * codec makes; the outer call must come out intact. */
static void test_reentrant_finalizers(void **state) {
  lua_State *L = *state;
  run(L,
      "local count = 0\n"
      "local mt = {__gc = function()\n"
      "  count = count + 1\n"
      "  assert(json.encode({x = {1, 2, {y = 'z\\n'}}}) == '{\"x\":[1,2,{\"y\":\"z\\\\n\"}]}')\n"
      "  local v = json.decode('[\"a\\\\nb\",{\"k\":[1.5]}]')\n"
      "  assert(v[1] == 'a\\nb' and v[2].k[1] == 1.5)\n"
      "end}\n"
      "local long = string.rep('a_key_long_enough_not_to_be_interned_', 2)\n"
      "local big = {}\n"
      "for i = 1, 3000 do\n"
      "  big[i] = {s = 'line\\n' .. i, f = i + 0.5, list = {i, i * 2}, [long .. i] = i}\n"
      "end\n"
      "local text = assert(json.encode(big))\n"
      "for mode = 1, 2 do\n"
      "  collectgarbage(mode == 1 and 'incremental' or 'generational')\n"
      "  for round = 1, 10 do\n"
      "    for i = 1, 300 do setmetatable({}, mt) end\n"
      "    local v = assert(json.decode(text))\n"
      "    for i = 1, 300 do setmetatable({}, mt) end\n"
      "    assert(json.encode(v) == text)\n"
      "  end\n"
      "end\n"
      "collectgarbage()\n"
      "assert(count == 12000, count)\n");
}

/* The codec keeps the Lua stack balanced and works on any index. */
static void test_stack_and_indexes(void **state) {
  lua_State *L = *state;
  eval(L, "{a = 1}");
  lua_pushinteger(L, 7);
  lua_pushstring(L, "junk");
  assert_int_equal(moor_json_encode(L, 1, 0, NULL, NULL), 0);
  assert_string_equal(lua_tostring(L, -1), "{\"a\":1}");
  assert_int_equal(moor_json_encode(L, -3, 0, NULL, NULL), 0); /* relative: the 7 */
  assert_string_equal(lua_tostring(L, -1), "7");
  assert_int_equal(lua_gettop(L), 5);
  assert_int_equal(moor_json_decode(L, "[1,[2]]", 7), 0);
  assert_int_equal(lua_gettop(L), 6);
  assert_int_equal(moor_json_decode(L, "[1,[2]", 6), MOOR_EJSON);
  assert_int_equal(lua_gettop(L), 7);
  lua_settop(L, 0);
  /* the module's array metatable exists even when only the C API was used */
  lua_State *L2 = luaL_newstate();
  assert_int_equal(moor_json_decode(L2, "[]", 2), 0);
  assert_int_equal(luaL_getmetatable(L2, "moor.json.array"), LUA_TTABLE);
  assert_true(lua_getmetatable(L2, -2));
  assert_true(lua_rawequal(L2, -1, -2));
  lua_settop(L2, 0);
  lua_newtable(L2);
  assert_int_equal(moor_json_encode(L2, -1, 0, NULL, NULL), 0);
  assert_string_equal(lua_tostring(L2, -1), "{}");
  lua_close(L2);
}

/* Out of memory at each allocation in turn, in two modes: "budget" (every
 * allocation after the first n fails, so Lua itself raises sooner or later)
 * and "one-shot" (only allocation n fails, as when one big block cannot be
 * had; Lua retries its own after a GC, ours report MOOR_ENOMEM). Each call
 * either succeeds with the right text, returns MOOR_ENOMEM with a message, or
 * Lua raises a memory error; nothing crashes or leaks (ASan / valgrind). */
typedef struct oom_ud {
  size_t n;     /* growing allocations seen while limited */
  size_t fail;  /* index of the first (budget) or only (one-shot) failure */
  int limited, oneshot;
} oom_ud;

static void *oom_alloc(void *ud, void *p, size_t osize, size_t nsize) {
  oom_ud *o = ud;
  if (nsize == 0) {
    free(p);
    return NULL;
  }
  /* Lua requires that shrinking never fails */
  if (o->limited && (p == NULL || nsize > osize)) {
    size_t i = o->n++;
    if (o->oneshot ? i == o->fail : i >= o->fail) return NULL;
  }
  return realloc(p, nsize);
}

static const char oom_value[] =
    "(function()\n"
    "  local t = {list = {}, s = string.rep('esc\\n', 300)}\n"
    "  for i = 1, 40 do t[string.rep('long_key_', 6) .. i] = {i, i + 0.25, 'x\\ty'} end\n"
    "  for i = 1, 100 do t.list[i] = {a = i} end\n"
    "  return t\n"
    "end)()";
static char *oom_want;
static int oom_enomem; /* calls that reported MOOR_ENOMEM themselves */

static int oom_body(lua_State *L) {
  for (int round = 0; round < 2; round++) {
    const char *kind = NULL;
    int rc = moor_json_encode(L, 1, 0, NULL, &kind);
    if (rc == 0) {
      assert_string_equal(lua_tostring(L, -1), oom_want);
    } else {
      assert_int_equal(rc, MOOR_ENOMEM);
      assert_string_equal(kind, "memory");
      /* the path says where it ran out: "value.list[29]: out of memory" */
      const char *msg = lua_tostring(L, -1);
      assert_true(strncmp(msg, "value", 5) == 0);
      assert_string_equal(msg + strlen(msg) - 15, ": out of memory");
      oom_enomem++;
    }
    lua_pop(L, 1);
    rc = moor_json_decode(L, oom_want, strlen(oom_want));
    if (rc != 0) {
      assert_int_equal(rc, MOOR_ENOMEM);
      assert_string_equal(lua_tostring(L, -1), "out of memory decoding JSON");
      oom_enomem++;
    } else {
      lua_setglobal(L, "v");
      lua_getglobal(L, "json");
      lua_getfield(L, -1, "encode");
      lua_getglobal(L, "v");
      lua_call(L, 1, 1);
      if (lua_type(L, -1) == LUA_TSTRING) assert_string_equal(lua_tostring(L, -1), oom_want);
      lua_pop(L, 2);
    }
  }
  return 0;
}

static void test_out_of_memory(void **state) {
  lua_State *L = *state;
  eval(L, oom_value);
  assert_int_equal(encode_top(L, 0, NULL, NULL), 0);
  oom_want = text;
  for (int oneshot = 0; oneshot < 2; oneshot++) {
    int ok = 0, raised = 0;
    oom_enomem = 0;
    /* every allocation index near the start, then a sample, until it fits */
    for (size_t n = 0; oneshot ? n < 1500 : ok == 0; n += n < 200 ? 1 : 7) {
      oom_ud o = {0, 0, 0, oneshot};
      lua_State *M = lua_newstate(oom_alloc, &o);
      assert_non_null(M);
      luaL_openlibs(M);
      luaL_requiref(M, "moor.json", luaopen_moor_json, 0);
      lua_setglobal(M, "json");
      lua_pushcfunction(M, oom_body);
      eval(M, oom_value);
      lua_gc(M, LUA_GCCOLLECT);
      o.fail = n;
      o.limited = 1;
      int rc = lua_pcall(M, 1, 0, 0);
      o.limited = 0;
      if (rc == LUA_OK) ok++;
      else if (rc == LUA_ERRMEM) raised++;
      else fail_msg("unexpected error: %s", lua_tostring(M, -1));
      /* with memory back, the same state works (even if a call was cut short) */
      lua_settop(M, 0);
      lua_pushcfunction(M, oom_body);
      eval(M, oom_value);
      int before = oom_enomem;
      assert_int_equal(lua_pcall(M, 1, 0, 0), LUA_OK);
      assert_int_equal(oom_enomem, before);
      lua_close(M);
    }
    print_message("%s: %d ok, %d raised, %d returned MOOR_ENOMEM\n", oneshot ? "one-shot" : "budget", ok,
                  raised, oom_enomem);
    assert_true(ok > 0);
    if (oneshot) assert_true(oom_enomem > 0);
    else assert_true(raised > 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_integers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_floats, setup, teardown),
      cmocka_unit_test_setup_teardown(test_big_integer_tokens, setup, teardown),
      cmocka_unit_test_setup_teardown(test_float_text_matches_spec, setup, teardown),
      cmocka_unit_test_setup_teardown(test_decimal_comma_locale, setup, teardown),
      cmocka_unit_test_setup_teardown(test_string_escapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unicode_surrogates, setup, teardown),
      cmocka_unit_test_setup_teardown(test_control_chars, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nested, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sorted_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_empty_tables, setup, teardown),
      cmocka_unit_test_setup_teardown(test_null, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_type, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_nan_inf, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_cycle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_depth, setup, teardown),
      cmocka_unit_test_setup_teardown(test_err_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_decode_malformed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_decode_whitespace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lua_module, setup, teardown),
      cmocka_unit_test_setup_teardown(test_decode_invalid_utf8, setup, teardown),
      cmocka_unit_test_setup_teardown(test_encode_invalid_utf8, setup, teardown),
      cmocka_unit_test_setup_teardown(test_random_roundtrip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reentrant_finalizers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stack_and_indexes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_out_of_memory, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
