-- A fixture for check_sources.lua: moor.core's sources without host/core.c,
-- so the check must fail against the real CMakeLists.txt.
build = {
  modules = {
    ["moor.core"] = {
      sources = { "host/moor.c", "host/store.c" },
    },
  },
}
