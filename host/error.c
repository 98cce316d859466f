/* The one error vocabulary at the C boundary. The Lua engine names its
 * errors with code strings ({ code, message }); the C API answers MOOR_E*
 * codes. Both directions are a table here: moor_strerror's messages come
 * from MOOR_ERRNO_MAP (moor.h), and engine codes map to MOOR_E* through
 * LUA_CODES. HTTP statuses are the Lua router's business (lua/moor/http.lua);
 * C never reads them. */
#include "host.h"

#include <stdio.h>
#include <string.h>

const char *moor_strerror(int code) {
  switch (code) {
    case MOOR_OK: return "ok";
#define XX(name, value, message) \
  case MOOR_##name: return message;
    MOOR_ERRNO_MAP(XX)
#undef XX
    default: return "unknown error";
  }
}

const char *moor_errmsg(const moor *m) { return m ? m->err : "out of memory"; }

int moor__set_err(moor *m, int code, const char *fmt, const char *a) {
  snprintf(m->err, sizeof m->err, fmt, a ? a : "");
  return code;
}

/* Engine error codes (as lua/moor/ writes them) and what the C API answers. */
static const struct {
  const char *code;
  int rc;
} LUA_CODES[] = {
  {"not_found", MOOR_ENOTFOUND},           /* an unknown run, request, session or hook */
  {"unknown", MOOR_ENOTFOUND},             /* moor_call: an unknown tool */
  {"json", MOOR_EJSON},                    /* input that is not JSON */
  {"bad_json", MOOR_EJSON},
  {"input", MOOR_EINVAL},                  /* input the tool's schema refuses */
  {"invalid_input", MOOR_EINVAL},
  {"bad_request", MOOR_EINVAL},
  {"invalid_option", MOOR_EINVAL},
  {"freeform_not_allowed", MOOR_EINVAL},
  {"approval_unbound", MOOR_EINVAL},
  {"too_many_deliveries", MOOR_EINVAL},
  {"already_resolved", MOOR_ECONFLICT},    /* a question answered or withdrawn */
  {"already_settled", MOOR_ECONFLICT},     /* a run that has ended */
  {"approval_mismatch", MOOR_ECONFLICT},   /* an approval naming another call */
  {"storage_unavailable", MOOR_EIO},       /* a commit failed: nothing was recorded */
  {"store", MOOR_EIO},                     /* moor_call: the run could not be recorded (a failed commit) */
};

int moor__error_code(const char *code, int dflt) {
  if (!code) return dflt;
  for (size_t i = 0; i < sizeof LUA_CODES / sizeof LUA_CODES[0]; i++)
    if (!strcmp(code, LUA_CODES[i].code)) return LUA_CODES[i].rc;
  return dflt;
}

static const char *string_at(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
}

int moor__lua_error(moor *m, int idx, int dflt) {
  lua_State *L = m->L;
  idx = lua_absindex(L, idx);
  const char *code = NULL, *message = NULL;
  if (lua_istable(L, idx)) { /* { code = ..., message = ... } */
    lua_getfield(L, idx, "code");
    lua_getfield(L, idx, "message");
    code = string_at(L, -2);
    message = string_at(L, -1);
    int rc = moor__set_err(m, moor__error_code(code, dflt), "%s", message ? message : code);
    lua_pop(L, 2);
    return rc;
  }
  if (lua_type(L, idx) == LUA_TNUMBER) { /* status, code, message: the status is not ours to read */
    code = string_at(L, idx + 1);
    message = lua_tostring(L, idx + 2);
  } else { /* message, code */
    message = lua_tostring(L, idx);
    code = string_at(L, idx + 1);
  }
  return moor__set_err(m, moor__error_code(code, dflt), "%s", message);
}
