-- Builds moor.core for a stock Lua 5.4 and installs the Lua side, so that
-- `require "moor"` works in any Lua program (a game, an edge host):
--   luarocks --lua-version=5.4 make --tree DIR rockspec/moor-scm-1.rockspec \
--     CURL_INCDIR=/usr/include/x86_64-linux-gnu
-- (Debian's luarocks defaults to Lua 5.1 and keeps curl's headers in the
-- multiarch directory.) No programs are built: no moor CLI and no moor-wfa
-- launcher, which harness agents need ($MOOR_WFA, or install with CMake).
-- tests/e2e/test_install.sh runs a tool with lua5.4 from such a tree.
-- CMake (the README's commands) stays the primary build; tests/module/smoke.lua
-- is what this module must run.
rockspec_format = "3.0"
package = "moor"
version = "scm-1"
source = { url = "git+https://example.invalid/moor.git" }
description = {
  summary = "A durable host for agent tools written in Lua",
  detailed = "Workflow tools that sleep, ask and wait for webhooks without holding compute, and survive crashes without repeating a finished step; sessions with models over libcurl.",
  license = "MIT",
}
dependencies = { "lua >= 5.4, < 5.5" }
external_dependencies = {
  UV = { header = "uv.h", library = "uv" },
  SQLITE = { header = "sqlite3.h", library = "sqlite3" },
  CURL = { header = "curl/curl.h", library = "curl" },
  HTTP_PARSER = { header = "http_parser.h", library = "http_parser" },
  CRYPTO = { header = "openssl/evp.h", library = "crypto" }, -- libssl-dev: SHA-256
  PCRE2 = { header = "pcre2.h", library = "pcre2-8" }, -- libpcre2-dev: schema patterns
}
build = {
  type = "builtin",
  modules = {
    ["moor.core"] = {
      sources = { "host/moor.c", "host/serve.c", "host/mcp_stdio.c", "host/waiting.c", "host/error.c", "host/module.c",
                  "host/core.c", "host/core_engine.c", "host/core_store.c", "host/core_clock.c",
                  "host/core_http.c", "host/core_os.c", "host/store.c", "host/store_vfs.c", "host/lock.c", "host/json.c",
                  "host/http.c", "host/fetch.c", "host/fetch_lua.c", "host/regex.c",
                  "host/sandbox.c", "host/harness.c", "host/paths.c", "host/scaffold.c",
                  "host/luab.c", "host/curl_dl.c", "host/alloc.c" },
      defines = { "MOOR_NO_CJSON", "_GNU_SOURCE" },
      incdirs = { "host", "$(UV_INCDIR)", "$(SQLITE_INCDIR)", "$(CURL_INCDIR)", "$(HTTP_PARSER_INCDIR)",
                  "$(CRYPTO_INCDIR)", "$(PCRE2_INCDIR)" },
      libdirs = { "$(UV_LIBDIR)", "$(SQLITE_LIBDIR)", "$(CURL_LIBDIR)", "$(HTTP_PARSER_LIBDIR)", "$(CRYPTO_LIBDIR)",
                  "$(PCRE2_LIBDIR)" },
      libraries = { "uv", "sqlite3", "curl", "http_parser", "crypto", "pcre2-8" },
    },
    ["moor"] = "lua/moor/init.lua",
    ["moor.authoring.define"] = "lua/moor/authoring/define.lua",
    ["moor.authoring.ctx"] = "lua/moor/authoring/ctx.lua",
    ["moor.authoring.agent"] = "lua/moor/authoring/agent.lua",
    ["moor.authoring.flow"] = "lua/moor/authoring/flow.lua",
    ["moor.authoring.world"] = "lua/moor/authoring/world.lua",
    ["moor.authoring.serve"] = "lua/moor/authoring/serve.lua",
    ["moor.authoring.task"] = "lua/moor/authoring/task.lua",
    ["moor.authoring.outputs"] = "lua/moor/authoring/outputs.lua",
    ["moor.cli"] = "lua/moor/cli.lua",
    ["moor.clock"] = "lua/moor/clock.lua",
    ["moor.conf"] = "lua/moor/conf.lua",
    ["moor.duration"] = "lua/moor/duration.lua",
    ["moor.engine"] = "lua/moor/engine/init.lua",
    ["moor.engine.state"] = "lua/moor/engine/state.lua",
    ["moor.engine.timers"] = "lua/moor/engine/timers.lua",
    ["moor.engine.log"] = "lua/moor/engine/log.lua",
    ["moor.engine.sched"] = "lua/moor/engine/sched.lua",
    ["moor.engine.waits"] = "lua/moor/engine/waits.lua",
    ["moor.engine.runs"] = "lua/moor/engine/runs.lua",
    ["moor.engine.steps"] = "lua/moor/engine/steps.lua",
    ["moor.engine.auth"] = "lua/moor/engine/auth.lua",
    ["moor.engine.replay"] = "lua/moor/engine/replay.lua",
    ["moor.engine.ops"] = "lua/moor/engine/ops.lua",
    ["moor.engine.gc"] = "lua/moor/engine/gc.lua",
    ["moor.engine.loop"] = "lua/moor/engine/loop.lua",
    ["moor.engine.evict"] = "lua/moor/engine/evict.lua",
    ["moor.engine.inspect"] = "lua/moor/engine/inspect.lua",
    ["moor.errors"] = "lua/moor/errors.lua",
    ["moor.fence"] = "lua/moor/fence.lua",
    ["moor.auth"] = "lua/moor/auth/init.lua",
    ["moor.auth.connection"] = "lua/moor/auth/connection.lua",
    ["moor.auth.oauth"] = "lua/moor/auth/oauth.lua",
    ["moor.auth.tokens"] = "lua/moor/auth/tokens.lua",
    ["moor.base64url"] = "lua/moor/base64url.lua",
    ["moor.harness"] = "lua/moor/harness/init.lua",
    ["moor.harness.dirs"] = "lua/moor/harness/dirs.lua",
    ["moor.harness.host"] = "lua/moor/harness/host.lua",
    ["moor.harness.runtime"] = "lua/moor/harness/runtime.lua",
    ["moor.harness.script"] = "lua/moor/harness/script.lua",
    ["moor.harness.teach"] = "lua/moor/harness/teach.lua",
    ["moor.host"] = "lua/moor/host.lua",
    ["moor.http"] = "lua/moor/http.lua",
    ["moor.http.openapi"] = "lua/moor/http/openapi.lua",
    ["moor.http.status"] = "lua/moor/http/status.lua",
    ["moor.mcp.http"] = "lua/moor/mcp/http.lua",
    ["moor.mcp.server"] = "lua/moor/mcp/server.lua",
    ["moor.mcp.stdio"] = "lua/moor/mcp/stdio.lua",
    ["moor.json"] = "lua/moor/json.lua",
    ["moor.loader"] = "lua/moor/loader.lua",
    ["moor.schema"] = "lua/moor/schema/init.lua",
    ["moor.schema.words"] = "lua/moor/schema/words.lua",
    ["moor.schema.validate"] = "lua/moor/schema/validate.lua",
    ["moor.schema.check"] = "lua/moor/schema/check.lua",
    ["moor.schema.build"] = "lua/moor/schema/build.lua",
    ["moor.session"] = "lua/moor/session/init.lua",
    ["moor.session.tool"] = "lua/moor/session/tool.lua",
    ["moor.session.loop"] = "lua/moor/session/loop.lua",
    ["moor.session.calls"] = "lua/moor/session/calls.lua",
    ["moor.session.api"] = "lua/moor/session/api.lua",
    ["moor.session.tasks"] = "lua/moor/session/tasks.lua",
    ["moor.session.tasktext"] = "lua/moor/session/tasktext.lua",
    ["moor.signal"] = "lua/moor/signal.lua",
    ["moor.store"] = "lua/moor/store.lua",
    ["moor.terminal"] = "lua/moor/terminal.lua",
    ["moor.testing"] = "lua/moor/testing.lua",
    ["moor.testrunner"] = "lua/moor/testrunner.lua",
    ["moor.providers"] = "lua/moor/providers/init.lua",
    ["moor.providers.openai"] = "lua/moor/providers/openai.lua",
    ["moor.providers.anthropic"] = "lua/moor/providers/anthropic.lua",
    ["moor.providers.scripted"] = "lua/moor/providers/scripted.lua",
    ["moor.providers.sse"] = "lua/moor/providers/sse.lua",
    ["moor.scaffold"] = "lua/moor/scaffold.lua",
    -- LuaLS annotations (---@meta, never required): what .luarc.json's
    -- workspace.library names (moor init writes it).
    ["moor.meta.moor"] = "lua/moor/meta/moor.lua",
    ["moor.meta.schema"] = "lua/moor/meta/schema.lua",
    ["moor.meta.testing"] = "lua/moor/meta/testing.lua",
    -- moor's built-in tools (tools/), installed as moor/tools/ beside
    -- moor/loader.lua, which loads them for every agent.
    ["moor.tools.ask_question"] = "tools/ask_question.lua",
    ["moor.tools.sleep"] = "tools/sleep.lua",
    ["moor.tools.moor__task_wait"] = "tools/moor__task_wait.lua",
    ["moor.tools.workflow"] = "tools/workflow.lua",
    ["moor.tools.moor__task_cancel"] = "tools/moor__task_cancel.lua",
    ["moor.tools.subagent"] = "tools/subagent.lua",
  },
}
