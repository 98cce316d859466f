/* Internal: JSON Schema `pattern`s on PCRE2 (regex.c). */
#ifndef MOOR_REGEX_H
#define MOOR_REGEX_H

#include <lua.h>

/* core.regex_compile(pattern) -> compiled pattern | nil, err (see regex.c). */
int moor__regex_compile(lua_State *L);

#endif
