/* Regular expressions for JSON Schema `pattern` (ECMA-262 dialect) on PCRE2.
 *
 *   local re, err = core.regex_compile(pattern)
 *     -> a compiled pattern, or nil, "<PCRE2's message> at offset N" (N counts
 *        bytes of `pattern` from 0).
 *   re:test(subject) -> true | false, or nil, "too costly to check" when the
 *     match hit a limit (match steps, depth, heap or JIT stack), so a hostile
 *     pattern or subject costs at most a few milliseconds of the loop.
 *   re:exec(subject) -> first, last (1-based, inclusive, as string.find) | false,
 *     or nil, err as test.
 *
 * Patterns are searched, not anchored (JSON Schema). ECMA-262 semantics come
 * from PCRE2's options: UTF (characters, not bytes), ALT_BSUX + EXTRA_ALT_BSUX
 * (\xhh, \uhhhh and \u{h...} as in JavaScript), DOLLAR_ENDONLY ($ only at the
 * very end), MATCH_UNSET_BACKREF (a backreference to an unset group matches
 * empty), ALLOW_EMPTY_CLASS ([] matches nothing, [^] any character), NEVER_UCP
 * (\d \w \b are ASCII), MATCH_INVALID_UTF (invalid UTF-8 in a subject never
 * matches instead of failing the call). What PCRE2 has no option for is
 * rewritten before compiling (translate()): `.` excludes exactly \n \r U+2028
 * U+2029, \s is JavaScript's white space (Unicode spaces and U+FEFF), \v is the
 * vertical tab, and a surrogate pair \uD83D\uDE00 is one character. PCRE2's own
 * extensions (inline flags, atomic groups, possessive quantifiers) are accepted.
 *
 * Each Lua state has one match context (the limits), one JIT stack and one
 * match block, kept in the registry; a compiled pattern holds a reference to
 * them (its user value), so they outlive every pattern. Single-threaded, as
 * the Lua state is. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moorconf.h"
#include "regex.h"

/* The limits on one match (MOOR_REGEX_*: the costs a schema check may spend on the loop) are in moorconf.h. */

#define ENV_MT "moor.regex.env"
#define RE_MT "moor.regex"

static const char ENV_KEY = 0; /* registry[&ENV_KEY]: this state's regex_env */

typedef struct {
  pcre2_compile_context *cctx;
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit_stack; /* NULL when PCRE2 has no JIT here */
  pcre2_match_data *md;       /* one ovector pair: where the match is */
} regex_env;

typedef struct {
  pcre2_code *code;
} regex_ud;

static int env_gc(lua_State *L) {
  regex_env *e = lua_touserdata(L, 1);
  pcre2_match_data_free(e->md);
  pcre2_jit_stack_free(e->jit_stack);
  pcre2_match_context_free(e->mctx);
  pcre2_compile_context_free(e->cctx);
  memset(e, 0, sizeof *e);
  return 0;
}

/* Push this state's environment, creating it on first use. */
static regex_env *push_env(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &ENV_KEY) == LUA_TUSERDATA) return lua_touserdata(L, -1);
  lua_pop(L, 1);
  regex_env *e = lua_newuserdatauv(L, sizeof *e, 0);
  memset(e, 0, sizeof *e);
  if (luaL_newmetatable(L, ENV_MT)) {
    lua_pushcfunction(L, env_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  e->cctx = pcre2_compile_context_create(NULL);
  e->mctx = pcre2_match_context_create(NULL);
  e->md = pcre2_match_data_create(1, NULL);
  if (!e->cctx || !e->mctx || !e->md) {
    luaL_error(L, "regex: out of memory");
    return NULL;
  }
  pcre2_set_compile_extra_options(e->cctx, PCRE2_EXTRA_ALT_BSUX);
  pcre2_set_match_limit(e->mctx, MOOR_REGEX_MATCH_LIMIT);
  pcre2_set_depth_limit(e->mctx, MOOR_REGEX_DEPTH_LIMIT);
  pcre2_set_heap_limit(e->mctx, MOOR_REGEX_HEAP_LIMIT_KIB);
  uint32_t jit = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &jit);
  if (jit) {
    e->jit_stack = pcre2_jit_stack_create(32 * 1024, MOOR_REGEX_JIT_STACK_MAX, NULL);
    if (!e->jit_stack) {
      luaL_error(L, "regex: out of memory");
      return NULL;
    }
    pcre2_jit_stack_assign(e->mctx, NULL, e->jit_stack);
  }
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &ENV_KEY);
  return e;
}

/* ---- ECMA-262 -> PCRE2 rewriting -------------------------------------- */

