/* Internal: a lossless JSON codec for Lua values.
 *
 * Debian's lua-cjson decodes every number as a float and prints floats with
 * 14 digits, so 64-bit ids and most doubles do not survive a round trip. This
 * codec keeps integers as integers (all 64 bits) and prints floats with the
 * fewest digits that read back to the same double. Object keys are sorted
 * bytewise so the same value always gives the same text (logs are hashed).
 *
 * Neither function raises a Lua error for bad input; they return a code and
 * leave a message on the stack. (Like any Lua API call they can still raise on
 * out-of-memory inside Lua itself; no memory leaks if they do.) */
#ifndef MOOR_JSON_H
#define MOOR_JSON_H

#include <lua.h>
#include <stddef.h>

#include "moor.h"

#include "moorconf.h" /* MOOR_JSON_MAXDEPTH: the nesting limit, encode and decode */
#define MOOR_JSON_ARRAY_MT "moor.json.array" /* registry key of the array metatable */

/* Encode the Lua value at stack index idx as JSON. On success pushes the
 * string and returns 0. On failure pushes an error message and returns
 * MOOR_EJSON (or MOOR_ENOMEM). maxbytes == 0 means no limit. root names the
 * value in error paths (e.g. "result"); NULL means "value". *kind (may be
 * NULL) receives a static string: "type", "cycle", "depth", "size", "key", or
 * "memory" when MOOR_ENOMEM is returned. */
int moor_json_encode(lua_State *L, int idx, size_t maxbytes, const char *root,
                     const char **kind);

/* Decode len bytes of JSON text. On success pushes the value and returns 0;
 * on failure pushes "invalid JSON at byte N: expected ..." (N counts from 0)
 * and returns MOOR_EJSON (MOOR_ENOMEM if out of memory). */
int moor_json_decode(lua_State *L, const char *s, size_t len);

/* Lua module: { encode = f(v [, maxbytes [, root]]) -> s | nil, msg, kind;
 *   decode = f(s) -> v | nil, msg; null = lightuserdata NULL;
 *   array = f([t]) -> t marked as array; isarray = f(v) -> bool;
 *   array_mt = the metatable }. Only wrong argument types raise. */
MOOR_API int luaopen_moor_json(lua_State *L);

#endif
