/* Lossless JSON codec for Lua values (see json.h for the contract).
 *
 * Memory: output text, unescaped strings and the key-sorting array live in a
 * "scratch" full userdata kept in the registry and reused across calls, so a
 * small encode or decode does no allocation of its own, and if a Lua API call
 * raises (out of memory) nothing leaks: the scratch is Lua-owned and its __gc
 * frees the buffers. Tables are read with raw access only, so no Lua code runs
 * during a call, except __gc finalizers that Lua may run on any allocation;
 * such a nested call finds the scratch busy and uses a temporary one.
 *
 * Floats: the text is the shortest of %.15g, %.16g, %.17g that strtod reads
 * back exactly. printf is slow (bignum), so the 17 digits usually come from
 * one long double multiply whose error bound is checked, and the shorter
 * candidates are rounded from them; the results match printf's bit for bit
 * (tests/c/test_json.c compares them against the plain printf loop). */
#include "json.h"

#include <float.h>
#include <lauxlib.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXDEPTH MOOR_JSON_MAXDEPTH
#define SCRATCH_MT "moor.json.scratch"

#define IS_DIGIT(c) ((unsigned)((unsigned char)(c) - '0') < 10u)

typedef struct jkey {
  const char *s; /* points into the key string, anchored by its table */
  size_t len;
} jkey;

typedef struct jscratch {
  char *buf;
  size_t cap;
  jkey *keys; /* a stack: each object being encoded owns a segment */
  size_t kcap;
  const void *array_mt; /* identity of the array metatable */
  int busy, temp;
} jscratch;

static const char scratch_key = 0; /* its address is the registry key */

/* ---------------------------------------------------------------- scratch */

/* Use Lua's allocator so an embedder's memory limit covers us too. */
static void *lalloc(lua_State *L, void *p, size_t osize, size_t nsize) {
  void *ud;
  lua_Alloc f = lua_getallocf(L, &ud);
  return f(ud, p, osize, nsize);
}

static void scratch_free_buf(lua_State *L, jscratch *sc) {
  if (sc->buf) lalloc(L, sc->buf, sc->cap, 0);
  sc->buf = NULL;
  sc->cap = 0;
}

static void scratch_free_keys(lua_State *L, jscratch *sc) {
  if (sc->keys) lalloc(L, sc->keys, sc->kcap * sizeof(jkey), 0);
  sc->keys = NULL;
  sc->kcap = 0;
}

static int scratch_gc(lua_State *L) {
  jscratch *sc = lua_touserdata(L, 1);
  if (sc) {
    scratch_free_buf(L, sc);
    scratch_free_keys(L, sc);
  }
  return 0;
}

/* Grow sc->buf to hold at least need bytes. Returns 0, or -1 when out of memory. */
static int scratch_grow(lua_State *L, jscratch *sc, size_t need) {
  size_t cap = sc->cap ? sc->cap : 256;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      cap = need;
      break;
    }
    cap *= 2;
  }
  char *nb = lalloc(L, sc->buf, sc->cap, cap);
  if (!nb) return -1;
  sc->buf = nb;
  sc->cap = cap;
  return 0;
}

static int scratch_grow_keys(lua_State *L, jscratch *sc, size_t need) {
  size_t cap = sc->kcap ? sc->kcap : 32;
  while (cap < need) cap *= 2;
  if (cap > SIZE_MAX / sizeof(jkey)) return -1;
  jkey *nk = lalloc(L, sc->keys, sc->kcap * sizeof(jkey), cap * sizeof(jkey));
  if (!nk) return -1;
  sc->keys = nk;
  sc->kcap = cap;
  return 0;
}

/* Push the array metatable, creating it on first use. */
static void push_array_mt(lua_State *L) {
  if (luaL_newmetatable(L, MOOR_JSON_ARRAY_MT)) { /* sets __name itself */
    lua_pushliteral(L, "array");
    lua_setfield(L, -2, "__jsontype");
  }
}

/* Push a new scratch userdata; its user value 1 is the array metatable. */
static jscratch *scratch_new(lua_State *L, int temp) {
  jscratch *sc = lua_newuserdatauv(L, sizeof *sc, 1);
  memset(sc, 0, sizeof *sc);
  sc->temp = temp;
  if (luaL_newmetatable(L, SCRATCH_MT)) {
    lua_pushcfunction(L, scratch_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  push_array_mt(L);
  sc->array_mt = lua_topointer(L, -1);
  lua_setiuservalue(L, -2, 1);
  return sc;
}

/* Push the scratch to use for one call and mark it busy. */
static jscratch *scratch_acquire(lua_State *L) {
  jscratch *sc;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &scratch_key) == LUA_TUSERDATA) {
    sc = lua_touserdata(L, -1);
    if (!sc->busy) {
      sc->busy = 1;
      return sc;
    }
    /* Nested call (a finalizer), or an earlier call was cut short by a Lua
     * error before it could release: either way use a private one. */
    lua_pop(L, 1);
    sc = scratch_new(L, 1);
  } else {
    lua_pop(L, 1);
    sc = scratch_new(L, 0);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &scratch_key);
  }
  sc->busy = 1;
  return sc;
}

