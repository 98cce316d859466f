#!/usr/bin/env bash
# `moor resume` with runs still waiting (issue 7, item 24): it exits 0 (it
# drove everything that could go on) and says, one line per run on stdout,
# what each one waits on.
. "$(dirname "$0")/lib.sh"
cd "$T"
cat >"$T/agent/tools/ask_once.lua" <<'LUA'
local moor = require "moor"
return moor.defineWorkflowTool {
  description = "Test tool: one question, no deadline.",
  inputSchema = moor.schema.object {},
  execute = function(_, ctx)
    local a = ctx.ask { prompt = "Go?", options = { { id = "approve", label = "Go" }, { id = "no", label = "No" } } }
    return { answer = a.optionId }
  end,
}
LUA
set +e
"$MOOR" call ask_once '{}'  </dev/null >"$T/out" 2>"$T/err1"; st1=$?
"$MOOR" call hook_wait '{"token":"order-42"}'  </dev/null >"$T/out" 2>"$T/err2"; st2=$?
set -e
[ $st1 = 1 ] && [ $st2 = 1 ] || fail "calls left waiting exited $st1/$st2: $(cat "$T/err1" "$T/err2")"
ask=$(run_id_from "$T/err1")
hook=$(run_id_from "$T/err2")
"$MOOR" call three_steps "{\"witness\":\"$T/w\",\"sleep\":\"0s\"}" >/dev/null 2>&1

"$MOOR" resume >"$T/resume.out" 2>"$T/resume.err" || fail "resume exited $?: $(cat "$T/resume.err")"
req=$(sed -n "s/^$ask (ask_once) waits on a question \(req_[0-9a-f_]*\): 'moor answer req_[0-9a-f_]* OPTION'.*/\1/p" \
  "$T/resume.out")
[ -n "$req" ] || fail "resume does not say the asking run waits on a question: $(cat "$T/resume.out" "$T/resume.err")"
grep -q "^$hook (hook_wait) waits on 1 hook: 'moor dev' serves POST /v1/hooks/TOKEN" "$T/resume.out" \
  || fail "resume does not say the hook_wait run waits on a hook: $(cat "$T/resume.out")"
[ "$(wc -l <"$T/resume.out")" = 2 ] || fail "only the two waiting runs are listed: $(cat "$T/resume.out")"

# Answered, it finishes; a resume with nothing left waiting prints nothing.
"$MOOR" answer "$req" approve >/dev/null
"$MOOR" cancel "$hook" >/dev/null
"$MOOR" resume >"$T/resume2.out" 2>"$T/resume2.err" || fail "resume 2: $(cat "$T/resume2.err")"
grep -q "waits on" "$T/resume2.out" && fail "settled runs listed as waiting: $(cat "$T/resume2.out")"
grep -q "^$ask completed" "$T/resume2.out" || fail "the asking run did not complete: $(cat "$T/resume2.out")"
pass "moor resume names what each waiting run waits on, exit 0"