typedef struct {
  char *s;
  size_t *from; /* from[i]: the offset in the source pattern of out byte i */
  size_t len, cap;
} out_buf;

/* Append n bytes that stand for the source from offset `from`: copied
 * (verbatim, byte i is source byte from + i) or a rewriting of one item. */
static int out_put_as(out_buf *o, const char *s, size_t n, size_t from, int verbatim) {
  if (o->len + n + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 64;
    while (cap < o->len + n + 1) cap *= 2;
    char *ns = realloc(o->s, cap);
    if (!ns) return -1;
    o->s = ns;
    size_t *nf = realloc(o->from, cap * sizeof *nf);
    if (!nf) return -1;
    o->from = nf;
    o->cap = cap;
  }
  memcpy(o->s + o->len, s, n);
  for (size_t i = 0; i < n; i++) o->from[o->len + i] = verbatim ? from + i : from;
  o->len += n;
  o->s[o->len] = '\0';
  o->from[o->len] = verbatim ? from + n : from + 1;
  return 0;
}

#define out_put(o, s, n, from) out_put_as(o, s, n, from, 0)
#define out_copy(o, p, n, from) out_put_as(o, (p) + (from), n, from, 1)

static int hex4(const char *p, size_t n, unsigned *v) {
  if (n < 4) return 0;
  unsigned x = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    x <<= 4;
    if (c >= '0' && c <= '9') x |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') x |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') x |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  *v = x;
  return 1;
}

/* JavaScript's WhiteSpace and LineTerminator, written as class members. */
#define JS_SPACE "\\t\\n\\x0b\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
#define JS_DOT "[^\\n\\r\\u2028\\u2029]"

/* Rewrite what PCRE2 has no option for (see the head comment). The escape
 * \S inside a class ([^\S]) becomes PCRE2's \P{Xsp}, which differs from
 * JavaScript only in counting U+FEFF as non-space. */
static int is_class_escape(const char *p, size_t n, size_t i) {
  return i + 1 < n && p[i] == '\\' && p[i + 1] != '\0' && strchr("dDwWsS", p[i + 1]);
}

static int translate(const char *p, size_t n, out_buf *o) {
  int in_class = 0;
  int after_set = 0; /* the last item in this class was \d \D \w \W \s or \S */
  size_t i = 0;
  while (i < n) {
    char c = p[i];
    size_t at = i;
    int rc = 0;
    int was_set = after_set;
    after_set = in_class && is_class_escape(p, n, i);
    if (in_class && c == '-' && i + 1 < n && p[i + 1] != ']' && (was_set || is_class_escape(p, n, i + 1))) {
      /* [\d-z] or [a-\w]: JavaScript reads a literal -, PCRE2 an invalid range */
      rc = out_put(o, "\\-", 2, at);
      i++;
    } else if (c == '\\' && i + 1 < n) {
      char d = p[i + 1];
      unsigned hi, lo;
      if (d == 'u' && hex4(p + i + 2, n - i - 2, &hi) && hi >= 0xD800 && hi <= 0xDBFF &&
          i + 7 < n && p[i + 6] == '\\' && p[i + 7] == 'u' && hex4(p + i + 8, n - i - 8, &lo) &&
          lo >= 0xDC00 && lo <= 0xDFFF) {
        char buf[16];
        unsigned cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
        int k = snprintf(buf, sizeof buf, "\\u{%x}", cp);
        rc = out_put(o, buf, (size_t)k, at);
        i += 12;
      } else if (d == 's') {
        rc = in_class ? out_put(o, JS_SPACE, sizeof JS_SPACE - 1, at)
                      : out_put(o, "[" JS_SPACE "]", sizeof JS_SPACE + 1, at);
        i += 2;
      } else if (d == 'S') {
        rc = in_class ? out_put(o, "\\P{Xsp}", 7, at) : out_put(o, "[^" JS_SPACE "]", sizeof JS_SPACE + 2, at);
        i += 2;
      } else if (d == 'v') {
        rc = out_put(o, "\\x0b", 4, at);
        i += 2;
      } else {
        rc = out_copy(o, p, 2, at);
        i += 2;
      }
    } else if (in_class) {
      if (c == ']') in_class = 0;
      /* [ inside a class is a literal in JavaScript; PCRE2 would read [: as a POSIX class */
      rc = c == '[' ? out_put(o, "\\[", 2, at) : out_copy(o, p, 1, at);
      i++;
    } else if (c == '[') {
      in_class = 1;
      size_t k = (i + 1 < n && p[i + 1] == '^') ? 2 : 1;
      rc = out_copy(o, p, k, at);
      i += k;
      if (i < n && p[i] == ']') { /* [] or [^]: ends at once (ALLOW_EMPTY_CLASS) */
        rc = rc ? rc : out_copy(o, p, 1, i);
        in_class = 0;
        i++;
      }
    } else if (c == '.') {
      rc = out_put(o, JS_DOT, sizeof JS_DOT - 1, at);
      i++;
    } else {
      rc = out_copy(o, p, 1, at);
      i++;
    }
    if (rc) return -1;
  }
  return out_copy(o, p, 0, n);
}