static void scratch_release(lua_State *L, jscratch *sc) {
  sc->busy = 0;
  if (sc->temp || sc->cap > MOOR_JSON_KEEP_BYTES) scratch_free_buf(L, sc);
  if (sc->temp || sc->kcap > MOOR_JSON_KEEP_KEYS) scratch_free_keys(L, sc);
}

/* ---------------------------------------------------------------- encoder */

typedef struct jframe {
  const char *key; /* NULL: an array element at index */
  size_t klen;
  lua_Integer index;
} jframe;

typedef struct jenc {
  lua_State *L;
  jscratch *sc;
  size_t len, max; /* bytes written; limit (0: none) */
  size_t nkeys;    /* used part of sc->keys */
  int depth;       /* tables entered; path[0..depth-1] leads to the current value */
  int rc, nopath;
  const char *kind;
  char detail[96];
  jframe path[MAXDEPTH];
  const void *open[MAXDEPTH]; /* tables being encoded, to spot cycles */
} jenc;

static int enc_fail(jenc *e, const char *kind, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->detail, sizeof e->detail, fmt, ap);
  va_end(ap);
  e->kind = kind;
  e->rc = MOOR_EJSON;
  return -1;
}

static int enc_nomem(jenc *e) {
  enc_fail(e, "memory", "out of memory");
  e->rc = MOOR_ENOMEM;
  return -1;
}

/* Make room for n more bytes, enforcing the size limit exactly. */
static inline int enc_room(jenc *e, size_t n) {
  if (e->max && n > e->max - e->len) {
    enc_fail(e, "size", " is over the %zu-byte limit as JSON", e->max);
    e->nopath = 1;
    return -1;
  }
  if (n > e->sc->cap - e->len && scratch_grow(e->L, e->sc, e->len + n)) return enc_nomem(e);
  return 0;
}

static inline int put(jenc *e, const char *s, size_t n) {
  if (n == 0) return 0;
  if (enc_room(e, n)) return -1;
  memcpy(e->sc->buf + e->len, s, n);
  e->len += n;
  return 0;
}

static inline int put1(jenc *e, char c) {
  if (enc_room(e, 1)) return -1;
  e->sc->buf[e->len++] = c;
  return 0;
}

/* Escape for each byte: 0 = copy as is, 'u' = \u00XX, else the letter after '\'. */
static const char esc_tab[256] = {
  'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r', 'u', 'u',
  'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
  0, 0, '"', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '\\', 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'u',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
  'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v', 'v',
};

/* Length of the valid UTF-8 sequence at p (whose lead byte is >= 0x80), or
 * 0: no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const char *sp, const char *se) {
  const unsigned char *p = (const unsigned char *)sp, *end = (const unsigned char *)se;
  size_t have = (size_t)(end - p);
  unsigned c = p[0];
  if (c >= 0xc2 && c <= 0xdf) return have >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (have < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80) return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f)) return 0;
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (have < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80) return 0;
    if ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f)) return 0;
    return 4;
  }
  return 0;
}

/* Strings are copied as they are when they are UTF-8; a byte that starts no
 * valid sequence becomes U+FFFD, so the encoder never writes text that is
 * not JSON (a webhook body in Latin-1 arrives with its odd bytes replaced). */
static int enc_string(jenc *e, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t start = 0;
  if (e->max && n > e->max) return enc_room(e, n); /* fail before scanning a huge string */
  if (put1(e, '"')) return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char x = esc_tab[c];
    if (!x) continue;
    if (x == 'v') {
      size_t k = utf8_seq(s + i, s + n);
      if (k) {
        i += k - 1;
        continue;
      }
    }
    if (put(e, s + start, i - start)) return -1;
    if (x == 'v') {
      if (put(e, "\xef\xbf\xbd", 3)) return -1;
    } else if (x == 'u') {
      char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      if (put(e, u, 6)) return -1;
    } else {
      char b[2] = {'\\', x};
      if (put(e, b, 2)) return -1;
    }
    start = i + 1;
  }
  if (put(e, s + start, n - start)) return -1;
  return put1(e, '"');
}

static int enc_int(jenc *e, lua_Integer v) {
  char tmp[24], *p = tmp + sizeof tmp;
  /* unsigned negation: -LUA_MININTEGER would overflow */
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) *--p = '-';
  return put(e, p, (size_t)(tmp + sizeof tmp - p));
}

/* Digits of d rounded to prec significant digits, as printf's %.*e makes
 * them (exact, round-half-even); returns the decimal exponent. The digits are
 * picked out of the text, so the locale's decimal point does not matter. */
static int e_digits(double d, int prec, char *dig) {
  char tmp[48];
  snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
  const char *p = tmp;
  int n = 0;
  for (; *p && *p != 'e'; p++)
    if (IS_DIGIT(*p) && n < prec) dig[n++] = *p;
  return *p == 'e' ? atoi(p + 1) : 0;
}

/* Round the 17 digits d17 (exponent x17) to prec digits into dig. side says
 * where |d| lies against the 17 digits: -1 below, +1 above, 0 unknown. Returns
 * the new exponent, or INT32_MIN when the cut falls on a tie that side cannot
 * settle: rounding rounded text again could then differ from rounding d. */
