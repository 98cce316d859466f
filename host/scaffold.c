/* moor_scaffold (moor init): a new agent project, written by
 * lua/moor/scaffold.lua on a bare Lua state of its own (no engine, no
 * database), with the two file-system calls Lua lacks: mkdir and creating a
 * file that must not exist yet (O_EXCL, so nothing is ever overwritten).
 * Depends on paths.c only. */
#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir(path) -> true | nil, err (an existing directory is fine) */
static int l_mkdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (mkdir(path, 0755) == 0 || (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushfstring(L, "cannot create the directory %s: %s", path, errno == EEXIST ? "a file is in the way" : strerror(errno));
  return 2;
}

/* create(path, text) -> true | nil, err, "exists" | "io" */
static int l_create(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  int err = errno;
  if (fd >= 0) {
    size_t off = 0;
    while (off < len) {
      ssize_t n = write(fd, text + off, len - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += (size_t)n;
    }
    err = errno;
    if (close(fd) == 0 && off == len) {
      lua_pushboolean(L, 1);
      return 1;
    }
  }
  lua_pushnil(L);
  lua_pushfstring(L, err == EEXIST ? "%s exists: moor init writes nothing over it" : "cannot write %s: %s", path,
                  strerror(err));
  lua_pushstring(L, err == EEXIST ? "exists" : "io");
  return 3;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int moor_scaffold(const char *dir, char **out) {
  *out = NULL;
  char found[PATH_MAX], lua_dir[PATH_MAX], err[PATH_MAX + 512];
  int rc = moor__lua_dir(NULL, found, sizeof found, err, sizeof err);
  if (rc) {
    *out = strdup(err);
    return rc;
  }
  if (!realpath(found, lua_dir)) {
    snprintf(err, sizeof err, "moor's Lua directory %s: %s", found, strerror(errno));
    *out = strdup(err);
    return MOOR_ENOTFOUND;
  }
  lua_State *L = luaL_newstate();
  if (!L) return MOOR_ENOMEM;
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua", lua_dir, lua_dir);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moor.scaffold");
  rc = lua_pcall(L, 1, 1, 0);
  if (rc == LUA_OK) {
    lua_getfield(L, -1, "write");
    lua_pushstring(L, dir && *dir ? dir : ".");
    lua_createtable(L, 0, 3);
    lua_pushcfunction(L, l_mkdir);
    lua_setfield(L, -2, "mkdir");
    lua_pushcfunction(L, l_create);
    lua_setfield(L, -2, "create");
    lua_pushstring(L, lua_dir);
    lua_setfield(L, -2, "lua_dir");
    rc = lua_pcall(L, 2, 3, 0);
  }
  if (rc != LUA_OK) {
    *out = dup_or_null(lua_tostring(L, -1));
    rc = MOOR_ELUA;
  } else if (lua_isstring(L, -3)) {
    *out = dup_or_null(lua_tostring(L, -3));
    rc = 0;
  } else {
    const char *code = lua_tostring(L, -2);
    *out = dup_or_null(lua_tostring(L, -1));
    rc = code && !strcmp(code, "exists") ? MOOR_ECONFLICT : MOOR_EIO;
  }
  lua_close(L);
  if (!*out) return MOOR_ENOMEM;
  return rc;
}
