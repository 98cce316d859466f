#!/usr/bin/env bash
# Hostile schema patterns (issue 8, item 6): a call whose input is a string of
# almost 1 MiB that nearly matches ^([a-z0-9]+-?)*$ (seconds of backtracking
# for a plain backtracking matcher) is refused at PCRE2's match limit with
# 400 invalid_input naming the field and the pattern; no run starts, and the
# same moor dev goes on answering (a matching value is accepted). Lookahead
# and backreferences work in patterns over HTTP too. How long the refusal
# takes is a figure of tests/bench (bench.c), not asserted here.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
cat >"$T/example/tools/pattern_probe.lua" <<'LUA'
local moor = require "moor"
local s = moor.schema
return moor.defineWorkflowTool {
  description = "Test tool: a slug checked by a pattern that backtracks badly, and a checked password.",
  inputSchema = s.object {
    slug = s.optional(s.string { pattern = "^([a-z0-9]+-?)*$" }),
    password = s.optional(s.string { pattern = "^(?=.*[0-9])(?=.*[a-z]).{8,}$" }),
    pair = s.optional(s.string { pattern = "^(\\w+)=\\1$" }),
  },
  execute = function(input) return { ok = true, slug = input.slug and #input.slug } end,
}
LUA
start_dev example 127.0.0.1:0

python3 -c 'import sys; sys.stdout.write("{\"slug\":\"" + "a" * 1000000 + "!\"}")' >"$T/hostile.json"
for i in 1 2 3; do
  req POST /v1/tools/pattern_probe/calls "" --data-binary @"$T/hostile.json"
  expect_error 400 invalid_input "hostile slug #$i"
  printf '%s' "$BODY" | grep -q 'slug: is too costly to check against the pattern /^(\[a-z0-9\]+-?)\*\$/' \
    || fail "message of the refusal: ${BODY:0:300}"
done
"$MOOR" runs --json | grep -q pattern_probe && fail "a run was started from a refused input"

# The same host still answers, and accepts what matches.
call pattern_probe '{"slug":"release-notes-2"}'
settled "$RUN" completed
req POST /v1/tools/pattern_probe/calls '{"slug":"no spaces"}'
expect_error 400 invalid_input "a slug that does not match"
printf '%s' "$BODY" | grep -q 'must be a string matching' || fail "no-match message: $BODY"
call pattern_probe '{"password":"hunter2x","pair":"ab=ab"}'
settled "$RUN" completed
req POST /v1/tools/pattern_probe/calls '{"password":"hunterxy"}'
expect_error 400 invalid_input "a password without a digit (lookahead)"
req POST /v1/tools/pattern_probe/calls '{"pair":"ab=cd"}'
expect_error 400 invalid_input "a pair that differs (backreference)"
stop_dev
pass "hostile patterns are refused at the match limit; lookahead and backreferences work"