static int round_digits(const char *d17, int x17, int side, int prec, char *dig) {
  int tie = d17[prec] == '5';
  for (int i = prec + 1; i < 17 && tie; i++) tie = d17[i] == '0';
  if (tie && side == 0) return INT32_MIN;
  memcpy(dig, d17, (size_t)prec);
  if (tie ? side < 0 : d17[prec] < '5') return x17;
  for (int i = prec - 1; i >= 0; i--) { /* round up, carrying */
    if (dig[i] != '9') {
      dig[i]++;
      return x17;
    }
    dig[i] = '0';
  }
  dig[0] = '1'; /* 9.99..9 became 10.0..0 */
  return x17 + 1;
}

/* Write "e-7" (mindig 1) or "e-07" (mindig 2, as printf does); no printf
 * here: it costs more than the rest of the formatting. */
static size_t put_exp(char *o, int x, int mindig) {
  char tmp[8], *p = tmp + sizeof tmp;
  unsigned u = (unsigned)(x < 0 ? -x : x);
  size_t n = 0;
  o[n++] = 'e';
  if (x < 0 || mindig > 1) o[n++] = x < 0 ? '-' : '+';
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (mindig > 1 && tmp + sizeof tmp - p < 2) *--p = '0';
  memcpy(o + n, p, (size_t)(tmp + sizeof tmp - p));
  return n + (size_t)(tmp + sizeof tmp - p);
}

/* Does [-]dig * 10^(x-prec+1) read back as exactly d? (No decimal point in the
 * text, so strtod's locale does not matter.) */
static int reads_back(const char *dig, int prec, int x, int neg, double d) {
  char tmp[40];
  size_t o = 0;
  if (neg) tmp[o++] = '-';
  memcpy(tmp + o, dig, (size_t)prec);
  o += (size_t)prec;
  o += put_exp(tmp + o, x - prec + 1, 1);
  tmp[o] = '\0';
  return strtod(tmp, NULL) == d;
}

/* Write the digits as printf's %.<prec>g would, in JSON syntax, plus ".0"
 * when the text would otherwise read back as an integer. */
static size_t render_g(char *out, const char *dig, int prec, int x, int neg) {
  size_t o = 0;
  int n = prec;
  while (n > 1 && dig[n - 1] == '0') n--; /* %g drops trailing zeros */
  if (neg) out[o++] = '-';
  if (x < -4 || x >= prec) { /* d.ddde+XX */
    out[o++] = dig[0];
    if (n > 1) {
      out[o++] = '.';
      memcpy(out + o, dig + 1, (size_t)n - 1);
      o += (size_t)n - 1;
    }
    o += put_exp(out + o, x, 2);
  } else if (x >= 0) { /* ddd.ddd */
    for (int i = 0; i <= x; i++) out[o++] = i < n ? dig[i] : '0';
    out[o++] = '.';
    if (n > x + 1) {
      memcpy(out + o, dig + x + 1, (size_t)(n - x - 1));
      o += (size_t)(n - x - 1);
    } else {
      out[o++] = '0'; /* "3.0": stays a float */
    }
  } else { /* 0.000ddd */
    out[o++] = '0';
    out[o++] = '.';
    for (int i = -1; i > x; i--) out[o++] = '0';
    memcpy(out + o, dig, (size_t)n);
    o += (size_t)n;
  }
  out[o] = '\0';
  return o;
}

#if LDBL_MANT_DIG >= 64
/* Powers of ten that a 64-bit-mantissa long double holds exactly (5^27 < 2^64). */
static const long double tens[28] = {
    1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
    1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
    1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};

/* The 17 digits of ad > 0 as printf would round them, from one long double
 * multiply instead of printf's bignum arithmetic (5x faster). One rounding
 * of a value below 1e17 to 64 bits errs by under 1e17 * 2^-64 < 0.0055 units
 * of the 17th digit, so the rounding is sure unless the fraction is within
 * 0.006 of one half; then, or out of range, INT32_MIN (use printf). */
static int fast_digits17(double ad, char *dig, int *side) {
  /* The bound needs a real 64-bit mantissa at run time: valgrind, for one,
   * computes long doubles as doubles. */
  volatile long double one = 1.0L;
  if (one + 0x1p-63L == one) return INT32_MIN;
  int x = (int)floor(log10(ad));
  for (int tries = 0; tries < 2; tries++) { /* log10 may be one off near powers of 10 */
    int k = 16 - x;
    if (k > 27 || k < -27) return INT32_MIN;
    long double v = k >= 0 ? (long double)ad * tens[k] : (long double)ad / tens[-k];
    if (v < 1e16L) {
      x--;
      continue;
    }
    if (v >= 1e17L) {
      x++;
      continue;
    }
    long double fl = floorl(v), frac = v - fl;
    if (frac > 0.494L && frac < 0.506L) return INT32_MIN;
    unsigned long long m = (unsigned long long)fl + (frac > 0.5L);
    /* d against m, for ties at 15 or 16 digits; unsure when frac is near 0 */
    *side = frac < 0.006L || frac > 0.994L ? 0 : frac < 0.5L ? 1 : -1;
    if (m == 100000000000000000ull) { /* 9.99..95 rounded up to 10.0 */
      m /= 10;
      x++;
    }
    for (int i = 16; i >= 0; i--) {
      dig[i] = (char)('0' + m % 10);
      m /= 10;
    }
    return x;
  }
  return INT32_MIN;
}
#endif

