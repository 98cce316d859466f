# Helpers for the MCP scripts (sourced after lib.sh): MCP_AGENT, a copy of
# tests/e2e/mcp_agent; need_sdk installs the official MCP TypeScript SDK
# (@modelcontextprotocol/sdk, pinned) from npm into the build directory on
# first use and sets SDK_MODULES.
cp -r "$MOOR_SRC/tests/e2e/mcp_agent" "$T/mcp_agent"
MCP_AGENT="$T/mcp_agent"
MCP_SDK=@modelcontextprotocol/sdk@1.32.2
# Several MCP scripts run at once under ctest -j: the first installs, under a
# lock (flock, bounded), into a directory of its own that is then renamed into
# place whole, so no script ever sees a half-installed SDK.
need_sdk() {
  command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (./.ci/deps installs them)"
  local build deps
  build="$(cd "$(dirname "$MOOR")" && pwd)"
  deps="$build/mcp-sdk"
  exec 9>"$build/mcp-sdk.lock"
  flock -w 240 9 || fail "another test held the MCP SDK's install lock for 4 minutes"
  if ! grep -q '"version": "1.32.2"' "$deps/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null; then
    local tmp="$build/mcp-sdk.tmp.$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    timeout 300 npm install --no-audit --no-fund --no-save --loglevel=error --prefix "$tmp" "$MCP_SDK" \
      >"$T/npm.log" 2>&1 || { rm -rf "$tmp"; fail "npm install $MCP_SDK failed: $(tail -20 "$T/npm.log")"; }
    rm -rf "$deps" && mv "$tmp" "$deps"
  fi
  exec 9>&-
  SDK_MODULES="$deps/node_modules"
}
