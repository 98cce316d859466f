/* Precompiled Lua for moor's own modules (every .lua under lua/moor): a bundle of
 * bytecode built with the program, so a start does not parse them again.
 *
 * The bundle (moor.luab; written at build time by this file's main, built
 * as the moor_luab tool with MOOR_LUAB_MAIN):
 *
 *   moor-luab 1 LUA\n                                         LUA: the Lua library's id (lua_id)
 *   NAME KEY SIZE MTIME_SEC MTIME_NSEC OFFSET LENGTH\n      one line a module
 *   \n
 *   the chunks (lua_dump with the debug information kept), at OFFSET from
 *   the byte after the blank line
 *
 * NAME is the module ("moor.engine"), KEY its file under the Lua directory
 * ("moor/engine/init.lua"), SIZE and MTIME the source's when it was
 * compiled. The host replaces package.searchers[2] (Lua's own searcher of
 * package.path) with one that finds the file exactly as Lua's does
 * (package.searchpath over package.path) and then uses the module's chunk
 * only when the file found ends in /KEY and still has that size and
 * modification time (to the nanosecond); anything else (an edited file,
 * another tree's, a file the bundle does not know, a chunk this Lua cannot
 * load) is loaded from source as before, with Lua's own error messages. So
 * a developer's edit takes effect without a rebuild, and the bundle is a
 * cache, never a source of truth.
 *
 * A chunk names the file it was compiled from as "@KEY"; loading splices
 * in "@<the file found>", what loading the source would have named it, so
 * errors and tracebacks keep their file:line. (In Lua 5.4's dump the main
 * function's source is the one string after the 31-byte header and the
 * upvalue count; nested functions inherit it. Both the writer and the
 * reader check that it is there.) */
#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LUAB_MAGIC "moor-luab 1 "

/* The Lua library's identity (its version and release, lua_ident), as a
 * 64-bit FNV-1a: a bundle written by another release of liblua (its
 * bytecode may differ within 5.4) is not used. */