/* The text of the shortest of %.15g, %.16g, %.17g that reads back as d, in
 * JSON syntax whatever the locale. The 17 digits come from one multiply (or
 * one printf); the 15- and 16-digit candidates are rounded from them (printf
 * again only on a tie) and checked with strtod. out needs 40 bytes. */
static size_t fmt_double(char *out, double d) {
  if (!isfinite(d)) return (size_t)snprintf(out, 40, "%g", d); /* only for messages */
  int neg = signbit(d) != 0;
  if (d != 0 && fabs(d) < 1e15 && d == (double)(long long)d) { /* integral: common and cheap */
    char tmp[24], *p = tmp + sizeof tmp;
    unsigned long long u = (unsigned long long)fabs(d);
    do {
      *--p = (char)('0' + u % 10);
      u /= 10;
    } while (u);
    size_t o = 0;
    if (neg) out[o++] = '-';
    memcpy(out + o, p, (size_t)(tmp + sizeof tmp - p));
    o += (size_t)(tmp + sizeof tmp - p);
    memcpy(out + o, ".0", 3);
    return o + 2;
  }
  char d17[17], dig[17];
  int x17 = INT32_MIN, side = 0;
#if LDBL_MANT_DIG >= 64
  if (d != 0) x17 = fast_digits17(fabs(d), d17, &side);
#endif
  if (x17 == INT32_MIN) x17 = e_digits(d, 17, d17);
  for (int prec = 15; prec <= 16; prec++) {
    int x = round_digits(d17, x17, side, prec, dig);
    if (x == INT32_MIN) x = e_digits(d, prec, dig);
    if (reads_back(dig, prec, x, neg, d)) return render_g(out, dig, prec, x, neg);
  }
  return render_g(out, d17, 17, x17, neg);
}

static int enc_float(jenc *e, double d) {
  char buf[40];
  if (isnan(d)) return enc_fail(e, "type", "NaN is not JSON");
  if (isinf(d)) return enc_fail(e, "type", "%s is not JSON", d > 0 ? "inf" : "-inf");
  return put(e, buf, fmt_double(buf, d));
}

static int key_cmp(const void *a, const void *b) {
  const jkey *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->s, y->s, n);
  if (c) return c;
  return (x->len > y->len) - (x->len < y->len);
}

static void sort_keys(jkey *k, size_t n) {
  if (n > 12) {
    qsort(k, n, sizeof *k, key_cmp);
    return;
  }
  for (size_t i = 1; i < n; i++) { /* insertion sort: cheaper for the usual small object */
    jkey t = k[i];
    size_t j = i;
    while (j > 0 && key_cmp(&k[j - 1], &t) > 0) {
      k[j] = k[j - 1];
      j--;
    }
    k[j] = t;
  }
}

static int enc_value(jenc *e, int idx);

static int enc_table(jenc *e, int idx) {
  lua_State *L = e->L;
  const void *self = lua_topointer(L, idx);
  if (e->depth >= MAXDEPTH) return enc_fail(e, "depth", "nested deeper than %d levels", MAXDEPTH);
  for (int i = 0; i < e->depth; i++)
    if (e->open[i] == self) return enc_fail(e, "cycle", "cycle (table refers to itself)");
  if (!lua_checkstack(L, 4)) return enc_nomem(e);

  int marked = 0;
  if (lua_getmetatable(L, idx)) {
    marked = lua_topointer(L, -1) == e->sc->array_mt;
    lua_pop(L, 1);
  }

  /* One pass over the keys: all strings (object) or all integers (array). */
  size_t kbase = e->nkeys, nstr = 0;
  lua_Integer nint = 0, imin = LUA_MAXINTEGER, imax = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING) {
      if (nint) return enc_fail(e, "key", "table mixes array and object keys");
      if (e->nkeys >= e->sc->kcap && scratch_grow_keys(L, e->sc, e->nkeys + 1)) return enc_nomem(e);
      jkey *k = &e->sc->keys[e->nkeys++];
      k->s = lua_tolstring(L, -2, &k->len);
      nstr++;
    } else if (kt == LUA_TNUMBER && lua_isinteger(L, -2)) {
      if (nstr) return enc_fail(e, "key", "table mixes array and object keys");
      lua_Integer k = lua_tointeger(L, -2);
      if (k < imin) imin = k;
      if (k > imax) imax = k;
      nint++;
    } else if (kt == LUA_TNUMBER) {
      char buf[40];
      fmt_double(buf, lua_tonumber(L, -2));
      return enc_fail(e, "key", "table has a float key (%s)", buf);
    } else {
      return enc_fail(e, "key", "table has a %s key", luaL_typename(L, -2));
    }
    lua_pop(L, 1);
  }

  if (nint && imin < 1)
    return enc_fail(e, "key", "table has integer key %lld (arrays start at 1)", (long long)imin);
  if (nint && imax != nint) { /* distinct keys in [1, imax]: a gap iff imax > count */
    lua_Integer i = 1;
    while (lua_rawgeti(L, idx, i) != LUA_TNIL) {
      lua_pop(L, 1);
      i++;
    }
    lua_pop(L, 1);
    return enc_fail(e, "key", "sparse array (index %lld missing)", (long long)i);
  }
  if (nstr && marked) return enc_fail(e, "key", "table is marked as an array but has string keys");
  if (nint == 0 && nstr == 0) return marked ? put(e, "[]", 2) : put(e, "{}", 2);

  /* path[d] and open[d] describe the child being encoded; depth counts them
   * only around enc_value, so an error anywhere else names this table. */
  int d = e->depth;
  jframe *f = &e->path[d];
  e->open[d] = self;
  if (nint) {
    if (put1(e, '[')) return -1;
    f->key = NULL;
    for (lua_Integer i = 1; i <= nint; i++) {
      if (i > 1 && put1(e, ',')) return -1;
      f->index = i;
      lua_rawgeti(L, idx, i);
      e->depth = d + 1;
      if (enc_value(e, lua_gettop(L))) return -1;
      e->depth = d;
      lua_pop(L, 1);
    }
    return put1(e, ']');
  }
  sort_keys(e->sc->keys + kbase, nstr);
  if (put1(e, '{')) return -1;
  for (size_t j = 0; j < nstr; j++) {
    jkey k = e->sc->keys[kbase + j]; /* copy: nested objects may move the array */
    if (j && put1(e, ',')) return -1;
    if (enc_string(e, k.s, k.len) || put1(e, ':')) return -1;
    f->key = k.s;
    f->klen = k.len;
    lua_pushlstring(L, k.s, k.len);
    lua_rawget(L, idx);
    e->depth = d + 1;
    if (enc_value(e, lua_gettop(L))) return -1;
    e->depth = d;
    lua_pop(L, 1);
  }
  e->nkeys = kbase;
  return put1(e, '}');
}

