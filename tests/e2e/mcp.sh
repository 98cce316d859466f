# Helpers for the MCP scripts (sourced after lib.sh): MCP_AGENT, a copy of
# tests/e2e/mcp_agent; need_sdk installs the official MCP TypeScript SDK
# (@modelcontextprotocol/sdk, pinned) from npm into the build directory on
# first use and sets SDK_MODULES.
cp -r "$MOOR_SRC/tests/e2e/mcp_agent" "$T/mcp_agent"
MCP_AGENT="$T/mcp_agent"
MCP_SDK=@modelcontextprotocol/sdk@1.32.2
need_sdk() {
  command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (./.ci/deps installs them)"
  local deps
  deps="$(cd "$(dirname "$MOOR")" && pwd)/mcp-sdk"
  if ! grep -q '"version": "1.32.2"' "$deps/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null; then
    mkdir -p "$deps"
    timeout 300 npm install --no-audit --no-fund --no-save --loglevel=error --prefix "$deps" "$MCP_SDK" \
      >"$T/npm.log" 2>&1 || fail "npm install $MCP_SDK failed: $(tail -20 "$T/npm.log")"
  fi
  SDK_MODULES="$deps/node_modules"
}
