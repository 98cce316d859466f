/* moor.core's OS helpers: directory listings (the agent loader), hashes
 * (FNV-1a for a tool's source, SHA-256 for approvals), the kernel's random
 * bytes, the process id, and the few file-system calls Lua lacks (the
 * harness agents' directories: mkdir, chmod, rmdir, realpath). */
#include "host.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* listdir(dir) -> sorted names (no dot entries) | nil, err */
static int l_listdir(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  DIR *d = opendir(dir);
  if (!d) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", dir, strerror(errno));
    return 2;
  }
  /* Collect into a Lua table first (Lua owns the memory), then sort. */
  lua_newtable(L);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -2, ++n);
  }
  closedir(d);
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "sort");
  lua_pushvalue(L, -3);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
  return 1;
}

static const char HEX[] = "0123456789abcdef";

/* hash(s) -> 16 hex digits of FNV-1a 64: identifies a tool's source text. */
static int l_hash(lua_State *L) {
  size_t len;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &len);
  unsigned long long h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= s[i];
    h *= 1099511628211ULL;
  }
  char out[17];
  for (int i = 15; i >= 0; i--, h >>= 4) out[i] = HEX[h & 15];
  lua_pushlstring(L, out, 16);
  return 1;
}

/* libcrypto is not linked but loaded at the first sha256 (as libcurl is,
 * curl_dl.h): a start that hashes nothing does not pay for its loading. */
#ifndef MOOR_CRYPTO_SONAME
#define MOOR_CRYPTO_SONAME "libcrypto.so.3"
#endif
static struct {
  int (*digest)(const void *data, size_t count, unsigned char *md, unsigned int *size, const EVP_MD *type,
                ENGINE *impl);
  const EVP_MD *(*sha256)(void);
  char why[400];
} crypto;
static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;

static void crypto_load(void) {
  void *h = dlopen(MOOR_CRYPTO_SONAME, RTLD_NOW | RTLD_LOCAL);
  void *d = h ? dlsym(h, "EVP_Digest") : NULL, *s = h ? dlsym(h, "EVP_sha256") : NULL;
  if (!d || !s) {
    const char *e = dlerror();
    snprintf(crypto.why, sizeof crypto.why, "libcrypto could not be loaded: %s", e ? e : MOOR_CRYPTO_SONAME);
    return;
  }
  /* (POSIX: a function pointer is a void *'s size; ISO C has no cast between them) */
  memcpy(&crypto.digest, &d, sizeof d);
  memcpy(&crypto.sha256, &s, sizeof s);
}

/* sha256(s) -> 64 hex digits of SHA-256 (OpenSSL's libcrypto): binds an
 * approval to the exact input it shows. */
static int l_sha256(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  pthread_once(&crypto_once, crypto_load);
  if (!crypto.digest) return luaL_error(L, "sha256: %s", crypto.why);
  if (crypto.digest(s, len, md, &mdlen, crypto.sha256(), NULL) != 1 || mdlen != 32)
    return luaL_error(L, "sha256: libcrypto failed");
  char out[64];
  for (unsigned int i = 0; i < 32; i++) {
    out[2 * i] = HEX[md[i] >> 4];
    out[2 * i + 1] = HEX[md[i] & 15];
  }
  lua_pushlstring(L, out, 64);
  return 1;
}

/* random_bytes(n) -> n bytes from the kernel's CSPRNG (ids, tokens, seeds). */
static int l_random_bytes(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n > 0 && n <= 256, 1, "1..256");
  unsigned char buf[256];
  size_t got = 0;
  while (got < (size_t)n) {
    ssize_t r = getrandom(buf + got, (size_t)n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return luaL_error(L, "getrandom: %s", strerror(errno));
    }
    got += (size_t)r;
  }
  lua_pushlstring(L, (const char *)buf, (size_t)n);
  return 1;
}

static int l_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

/* true, or nil and "<path>: <strerror>" (and the errno name's number) */
static int fs_result(lua_State *L, int rc, const char *path) {
  if (rc == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  int e = errno;
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", path, strerror(e));
  lua_pushinteger(L, e);
  return 3;
}

/* mkdir(path, mode) -> true | nil, err, errno (mode as given: no umask) */
static int l_mkdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  mode_t mode = (mode_t)luaL_checkinteger(L, 2);
  if (mkdir(path, mode) != 0) return fs_result(L, -1, path);
  return fs_result(L, chmod(path, mode), path);
}

/* chmod(path, mode) -> true | nil, err, errno */
static int l_chmod(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  return fs_result(L, chmod(path, (mode_t)luaL_checkinteger(L, 2)), path);
}

/* rmdir(path) -> true | nil, err, errno */
static int l_rmdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  return fs_result(L, rmdir(path), path);
}

/* realpath(path) -> the absolute path | nil, err */
static int l_realpath(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  char buf[PATH_MAX];
  if (!realpath(path, buf)) return fs_result(L, -1, path);
  lua_pushstring(L, buf);
  return 1;
}

const luaL_Reg moor__core_os_fns[] = {
  {"mkdir", l_mkdir}, {"chmod", l_chmod}, {"rmdir", l_rmdir}, {"realpath", l_realpath},
  {"listdir", l_listdir}, {"hash", l_hash}, {"sha256", l_sha256}, {"random_bytes", l_random_bytes},
  {"getpid", l_getpid}, {NULL, NULL}};