static int enc_value(jenc *e, int idx) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return put(e, "null", 4);
    case LUA_TBOOLEAN:
      return lua_toboolean(L, idx) ? put(e, "true", 4) : put(e, "false", 5);
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) return enc_int(e, lua_tointeger(L, idx));
      return enc_float(e, lua_tonumber(L, idx));
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      return enc_string(e, s, n);
    }
    case LUA_TTABLE:
      return enc_table(e, idx);
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL) return put(e, "null", 4); /* json.null */
      /* fall through */
    default:
      return enc_fail(e, "type", "a %s is not JSON", luaL_typename(L, idx));
  }
}

static int is_identifier(const char *s, size_t n) {
  static const char *const reserved[] = {
      "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
      "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"};
  if (n == 0 || IS_DIGIT(s[0])) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(c == '_' || IS_DIGIT(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))) return 0;
  }
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (strlen(reserved[i]) == n && memcmp(reserved[i], s, n) == 0) return 0;
  return 1;
}

/* Push "<root><path>: <detail>", the path in Lua syntax: .id, ["odd key"], [i]. */
static void enc_push_error(jenc *e, const char *root) {
  luaL_Buffer b;
  luaL_buffinit(e->L, &b);
  luaL_addstring(&b, root);
  if (e->nopath) {
    luaL_addstring(&b, e->detail);
    luaL_pushresult(&b);
    return;
  }
  for (int i = 0; i < e->depth; i++) {
    const jframe *f = &e->path[i];
    char tmp[32];
    if (!f->key) {
      snprintf(tmp, sizeof tmp, "[%lld]", (long long)f->index);
      luaL_addstring(&b, tmp);
    } else if (is_identifier(f->key, f->klen)) {
      luaL_addchar(&b, '.');
      luaL_addlstring(&b, f->key, f->klen);
    } else {
      luaL_addstring(&b, "[\"");
      for (size_t j = 0; j < f->klen; j++) {
        unsigned char c = (unsigned char)f->key[j];
        if (c == '"' || c == '\\') {
          luaL_addchar(&b, '\\');
          luaL_addchar(&b, (char)c);
        } else if (c < 0x20 || c == 0x7f) {
          snprintf(tmp, sizeof tmp, "\\%03u", c); /* 3 digits: a following digit cannot join */
          luaL_addstring(&b, tmp);
        } else {
          luaL_addchar(&b, (char)c);
        }
      }
      luaL_addstring(&b, "\"]");
    }
  }
  luaL_addstring(&b, ": ");
  luaL_addstring(&b, e->detail);
  luaL_pushresult(&b);
}

int moor_json_encode(lua_State *L, int idx, size_t maxbytes, const char *root, const char **kind) {
  jenc e;
  int base = lua_gettop(L);
  idx = lua_absindex(L, idx);
  if (!root) root = "value";
  if (!lua_checkstack(L, 8)) {
    if (kind) *kind = "memory";
    if (lua_checkstack(L, 1)) lua_pushliteral(L, "out of memory (Lua stack)");
    return MOOR_ENOMEM;
  }
  e.L = L;
  e.sc = scratch_acquire(L); /* at base + 1 until released */
  e.len = 0;
  e.max = maxbytes;
  e.nkeys = 0;
  e.depth = 0;
  e.rc = 0;
  e.nopath = 0;
  e.kind = NULL;
  if (enc_value(&e, idx) == 0) {
    lua_settop(L, base + 1);
    lua_pushlstring(L, e.sc->buf ? e.sc->buf : "", e.len);
  } else {
    lua_settop(L, base + 1);
    enc_push_error(&e, root);
  }
  scratch_release(L, e.sc);
  lua_replace(L, base + 1); /* drop the scratch, keep the result */
  if (kind) *kind = e.kind;
  return e.rc;
}