static unsigned long long lua_id(void) {
  unsigned long long h = 1469598103934665603ULL;
  for (const char *p = lua_ident; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  return h;
}
#define LUAB_SOURCE_AT 32 /* the header (31 bytes) and the upvalue count */

/* The chunk's source string at LUAB_SOURCE_AT: 0 with *str, *len (the
 * string) and *end (the offset after it), or -1. */
static int chunk_source(const char *chunk, size_t n, const char **str, size_t *len, size_t *end) {
  size_t i = LUAB_SOURCE_AT, x = 0;
  int b;
  do {
    if (i >= n || x > ((size_t)-1 >> 8)) return -1;
    b = (unsigned char)chunk[i++];
    x = (x << 7) | (size_t)(b & 0x7f);
  } while (!(b & 0x80));
  if (x == 0 || x - 1 > n - i) return -1; /* no source (a stripped chunk), or past the end */
  *str = chunk + i, *len = x - 1, *end = i + x - 1;
  return 0;
}

#ifndef MOOR_LUAB_MAIN

/* Lua's dump of a size (dumpSize): 7 bits a byte, most significant first,
 * the last byte marked. Returns the bytes written to out (>= 10 bytes). */
static size_t encode_size(size_t x, char *out) {
  char buf[16];
  size_t n = 0;
  do {
    buf[sizeof buf - ++n] = (char)(x & 0x7f);
    x >>= 7;
  } while (x);
  buf[sizeof buf - 1] |= (char)0x80;
  memcpy(out, buf + sizeof buf - n, n);
  return n;
}

typedef struct luab_entry {
  const char *name, *key; /* in the map, not terminated */
  size_t name_len, key_len;
  long long size, sec, nsec;
  const char *chunk;
  size_t len;
} luab_entry;

typedef struct luab {
  void *map;
  size_t map_len;
  luab_entry *e;
  int n;
  int loaded, stale; /* modules loaded from the bundle; found there but loaded from source */
  int trace;         /* $MOOR_TRACE_START: a line on stderr for each module it has */
} luab;

static void luab_free(luab *b) {
  free(b->e);
  b->e = NULL;
  b->n = 0;
  if (b->map) munmap(b->map, b->map_len);
  b->map = NULL;
}

static int luab_gc(lua_State *L) {
  luab_free(lua_touserdata(L, 1));
  return 0;
}

static const char *parse_word(const char *p, const char *end, const char **w, size_t *n) {
  const char *s = p;
  while (p < end && *p != ' ' && *p != '\n') p++;
  *w = s, *n = (size_t)(p - s);
  return p < end && *p == ' ' && *n ? p + 1 : NULL;
}

static const char *parse_num(const char *p, const char *end, long long *v, char stop) {
  long long x = 0;
  const char *s = p;
  while (p < end && *p >= '0' && *p <= '9' && x < (1LL << 58)) x = x * 10 + (*p++ - '0');
  if (p == s || p >= end || *p != stop) return NULL;
  *v = x;
  return p + 1;
}

/* Read the index of the mapped bundle; 0 or -1 (malformed: not used). */
static int luab_parse(luab *b) {
  const char *p = b->map, *end = p + b->map_len;
  size_t ml = sizeof LUAB_MAGIC - 1;
  char id[32];
  int idlen = snprintf(id, sizeof id, "%016llx\n", lua_id());
  if (b->map_len < ml + (size_t)idlen || memcmp(p, LUAB_MAGIC, ml) || memcmp(p + ml, id, (size_t)idlen)) return -1;
  p += ml + (size_t)idlen;
  int cap = 0;
  while (p < end && *p != '\n') {
    luab_entry e;
    long long off, len;
    if (!(p = parse_word(p, end, &e.name, &e.name_len)) || !(p = parse_word(p, end, &e.key, &e.key_len)) ||
        !(p = parse_num(p, end, &e.size, ' ')) || !(p = parse_num(p, end, &e.sec, ' ')) ||
        !(p = parse_num(p, end, &e.nsec, ' ')) || !(p = parse_num(p, end, &off, ' ')) ||
        !(p = parse_num(p, end, &len, '\n')))
      return -1;
    e.chunk = (const char *)(intptr_t)off; /* (an offset until the blank line is found) */
    e.len = (size_t)len;
    if (b->n == cap) {
      cap = cap ? cap * 2 : 128;
      luab_entry *ne = realloc(b->e, (size_t)cap * sizeof *ne);
      if (!ne) return -1;
      b->e = ne;
    }
    b->e[b->n++] = e;
  }
  if (p >= end) return -1;
  p++; /* the blank line */
  size_t blob = (size_t)(end - p);
  for (int i = 0; i < b->n; i++) {
    size_t off = (size_t)(intptr_t)b->e[i].chunk;
    if (off > blob || b->e[i].len > blob - off) return -1;
    b->e[i].chunk = p + off;
  }
  return 0;
}

typedef struct luab_splice {
  const char *part[3];
  size_t len[3];
  int i;
} luab_splice;

static const char *splice_read(lua_State *L, void *ud, size_t *size) {
  (void)L;
  luab_splice *s = ud;
  while (s->i < 3 && !s->len[s->i]) s->i++;
  if (s->i >= 3) return *size = 0, NULL;
  *size = s->len[s->i];
  return s->part[s->i++];
}

/* Load e's chunk as the module in file: LUA_OK with the function pushed,
 * or not (nothing pushed) when its file is not what it was compiled from or
 * this Lua refuses it. */
static int load_chunk(lua_State *L, const luab_entry *e, const char *file) {
  size_t flen = strlen(file);
  if (flen <= e->key_len || file[flen - e->key_len - 1] != '/' ||
      memcmp(file + flen - e->key_len, e->key, e->key_len))
    return LUA_ERRFILE;
  struct stat st;
  if (stat(file, &st) || (long long)st.st_size != e->size || (long long)st.st_mtim.tv_sec != e->sec ||
      (long long)st.st_mtim.tv_nsec != e->nsec)
    return LUA_ERRFILE;
  const char *src;
  size_t srclen, after;
  if (chunk_source(e->chunk, e->len, &src, &srclen, &after) || srclen != e->key_len + 1 || src[0] != '@' ||
      memcmp(src + 1, e->key, e->key_len))
    return LUA_ERRFILE;
  char name[PATH_MAX + 32];
  if (flen + 1 > PATH_MAX) return LUA_ERRFILE;
  size_t n = encode_size(flen + 2, name); /* "@" + file, plus one: Lua's dumpString */
  name[n++] = '@';
  memcpy(name + n, file, flen);
  n += flen;
  luab_splice s = {{e->chunk, name, e->chunk + after}, {LUAB_SOURCE_AT, n, e->len - after}, 0};
  int rc = lua_load(L, splice_read, &s, file, "b");
  if (rc != LUA_OK) lua_pop(L, 1);
  return rc;
}

/* Push name's chunk from b as the code of file, and 1; or 0, nothing
 * pushed, when b has none or file is not what it was compiled from. */
static int luab_load(lua_State *L, luab *b, const char *name, const char *file) {
  size_t nlen = strlen(name);
  for (int i = 0; i < b->n && b->map; i++) {
    const luab_entry *e = &b->e[i];
    if (e->name_len != nlen || memcmp(e->name, name, nlen)) continue;
    if (load_chunk(L, e, file) == LUA_OK) {
      b->loaded++;
      if (b->trace) fprintf(stderr, "moor-trace-luab %s bytecode\n", name);
      return 1;
    }
    b->stale++;
    if (b->trace) fprintf(stderr, "moor-trace-luab %s source (%s is not what was compiled)\n", name, file);
    return 0;
  }
  return 0;
}

/* core.precompiled(name, file) -> the function of name's chunk as the code
 * of file, or nil (no bundle, no such chunk, file changed): the loader's
 * built-in tools (moor.tools.<name>), which it loads by file. */
static int l_precompiled(lua_State *L) {
  const char *name = luaL_checkstring(L, 1), *file = luaL_checkstring(L, 2);
  lua_getfield(L, LUA_REGISTRYINDEX, "moor.luab");
  luab *b = lua_touserdata(L, -1);
  lua_pop(L, 1); /* (the registry holds it) */
  if (b && luab_load(L, b, name, file)) return 1;
  lua_pushnil(L);
  return 1;
}

const luaL_Reg moor__core_luab_fns[] = {{"precompiled", l_precompiled}, {NULL, NULL}};

/* package.searchers[2]: Lua's searcher_Lua (the same search, the same
 * results and messages), taking the bundle's chunk when it is current.
 * Upvalues: the bundle, the package table, package.searchpath. */
static int searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luab *b = lua_touserdata(L, lua_upvalueindex(1));
  lua_getfield(L, lua_upvalueindex(2), "path");
  if (!lua_isstring(L, -1)) return luaL_error(L, "'package.path' must be a string");
  lua_pushvalue(L, lua_upvalueindex(3));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -3);
  lua_call(L, 2, 2);
  if (lua_isnil(L, -2)) return 1; /* not found: searchpath's message */
  lua_pop(L, 1);
  const char *file = lua_tostring(L, -1);
  if (luab_load(L, b, name, file)) {
    lua_pushstring(L, file); /* the module's second argument, as Lua's searcher gives */
    return 2;
  }
  if (luaL_loadfile(L, file) == LUA_OK) {
    lua_pushstring(L, file);
    return 2;
  }
  return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, file, lua_tostring(L, -1));
}

