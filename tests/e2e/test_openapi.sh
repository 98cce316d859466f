#!/usr/bin/env bash
# The OpenAPI 3.1 document (issue 14 item 6): GET /v1/openapi.json from a
# real `moor dev` is validated by a real OpenAPI validator
# (@seriousme/openapi-schema-validator, installed from npm into the build
# directory on first use), and tests/openapi/check.mjs probes every
# operation in it: each answer's status, error code and JSON body must be
# the documented ones, SSE data lines must match StreamEvent, and a
# documented operation no probe tried fails the test. The server runs with
# MOOR_API_TOKEN set, so 401 is probed too.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (./.ci/deps installs them)"
VALIDATOR=@seriousme/openapi-schema-validator@2.11.0
DEPS="$(cd "$(dirname "$MOOR")" && pwd)/openapi-validator"
if ! grep -q '"version": "2.11.0"' "$DEPS/node_modules/@seriousme/openapi-schema-validator/package.json" 2>/dev/null; then
  mkdir -p "$DEPS"
  timeout 300 npm install --no-audit --no-fund --no-save --loglevel=error --prefix "$DEPS" "$VALIDATOR" >"$T/npm.log" 2>&1 \
    || fail "npm install $VALIDATOR failed: $(tail -20 "$T/npm.log")"
fi
export MOOR_API_TOKEN=openapi-test-token-0123456789abcdef0123
# Sessions get no model from outside: a closed loopback port answers their model calls.
export OPENAI_BASE_URL=http://127.0.0.1:9/v1 OPENAI_API_KEY=sk-none ANTHROPIC_BASE_URL=http://127.0.0.1:9
start_dev "$T/example" 127.0.0.1:0
timeout 120 node "$MOOR_SRC/tests/openapi/check.mjs" "$URL" "$MOOR_API_TOKEN" "$DEPS/node_modules" \
  "$MOOR_SRC/lua/moor/http.lua" >"$T/check.out" 2>&1 \
  || fail "the API does not answer as its OpenAPI document says: $(grep -v '^ok:' "$T/check.out" | head -30)"
grep -q '^ok: the document is valid OpenAPI 3\.1' "$T/check.out" || fail "not validated: $(cat "$T/check.out")"
tail -1 "$T/check.out"
stop_dev
pass "GET /v1/openapi.json is valid OpenAPI 3.1 and every operation in it answers as documented"