/* ---------------------------------------------------------------- decoder */

typedef struct jdec {
  lua_State *L;
  const char *s, *p, *end;
  jscratch *sc;
  int mt; /* stack index of the array metatable */
  int depth;
  int rc;
  const char *err;
  size_t erroff;
} jdec;

static int dec_fail(jdec *d, const char *at, const char *msg) {
  d->err = msg;
  d->erroff = (size_t)(at - d->s);
  d->rc = MOOR_EJSON;
  return -1;
}

static int dec_nomem(jdec *d) {
  d->err = "out of memory";
  d->erroff = (size_t)(d->p - d->s);
  d->rc = MOOR_ENOMEM;
  return -1;
}

/* Ensure the scratch holds need bytes. */
static inline int dec_room(jdec *d, size_t need) {
  if (need > d->sc->cap && scratch_grow(d->L, d->sc, need)) return dec_nomem(d);
  return 0;
}

static inline void skip_ws(jdec *d) {
  const char *p = d->p, *end = d->end;
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  d->p = p;
}

/* Bytes that end the plain run of a string: '"', '\\', control characters,
 * and non-ASCII bytes (each must start a valid UTF-8 sequence). */
static const unsigned char str_stop[256] = {
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

static int hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned char c = (unsigned char)p[i];
    unsigned x;
    if (IS_DIGIT(c)) x = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') x = (c | 0x20) - 'a' + 10;
    else return -1;
    v = v << 4 | x;
  }
  *out = v;
  return 0;
}

static size_t utf8_put(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18);
  o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* The string has escapes: unescape [start, ...) into the scratch. q is the
 * first backslash. */
static int dec_string_slow(jdec *d, const char *start, const char *q) {
  const char *end = d->end;
  size_t n = (size_t)(q - start);
  if (dec_room(d, n + 4)) return -1;
  memcpy(d->sc->buf, start, n);
  while (q < end) {
    unsigned char c = (unsigned char)*q;
    if (c == '"') {
      lua_pushlstring(d->L, d->sc->buf, n);
      d->p = q + 1;
      return 0;
    }
    if (c != '\\') {
      if (c < 0x20) return dec_fail(d, q, "control character in string (must be escaped)");
      const char *r = q + 1;
      if (c >= 0x80) {
        size_t k = utf8_seq(q, end);
        if (!k) return dec_fail(d, q, "invalid UTF-8 in string");
        r = q + k;
      }
      while (r < end && !str_stop[(unsigned char)*r]) r++;
      if (dec_room(d, n + (size_t)(r - q) + 4)) return -1;
      memcpy(d->sc->buf + n, q, (size_t)(r - q));
      n += (size_t)(r - q);
      q = r;
      continue;
    }
    if (q + 1 >= end) break;
    char *o = d->sc->buf + n; /* room for 4 bytes is kept ahead */
    switch (q[1]) {
      case '"': *o = '"'; break;
      case '\\': *o = '\\'; break;
      case '/': *o = '/'; break;
      case 'b': *o = '\b'; break;
      case 'f': *o = '\f'; break;
      case 'n': *o = '\n'; break;
      case 'r': *o = '\r'; break;
      case 't': *o = '\t'; break;
      case 'u': {
        unsigned cp, lo;
        if (end - q < 6 || hex4(q + 2, &cp)) return dec_fail(d, q, "expected 4 hex digits after \\u");
        if (cp >= 0xdc00 && cp <= 0xdfff) return dec_fail(d, q, "lone surrogate in \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (end - q < 12 || q[6] != '\\' || q[7] != 'u' || hex4(q + 8, &lo) || lo < 0xdc00 ||
              lo > 0xdfff)
            return dec_fail(d, q, "lone surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          q += 6;
        }
        n += utf8_put(o, cp);
        q += 6;
        if (dec_room(d, n + 4)) return -1;
        continue;
      }
      default:
        return dec_fail(d, q, "invalid escape in string");
    }
    n++;
    q += 2;
    if (dec_room(d, n + 4)) return -1;
  }
  return dec_fail(d, end, "expected '\"' to close the string");
}

static int dec_string(jdec *d) {
  const char *start = d->p + 1, *q = start, *end = d->end;
  for (;;) {
    while (q < end && !str_stop[(unsigned char)*q]) q++;
    if (q == end || (unsigned char)*q < 0x80) break;
    size_t k = utf8_seq(q, end);
    if (!k) return dec_fail(d, q, "invalid UTF-8 in string");
    q += k;
  }
  if (q < end && *q == '"') { /* no escapes: straight from the input */
    lua_pushlstring(d->L, start, (size_t)(q - start));
    d->p = q + 1;
    return 0;
  }
  if (q == end) return dec_fail(d, end, "expected '\"' to close the string");
  if (*q != '\\') return dec_fail(d, q, "control character in string (must be escaped)");
  return dec_string_slow(d, start, q);
}

