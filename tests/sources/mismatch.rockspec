-- A fixture for check_sources.lua: moor.core's sources without host/core.c,
-- so the check must fail against the real CMakeLists.txt; it installs no Lua
-- module, so check_lua_modules.lua must fail on it too.
build = {
  modules = {
    ["moor.core"] = {
      sources = { "host/moor.c", "host/store.c" },
    },
  },
}
