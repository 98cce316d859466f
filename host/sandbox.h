/* Internal: the sandbox for model-written programs (sandbox.c), bound into
 * moor.core as sandbox_new and sandbox_stats (core.c assembles them). */
#ifndef MOOR_SANDBOX_H
#define MOOR_SANDBOX_H

#include <lauxlib.h>
#include <lua.h>

#include "moorconf.h"

extern const luaL_Reg moor__core_sandbox_fns[]; /* sandbox_new, sandbox_stats */

#endif
