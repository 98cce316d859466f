/* Where moor's own files are: the Lua side (lua/moor/...) and the launcher
 * moor-wfa, found from where the running code is. An installed moor finds
 * them relative to its prefix: from <prefix>/bin/moor (the running program,
 * /proc/self/exe), from <prefix>/lib/libmoor.so or from
 * <prefix>/lib/lua/5.4/moor/core.so (the object holding this code, dladdr),
 * with the relative paths CMake computed from the install layout
 * (MOOR_REL_LUA, MOOR_REL_WFA). A program running from the build tree
 * (under MOOR_BUILD_DIR) uses the source tree's lua/ and the build's
 * moor-wfa instead, so development needs no install; an installed program
 * never falls back to a path of the tree it was built in. Nothing here
 * depends on another host file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include "host.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MOOR_REL_LUA
#define MOOR_REL_LUA "../share/lua/5.4"
#endif
#ifndef MOOR_REL_WFA
#define MOOR_REL_WFA ".", "../libexec"
#endif

static const char *const REL_LUA[] = {MOOR_REL_LUA};
static const char *const REL_WFA[] = {".", MOOR_REL_WFA};

/* The directories the running code comes from: [0] the object holding this
 * code (libmoor.so, core.so, or the program itself), [1] the program. */
static const char anchor = 0; /* (an object's address: ISO C has no function-to-void* cast) */

static int self_dirs(char dirs[2][PATH_MAX]) {
  int n = 0;
  Dl_info info;
  char buf[PATH_MAX];
  if (dladdr(&anchor, &info) && info.dli_fname && realpath(info.dli_fname, buf)) {
    char *slash = strrchr(buf, '/');
    if (slash) {
      *slash = 0;
      snprintf(dirs[n++], PATH_MAX, "%s", buf[0] ? buf : "/");
    }
  }
  ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (len > 0) {
    buf[len] = 0;
    char *slash = strrchr(buf, '/');
    if (slash) {
      *slash = 0;
      if (!n || strcmp(dirs[0], buf)) snprintf(dirs[n++], PATH_MAX, "%s", buf[0] ? buf : "/");
    }
  }
  return n;
}

/* Is dir the build tree (MOOR_BUILD_DIR) or under it? */
static int in_build_tree(const char *dir) {
#ifdef MOOR_BUILD_DIR
  char build[PATH_MAX];
  if (!*MOOR_BUILD_DIR || !realpath(MOOR_BUILD_DIR, build)) return 0;
  size_t n = strlen(build);
  return !strncmp(dir, build, n) && (dir[n] == 0 || dir[n] == '/');
#else
  (void)dir;
  return 0;
#endif
}

/* The first <base>/<rel>/<probe> that exists, for each base of self_dirs
 * and each rel: out gets <base>/<rel> normalised (realpath). 0 or -1. */
static int find_from_self(const char *const *rels, size_t nrels, const char *probe, int mode, char *out,
                          size_t size, char tried[][PATH_MAX], int *ntried) {
  char dirs[2][PATH_MAX];
  int n = self_dirs(dirs);
  for (int i = 0; i < n; i++) {
    for (size_t j = 0; j < nrels; j++) {
      char path[PATH_MAX * 2 + 64], real[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s", dirs[i], rels[j]);
      if (realpath(path, real)) {
        snprintf(path, sizeof path, "%s/%s", real, probe);
        if (access(path, mode) == 0 && strlen(real) < size) {
          strcpy(out, real);
          return 0;
        }
      }
      if (tried && *ntried < 8 && snprintf(tried[*ntried], PATH_MAX, "%s", path) < PATH_MAX) (*ntried)++;
    }
  }
  return -1;
}

int moor__lua_dir(const char *given, char *out, size_t size, char *err, size_t errlen) {
  if (!given || !*given) given = getenv("MOOR_LUA_DIR");
  if (given && *given) {
    if (strlen(given) >= size) return snprintf(err, errlen, "the Lua directory path is too long"), MOOR_EINVAL;
    strcpy(out, given);
    return 0;
  }
  char tried[8][PATH_MAX];
  int ntried = 0;
  if (!find_from_self(REL_LUA, sizeof REL_LUA / sizeof REL_LUA[0], "moor/host.lua", R_OK, out, size, tried,
                      &ntried))
    return 0;
#ifdef MOOR_BUILD_LUA_DIR
  char dirs[2][PATH_MAX];
  int n = self_dirs(dirs);
  for (int i = 0; i < n; i++) {
    if (in_build_tree(dirs[i]) && strlen(MOOR_BUILD_LUA_DIR) < size) {
      strcpy(out, MOOR_BUILD_LUA_DIR);
      return 0;
    }
  }
#endif
  int len = snprintf(err, errlen, "cannot find moor's Lua files (moor/host.lua): looked in");
  for (int i = 0; i < ntried && len > 0 && (size_t)len < errlen; i++)
    len += snprintf(err + len, errlen - (size_t)len, "%s %s", i ? "," : "", tried[i]);
  if (len > 0 && (size_t)len < errlen)
    snprintf(err + len, errlen - (size_t)len, "; install moor (cmake --install) or set MOOR_LUA_DIR");
  return MOOR_ENOTFOUND;
}

int moor__wfa_path(char *out, size_t size) {
  const char *env = getenv("MOOR_WFA");
  if (env && *env && strlen(env) + 1 < size) {
    strcpy(out, env);
    return 0;
  }
  char dir[PATH_MAX];
  if (!find_from_self(REL_WFA, sizeof REL_WFA / sizeof REL_WFA[0], "moor-wfa", X_OK, dir, sizeof dir, NULL, NULL) &&
      strlen(dir) + sizeof "/moor-wfa" <= size) {
    snprintf(out, size, "%s/moor-wfa", dir);
    return 0;
  }
#ifdef MOOR_WFA_PATH
  char dirs[2][PATH_MAX];
  int n = self_dirs(dirs);
  for (int i = 0; i < n; i++) {
    if (in_build_tree(dirs[i]) && *MOOR_WFA_PATH && access(MOOR_WFA_PATH, X_OK) == 0 &&
        strlen(MOOR_WFA_PATH) < size) {
      strcpy(out, MOOR_WFA_PATH);
      return 0;
    }
  }
#endif
  return MOOR_ENOTFOUND;
}

int moor__luab_path(const char *lua_dir, char *out, size_t size) {
  const char *env = getenv("MOOR_LUA_BYTECODE");
  if (env && (!strcmp(env, "0") || !strcmp(env, "off"))) return MOOR_ENOTFOUND;
  if (env && env[0] == '/') { /* another bundle (tests: a damaged one) */
    if (strlen(env) >= size) return MOOR_ENOTFOUND;
    strcpy(out, env);
    return 0;
  }
#ifdef MOOR_LUAB_BUILD_PATH
  char dirs[2][PATH_MAX];
  int n = self_dirs(dirs);
  for (int i = 0; i < n; i++) {
    if (in_build_tree(dirs[i]) && *MOOR_LUAB_BUILD_PATH && strlen(MOOR_LUAB_BUILD_PATH) < size) {
      strcpy(out, MOOR_LUAB_BUILD_PATH);
      return 0;
    }
  }
#endif
  if (!lua_dir || (size_t)snprintf(out, size, "%s/moor/moor.luab", lua_dir) >= size) return MOOR_ENOTFOUND;
  return 0;
}