int moor__luab_install(lua_State *L, const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return MOOR_ENOTFOUND;
  struct stat st;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size > 0)
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return MOOR_EIO;
  luab *b = lua_newuserdatauv(L, sizeof *b, 0);
  memset(b, 0, sizeof *b);
  b->map = map, b->map_len = (size_t)st.st_size;
  const char *t = getenv("MOOR_TRACE_START");
  b->trace = t && *t && strcmp(t, "0");
  lua_newtable(L);
  lua_pushcfunction(L, luab_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  if (luab_parse(b)) {
    luab_free(b);
    lua_pop(L, 1);
    return MOOR_EINVAL;
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "moor.luab");
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchers");
  lua_getfield(L, -2, "searchpath");
  if (!lua_istable(L, -3) || !lua_istable(L, -2) || !lua_isfunction(L, -1)) {
    lua_pop(L, 4);
    return MOOR_EINVAL;
  }
  /* stack: bundle, package, searchers, searchpath */
  lua_pushvalue(L, -4);
  lua_pushvalue(L, -4);
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, searcher, 3);
  lua_rawseti(L, -3, 2);
  lua_pop(L, 4);
  return 0;
}

void moor__luab_counts(lua_State *L, int *loaded, int *stale) {
  *loaded = *stale = 0;
  lua_getfield(L, LUA_REGISTRYINDEX, "moor.luab");
  luab *b = lua_touserdata(L, -1);
  if (b) *loaded = b->loaded, *stale = b->stale;
  lua_pop(L, 1);
}

#else /* MOOR_LUAB_MAIN: the build's tool */

/*   moor_luab OUT LUA_DIR FILE...: the bundle of each FILE under LUA_DIR
 *   (or NAME:KEY=FILE: moor's built-in tools, whose tools/ is not under it). */

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static int buf_add(buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) return -1;
    b->p = np, b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  return 0;
}

static int dump_writer(lua_State *L, const void *p, size_t n, void *ud) {
  (void)L;
  return buf_add(ud, p, n);
}

static int fail(const char *what, const char *file) {
  fprintf(stderr, "moor_luab: %s: %s\n", file, what);
  return 1;
}