/* ---- Lua API ----------------------------------------------------------- */

static int re_gc(lua_State *L) {
  regex_ud *r = luaL_checkudata(L, 1, RE_MT);
  pcre2_code_free(r->code);
  r->code = NULL;
  return 0;
}

/* Run re on the subject at 2: >= 0 matched (ovector in the env's block),
 * PCRE2_ERROR_NOMATCH, or pushes nil, err and returns the count to return. */
static int run(lua_State *L, regex_env **env, int *nret) {
  regex_ud *r = luaL_checkudata(L, 1, RE_MT);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  if (!r->code) return luaL_error(L, "regex: pattern already freed");
  lua_getiuservalue(L, 1, 1);
  regex_env *e = lua_touserdata(L, -1);
  lua_pop(L, 1); /* the pattern (at 1) keeps it alive */
  int rc = pcre2_match(r->code, (PCRE2_SPTR)s, len, 0, 0, e->md, e->mctx);
  *env = e;
  if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) return rc;
  lua_pushnil(L);
  switch (rc) {
  case PCRE2_ERROR_MATCHLIMIT:
  case PCRE2_ERROR_DEPTHLIMIT:
  case PCRE2_ERROR_HEAPLIMIT:
  case PCRE2_ERROR_JIT_STACKLIMIT:
  case PCRE2_ERROR_NOMEMORY:
    lua_pushliteral(L, "too costly to check");
    break;
  default: {
    PCRE2_UCHAR msg[256];
    if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown PCRE2 error");
    lua_pushstring(L, (const char *)msg);
  }
  }
  *nret = 2;
  return rc;
}

static int re_test(lua_State *L) {
  regex_env *e;
  int nret = 0;
  int rc = run(L, &e, &nret);
  if (nret) return nret;
  lua_pushboolean(L, rc >= 0);
  return 1;
}

static int re_exec(lua_State *L) {
  regex_env *e;
  int nret = 0;
  int rc = run(L, &e, &nret);
  if (nret) return nret;
  if (rc < 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
  lua_pushinteger(L, (lua_Integer)ov[0] + 1);
  lua_pushinteger(L, (lua_Integer)ov[1]);
  return 2;
}

int moor__regex_compile(lua_State *L) {
  size_t n;
  const char *p = luaL_checklstring(L, 1, &n);
  regex_env *e = push_env(L);
  int env = lua_gettop(L);
  /* The userdata first, so nothing can raise while PCRE2 memory has no owner. */
  regex_ud *r = lua_newuserdatauv(L, sizeof *r, 1);
  r->code = NULL;
  if (luaL_newmetatable(L, RE_MT)) {
    lua_pushcfunction(L, re_gc);
    lua_setfield(L, -2, "__gc");
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, re_test);
    lua_setfield(L, -2, "test");
    lua_pushcfunction(L, re_exec);
    lua_setfield(L, -2, "exec");
    lua_setfield(L, -2, "__index");
  }
  lua_setmetatable(L, -2);
  lua_pushvalue(L, env);
  lua_setiuservalue(L, -2, 1);
  out_buf o = {0};
  if (translate(p, n, &o) != 0) {
    free(o.s);
    free(o.from);
    return luaL_error(L, "regex: out of memory");
  }
  int err = 0;
  PCRE2_SIZE off = 0;
  const uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY |
                        PCRE2_MATCH_UNSET_BACKREF | PCRE2_ALLOW_EMPTY_CLASS | PCRE2_NEVER_UCP |
                        PCRE2_NEVER_BACKSLASH_C;
  pcre2_code *code = pcre2_compile((PCRE2_SPTR)o.s, o.len, opts, &err, &off, e->cctx);
  size_t src_off = off <= o.len ? o.from[off] : n;
  free(o.s);
  free(o.from);
  if (!code) {
    PCRE2_UCHAR msg[256];
    if (pcre2_get_error_message(err, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown PCRE2 error");
    lua_pushnil(L);
    lua_pushfstring(L, "%s at offset %d", (const char *)msg, (int)(src_off > n ? n : src_off));
    return 2;
  }
  /* JIT when the machine has it; a pattern JIT cannot take runs interpreted. */
  if (e->jit_stack) (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  r->code = code;
  return 1;
}