/* strtod on a token known to be valid JSON number syntax. */
static int dec_float(jdec *d, const char *tok, size_t n) {
  char small[64], *buf = small;
  if (n + 1 > sizeof small) {
    if (dec_room(d, n + 1)) return -1;
    buf = d->sc->buf;
  }
  memcpy(buf, tok, n);
  buf[n] = '\0';
  char *endp;
  double v = strtod(buf, &endp);
  if (endp != buf + n) { /* the locale wants another decimal point: retry as Lua does */
    const char *dp = localeconv()->decimal_point, *dot = memchr(tok, '.', n);
    if (!dot) return dec_fail(d, tok, "invalid number");
    size_t dplen = strlen(dp), pre = (size_t)(dot - tok);
    if (dec_room(d, n + dplen + 1)) return -1;
    buf = d->sc->buf;
    memcpy(buf, tok, pre);
    memcpy(buf + pre, dp, dplen);
    memcpy(buf + pre + dplen, dot + 1, n - pre - 1);
    buf[n - 1 + dplen] = '\0';
    v = strtod(buf, &endp);
    if (*endp != '\0') return dec_fail(d, tok, "invalid number");
  }
  if (isinf(v)) return dec_fail(d, tok, "number out of range");
  lua_pushnumber(d->L, v);
  return 0;
}

static int dec_number(jdec *d) {
  const char *st = d->p, *q = st, *end = d->end;
  int neg = 0, isfloat = 0;
  if (*q == '-') {
    neg = 1;
    q++;
  }
  if (q == end || !IS_DIGIT(*q)) return dec_fail(d, q, "expected a digit");
  const char *ds = q;
  if (*q == '0') {
    q++;
    if (q < end && IS_DIGIT(*q)) return dec_fail(d, q, "leading zeros are not allowed");
  } else {
    while (q < end && IS_DIGIT(*q)) q++;
  }
  const char *de = q;
  if (q < end && *q == '.') {
    q++;
    if (q == end || !IS_DIGIT(*q)) return dec_fail(d, q, "expected a digit after '.'");
    while (q < end && IS_DIGIT(*q)) q++;
    isfloat = 1;
  }
  if (q < end && (*q == 'e' || *q == 'E')) {
    q++;
    if (q < end && (*q == '+' || *q == '-')) q++;
    if (q == end || !IS_DIGIT(*q)) return dec_fail(d, q, "expected a digit in the exponent");
    while (q < end && IS_DIGIT(*q)) q++;
    isfloat = 1;
  }
  d->p = q;
  if (!isfloat) {
    /* Integer token: exact if it fits in int64, else a float like Lua's own reader. */
    unsigned long long u = 0, lim = neg ? (1ull << 63) : (1ull << 63) - 1;
    size_t nd = (size_t)(de - ds);
    int fits = 1;
    if (nd <= 18) {
      for (const char *c = ds; c < de; c++) u = u * 10 + (unsigned)(*c - '0');
    } else {
      for (const char *c = ds; c < de; c++) {
        unsigned dig = (unsigned)(*c - '0');
        if (u > (lim - dig) / 10) {
          fits = 0;
          break;
        }
        u = u * 10 + dig;
      }
    }
    if (fits) {
      lua_Integer v;
      if (!neg) v = (lua_Integer)u;
      else if (u == (1ull << 63)) v = LUA_MININTEGER;
      else v = -(lua_Integer)u;
      lua_pushinteger(d->L, v);
      return 0;
    }
  }
  return dec_float(d, st, (size_t)(q - st));
}

static int dec_value(jdec *d);

static int dec_open(jdec *d) {
  if (d->depth >= MAXDEPTH) return dec_fail(d, d->p, "nested deeper than " MOOR__STR(MOOR_JSON_MAXDEPTH) " levels");
  if (!lua_checkstack(d->L, 4)) return dec_nomem(d);
  d->depth++;
  d->p++;
  lua_createtable(d->L, 0, 0);
  return 0;
}

/* At the container's closing byte: step over it and leave the container (1). */
static int dec_close(jdec *d, char close) {
  if (d->p == d->end || *d->p != close) return 0;
  d->p++;
  d->depth--;
  return 1;
}

/* After a member: 1 for ',' (another follows), 0 at the closing byte (the
 * container is done), -1 for anything else (expected says what). */
static int dec_next(jdec *d, char close, const char *expected) {
  skip_ws(d);
  if (d->p < d->end && *d->p == ',') {
    d->p++;
    return 1;
  }
  if (dec_close(d, close)) return 0;
  return dec_fail(d, d->p, expected);
}

static int dec_array(jdec *d) {
  lua_State *L = d->L;
  if (dec_open(d)) return -1;
  lua_pushvalue(L, d->mt);
  lua_setmetatable(L, -2);
  skip_ws(d);
  if (dec_close(d, ']')) return 0;
  for (lua_Integer i = 1;; i++) {
    if (dec_value(d)) return -1;
    lua_rawseti(L, -2, i);
    int more = dec_next(d, ']', "expected ',' or ']'");
    if (more <= 0) return more;
  }
}