/* Read the whole of file (the size and time it had before and after). */
static int read_source(const char *file, buf *src, struct stat *st) {
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(strerror(errno), file);
  if (fstat(fd, st)) return close(fd), fail(strerror(errno), file);
  char chunk[65536];
  ssize_t r;
  while ((r = read(fd, chunk, sizeof chunk)) > 0)
    if (buf_add(src, chunk, (size_t)r)) return close(fd), fail("out of memory", file);
  struct stat after;
  int bad = r < 0 || fstat(fd, &after) || after.st_size != st->st_size ||
            after.st_mtim.tv_sec != st->st_mtim.tv_sec || after.st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
            (off_t)src->n != st->st_size;
  close(fd);
  return bad ? fail("changed while it was read (build again)", file) : 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: moor_luab OUT LUA_DIR FILE...\n");
    return 2;
  }
  const char *out = argv[1], *root = argv[2];
  size_t rlen = strlen(root);
  buf index = {0}, blob = {0};
  char id[32];
  int idlen = snprintf(id, sizeof id, "%016llx\n", lua_id());
  int rc = buf_add(&index, LUAB_MAGIC, sizeof LUAB_MAGIC - 1) || buf_add(&index, id, (size_t)idlen)
               ? fail("out of memory", out)
               : 0;
  lua_State *L = luaL_newstate();
  if (!L) rc = fail("cannot create a Lua state", out);
  for (int i = 3; i < argc && !rc; i++) {
    /* FILE under LUA_DIR (its key the path below it, its name the module's:
     * moor/engine/init.lua -> moor.engine), or NAME:KEY=FILE, both given. */
    char name[PATH_MAX], keybuf[PATH_MAX];
    const char *file = argv[i], *key, *eq = strchr(argv[i], '='), *colon = strchr(argv[i], ':');
    if (eq && colon && colon < eq) {
      snprintf(name, sizeof name, "%.*s", (int)(colon - argv[i]), argv[i]);
      snprintf(keybuf, sizeof keybuf, "%.*s", (int)(eq - colon - 1), colon + 1);
      key = keybuf, file = eq + 1;
    } else {
      if (strncmp(file, root, rlen) || file[rlen] != '/') {
        rc = fail("is not under the Lua directory", file);
        break;
      }
      key = file + rlen + 1;
      size_t nlen = strlen(key) - (strlen(key) >= 4 ? 4 : 0);
      snprintf(name, sizeof name, "%.*s", (int)nlen, key);
      if (nlen > 5 && !strcmp(name + nlen - 5, "/init")) name[nlen - 5] = 0;
      for (char *c = name; *c; c++)
        if (*c == '/') *c = '.';
    }
    size_t klen = strlen(key);
    if (klen < 5 || strcmp(key + klen - 4, ".lua") || strpbrk(key, " \n") || !*name || strpbrk(name, " \n")) {
      rc = fail("is not a .lua file with a plain name", file);
      break;
    }
    buf src = {0}, chunk = {0};
    struct stat st;
    if ((rc = read_source(file, &src, &st))) break;
    char chunkname[PATH_MAX + 2];
    snprintf(chunkname, sizeof chunkname, "@%s", key);
    if (luaL_loadbufferx(L, src.p ? src.p : "", src.n, chunkname, "t") != LUA_OK) {
      rc = fail(lua_tostring(L, -1), file);
    } else if (lua_dump(L, dump_writer, &chunk, 0) || !chunk.p) {
      rc = fail("cannot dump the chunk", file);
    } else {
      const char *s;
      size_t slen, end;
      if (chunk_source(chunk.p, chunk.n, &s, &slen, &end) || slen != strlen(chunkname) || memcmp(s, chunkname, slen))
        rc = fail("this Lua's dump does not have its source name where host/luab.c reads it", file);
    }
    lua_settop(L, 0);
    if (!rc) {
      char line[PATH_MAX * 2 + 128];
      int n = snprintf(line, sizeof line, "%s %s %lld %lld %lld %zu %zu\n", name, key, (long long)st.st_size,
                       (long long)st.st_mtim.tv_sec, (long long)st.st_mtim.tv_nsec, blob.n, chunk.n);
      if (n < 0 || (size_t)n >= sizeof line || buf_add(&index, line, (size_t)n) || buf_add(&blob, chunk.p, chunk.n))
        rc = fail("out of memory", file);
    }
    free(src.p);
    free(chunk.p);
  }
  if (L) lua_close(L);
  if (!rc && buf_add(&index, "\n", 1)) rc = fail("out of memory", out);
  if (!rc) {
    /* Written beside and renamed: a running moor keeps the bundle it mapped. */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
      rc = fail(strerror(errno), tmp);
    } else {
      int bad = fwrite(index.p, 1, index.n, f) != index.n || (blob.n && fwrite(blob.p, 1, blob.n, f) != blob.n);
      if (fclose(f) || bad || rename(tmp, out)) rc = fail(strerror(errno), tmp);
    }
  }
  free(index.p);
  free(blob.p);
  return rc;
}

#endif