static int dec_object(jdec *d) {
  lua_State *L = d->L;
  if (dec_open(d)) return -1;
  skip_ws(d);
  if (dec_close(d, '}')) return 0;
  for (int first = 1;; first = 0) {
    skip_ws(d);
    if (d->p == d->end || *d->p != '"')
      return dec_fail(d, d->p, first ? "expected a string key or '}'" : "expected a string key");
    if (dec_string(d)) return -1;
    skip_ws(d);
    if (d->p == d->end || *d->p != ':') return dec_fail(d, d->p, "expected ':'");
    d->p++;
    if (dec_value(d)) return -1;
    lua_rawset(L, -3); /* duplicate keys: the last one wins */
    int more = dec_next(d, '}', "expected ',' or '}'");
    if (more <= 0) return more;
  }
}

static int dec_literal(jdec *d, const char *word, size_t n) {
  if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0)
    return dec_fail(d, d->p, "expected a value");
  d->p += n;
  return 0;
}

static int dec_value(jdec *d) {
  skip_ws(d);
  if (d->p == d->end) return dec_fail(d, d->p, "expected a value");
  switch (*d->p) {
    case '{':
      return dec_object(d);
    case '[':
      return dec_array(d);
    case '"':
      return dec_string(d);
    case 't':
      if (dec_literal(d, "true", 4)) return -1;
      lua_pushboolean(d->L, 1);
      return 0;
    case 'f':
      if (dec_literal(d, "false", 5)) return -1;
      lua_pushboolean(d->L, 0);
      return 0;
    case 'n':
      if (dec_literal(d, "null", 4)) return -1;
      lua_pushlightuserdata(d->L, NULL);
      return 0;
    default:
      if (*d->p == '-' || IS_DIGIT(*d->p)) return dec_number(d);
      return dec_fail(d, d->p, "expected a value");
  }
}

int moor_json_decode(lua_State *L, const char *s, size_t len) {
  jdec d;
  int base = lua_gettop(L);
  if (!lua_checkstack(L, 8)) {
    if (lua_checkstack(L, 1)) lua_pushliteral(L, "out of memory (Lua stack)");
    return MOOR_ENOMEM;
  }
  if (!s) len = 0;
  d.L = L;
  d.s = d.p = s ? s : "";
  d.end = d.s + len;
  d.sc = scratch_acquire(L);      /* base + 1 */
  lua_getiuservalue(L, base + 1, 1); /* the array metatable, base + 2 */
  d.mt = base + 2;
  d.depth = 0;
  d.rc = 0;
  d.err = NULL;
  int rc = dec_value(&d);
  if (rc == 0) {
    skip_ws(&d);
    if (d.p != d.end) rc = dec_fail(&d, d.p, "expected end of text");
  }
  scratch_release(L, d.sc);
  if (rc == 0) {
    lua_replace(L, base + 1);
    lua_settop(L, base + 1);
    return 0;
  }
  lua_settop(L, base);
  if (d.rc == MOOR_ENOMEM) lua_pushliteral(L, "out of memory decoding JSON");
  else
    lua_pushfstring(L, "invalid JSON at byte %I: %s%s", (lua_Integer)d.erroff, d.err,
                    d.erroff == len ? " but the text ended" : "");
  return d.rc;
}

/* ---------------------------------------------------------------- module */

static int l_encode(lua_State *L) {
  luaL_checkany(L, 1);
  lua_Integer max = luaL_optinteger(L, 2, 0);
  const char *root = luaL_optstring(L, 3, NULL);
  const char *kind = NULL;
  luaL_argcheck(L, max >= 0, 2, "maxbytes must be >= 0");
  lua_settop(L, 3);
  if (moor_json_encode(L, 1, (size_t)max, root, &kind) == 0) return 1;
  lua_pushnil(L);
  lua_insert(L, -2);
  lua_pushstring(L, kind);
  return 3;
}

static int l_decode(lua_State *L) {
  size_t len;
  luaL_checktype(L, 1, LUA_TSTRING);
  const char *s = lua_tolstring(L, 1, &len);
  if (moor_json_decode(L, s, len) == 0) return 1;
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

static int l_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
  }
  push_array_mt(L);
  if (lua_getmetatable(L, 1)) { /* never silently replace someone else's metatable */
    luaL_argcheck(L, lua_rawequal(L, -1, -2), 1, "table already has a metatable");
    lua_pop(L, 1);
  }
  lua_setmetatable(L, 1);
  return 1;
}

static int l_isarray(lua_State *L) {
  int r = 0;
  if (lua_type(L, 1) == LUA_TTABLE && lua_getmetatable(L, 1)) {
    push_array_mt(L);
    r = lua_rawequal(L, -1, -2);
  }
  lua_pushboolean(L, r);
  return 1;
}

int luaopen_moor_json(lua_State *L) {
  static const luaL_Reg fns[] = {{"encode", l_encode},
                                 {"decode", l_decode},
                                 {"array", l_array},
                                 {"isarray", l_isarray},
                                 {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  push_array_mt(L);
  lua_setfield(L, -2, "array_mt");
  return 1;
}
