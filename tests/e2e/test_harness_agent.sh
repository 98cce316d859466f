#!/usr/bin/env bash
# Issue 11, "What it must show": harness agents end to end with a fake
# harness of our own (tests/fake/fake_harness.lua, a `{ command = ... }`
# runtime) that reads its prompt, finds the launcher's path there and runs
# the launcher through /bin/sh -c as an agent's shell does.
#  1. `moor call`: flags, JSON on standard input (the WF_JSON heredoc), a
#     quote inside a value, refused input, an unknown tool, failing handlers,
#     a tool returning nothing, `wfa tool` alone (the codes), the modes of the
#     launcher (0500), its directory (0700), the root (0300, not listable) and
#     the socket (0600), forged fields (bad-request), `waiting`, an invalid
#     answer refused with 10 and retried in the same turn, then refusals after
#     the answer: each command's stdout, stderr and exit status exactly; the
#     run's `moor logs` shows each call, its input and its result; the
#     agent's directory is gone after the run, and its socket unreachable (9).
#  2. kill -9 of `moor dev` while the harness hangs mid-turn after two
#     findings: the harness dies with the host (PR_SET_PDEATHSIG through the
#     spawn shim), its child `sleep` (same process group) is killed at the
#     restart, and the run completes with both findings, ended = interrupted;
#     no process of the harness's group is left.
#  3. Two agents in one run, both in a turn at once: neither can list the
#     root, a guessed directory is unreachable (9), a forged id or agent
#     field is refused (8), a tool only the other agent has is unknown to it
#     (3), and each call and answer lands on the agent whose connection made
#     it (call.agent; each turn gets its own answer).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/dev.sh"
cd "$T"
FAKE="$MOOR_SRC/tests/fake/fake_harness.lua"
WFA_BIN=$(dirname "$MOOR")/moor-wfa
UNIX_SEND=${MOOR_UNIX_SEND:-$(dirname "$MOOR")/tests/unix_send}
[ -x "$WFA_BIN" ] || fail "no launcher client beside moor: $WFA_BIN"
[ -x "$UNIX_SEND" ] || fail "no unix_send test client: $UNIX_SEND"
command -v lua5.4 >/dev/null || fail "lua5.4 is not installed (the fake harness runs on it)"
# As root, permission bits bind only without CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH: the listing checks run as the owner would.
AS_OWNER=
if [ "$(id -u)" = 0 ]; then
  command -v setpriv >/dev/null || fail "running as root, and setpriv (util-linux) is missing to drop CAP_DAC_OVERRIDE"
  AS_OWNER="setpriv --bounding-set -dac_override,-dac_read_search"
fi
export WFA_BIN UNIX_SEND T AS_OWNER

# Every process the harness started is recorded (pid and its start time);
# the cleanup kills those still alive, and only those.
PIDS="$T/pids"
: >"$PIDS"
cleanup() {
  while read -r p st; do
    [ "$(start_of "$p")" = "$st" ] && kill -9 "$p" 2>/dev/null
  done <"$PIDS"
  kill -9 $(jobs -p) 2>/dev/null || true
  # (the launchers' root is 0300: not listable, so not removable, until opened up)
  [ -n "${KEEP:-}" ] || { chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"; }
}
trap cleanup EXIT

# start_of PID: field 22 of /proc/PID/stat (its start time), "" when no such
# process or a zombie (a dead process not yet reaped).
start_of() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  s=${s##*) }
  set -- $s
  [ "$1" = Z ] || echo "${20}"
}
# pgid_of PID
pgid_of() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; s=${s##*) }; set -- $s; echo "$3"; }
# in_group PGID: the live processes of process group PGID, one pid a line.
in_group() {
  local f s
  for f in /proc/[0-9]*/stat; do
    s=$(cat "$f" 2>/dev/null) || continue
    s=${s##*) }
    set -- $s
    [ "$3" = "$PGID_WANT" ] && [ "$1" != Z ] && echo "${f//[^0-9]/}"
  done
  return 0
}
group_empty() { [ -z "$(PGID_WANT=$1 in_group)" ]; }
gone() { [ "$(start_of "$1")" != "$2" ]; }

# The agent project: workflow tools whose agents run the fake harness.
A="$T/hagent"
mkdir -p "$A/tools"
cat >"$A/tools/review.lua" <<'LUA'
-- seed 001's dead-code tools, one taught as JSON, two whose handlers throw,
-- one returning nothing; the turn's answer is typed.
local moor = require "moor"
local s = moor.schema

local Finding = s.object {
  file = s.string { minLength = 1 },
  line = s.integer { minimum = 1 },
  problem = s.string { minLength = 1 },
}

return moor.defineWorkflowTool {
  description = "A harness agent records findings through tools.",
  inputSchema = s.object { fake = s.string(), script = s.string(), log = s.string() },
  execute = function(input)
    local findings, labels = {}, {}
    local reviewer = moor.harness.open {
      key = "reviewer",
      runtime = { command = { "lua5.4", input.fake, "--script", input.script, "--log", input.log } },
      tools = {
        add_finding = moor.harness.tool {
          description = "Record one finding as soon as you are sure of it.",
          input = Finding,
          handler = function(finding)
            for _, f in ipairs(findings) do
              if f.file == finding.file and f.line == finding.line then
                error(("%s:%d is already recorded"):format(finding.file, finding.line))
              end
            end
            findings[#findings + 1] = finding
            return ("Recorded; %d so far."):format(#findings)
          end,
        },
        list_findings = moor.harness.tool {
          description = "The findings recorded so far, one per line.",
          handler = function()
            local lines = {}
            for i, f in ipairs(findings) do lines[i] = ("%s:%d  %s"):format(f.file, f.line, f.problem) end
            return #lines > 0 and table.concat(lines, "\n") or "None yet."
          end,
        },
        label_item = moor.harness.tool {
          description = "Give one item its labels (replacing any it had).",
          input = s.object { id = s.string { minLength = 1 }, labels = s.array(s.string { minLength = 1 }) },
          handler = function(x)
            labels[x.id] = moor.json.array(x.labels)
            return { id = x.id, labels = moor.json.array(x.labels) }
          end,
        },
        file_ticket = moor.harness.tool {
          description = "File a ticket for a finding.",
          input = s.object { title = s.string { minLength = 1 } },
          handler = function() error("the ticket system is down; record a finding instead") end,
        },
        forget = moor.harness.tool {
          description = "Forget nothing: returns nothing.",
          handler = function() end,
        },
      },
    }
    local r = reviewer:run {
      prompt = "Find dead code in src/. Record each finding with add_finding as you go.",
      schema = s.object { summary = s.string { minLength = 1 } },
      timeout = "2m",
    }
    return {
      findings = moor.json.array(findings),
      labels = labels,
      value = r.outcome.answered and r.outcome.value or nil,
      ended = r.outcome.answered and "answered" or r.outcome.reason,
    }
  end,
}
LUA
cat >"$A/tools/pair.lua" <<'LUA'
-- two agents in one run, both in a turn at once (moor.all); each finding
-- is kept with the key of the agent that called (call.agent).
local moor = require "moor"
local s = moor.schema

return moor.defineWorkflowTool {
  description = "Two harness agents at once.",
  inputSchema = s.object { fake = s.string(), dir = s.string() },
  execute = function(input)
    local found = {}
    local function tools(extra)
      local t = {
        add_finding = moor.harness.tool {
          description = "Record one finding.",
          input = s.object { problem = s.string { minLength = 1 } },
          handler = function(x, call)
            found[#found + 1] = { agent = call.agent, problem = x.problem }
            return ("Recorded for %s."):format(call.agent)
          end,
        },
      }
      if extra then t[extra] = moor.harness.tool { description = "Only this agent's.", handler = function()
        return "mine" end } end
      return t
    end
    local function open(key, extra)
      return moor.harness.open { key = key, tools = tools(extra), runtime = { command = { "lua5.4", input.fake,
        "--script", input.dir .. "/" .. key .. ".txt", "--log", input.dir .. "/" .. key } } }
    end
    local alpha, beta = open("alpha"), open("beta", "beta_only")
    local r = moor.all {
      moor.async(function() return alpha:run { prompt = "You are alpha.", schema = s.object { who = s.string() } } end),
      moor.async(function() return beta:run { prompt = "You are beta.", schema = s.object { who = s.string() } } end),
    }
    return { found = moor.json.array(found), alpha = r[1].outcome, beta = r[2].outcome }
  end,
}
LUA

# check DIR N EXIT STDOUT STDERR: the N-th command the harness ran (log DIR)
# exited EXIT with exactly STDOUT and STDERR (printf %s: give "\n" as $'\n').
check() {
  local d=$1 n=$2 want=$3 out=$4 err=$5
  [ -f "$d/$n.rc" ] || fail "command $n of $d did not run: $(cat "$d/log" 2>/dev/null)"
  local what
  what="command $n ($(head -1 "$d/$n.cmd"))"
  [ "$(cat "$d/$n.rc")" = "$want" ] || fail "$what exited $(cat "$d/$n.rc"), not $want; stderr: $(cat "$d/$n.err")"
  cmp -s "$d/$n.out" <(printf '%s' "$out") || fail "$what: stdout is '$(cat "$d/$n.out")', not '$out'"
  cmp -s "$d/$n.err" <(printf '%s' "$err") || fail "$what: stderr is '$(cat "$d/$n.err")', not '$err'"
}
# refused DIR N EXIT CODE WORD: the N-th command exited EXIT, nothing on
# stdout, and its stderr is one line "CODE: ..." that has WORD in it.
refused() {
  local d=$1 n=$2 want=$3 code=$4 word=$5
  local what
  what="command $n ($(head -1 "$d/$n.cmd"))"
  [ "$(cat "$d/$n.rc")" = "$want" ] || fail "$what exited $(cat "$d/$n.rc"), not $want; stderr: $(cat "$d/$n.err")"
  [ ! -s "$d/$n.out" ] || fail "$what printed on stdout: $(cat "$d/$n.out")"
  head -c "$((${#code} + 2))" "$d/$n.err" | cmp -s - <(printf '%s: ' "$code") \
    || fail "$what: stderr does not start with '$code: ': $(cat "$d/$n.err")"
  [ "$(wc -l <"$d/$n.err")" = 1 ] && [ "$(tail -c 1 "$d/$n.err" | od -An -c | tr -d ' ')" = '\n' ] \
    || fail "$what: stderr is not one line ending in a newline: '$(cat "$d/$n.err")'"
  grep -qF -- "$word" "$d/$n.err" || fail "$what: stderr does not say '$word': $(cat "$d/$n.err")"
}
# response DIR N: the N-th command's stdout (a raw response line) as compact sorted JSON
response() { jq -cS . "$1/$2.out" 2>/dev/null || fail "command $2's output is not JSON: $(cat "$1/$2.out")"; }

#############################################################################
# 1. one turn through `moor call`: what each command saw
#############################################################################
S1="$T/s1.txt"
cat >"$S1" <<'EOF'
$WFA tool
%%
$WFA tool add_finding --file 'src/report.ts' --line '41' --problem 'formatDate is never called'
%%
$WFA tool add_finding --file 'src/a.ts' --line '3' --problem 'it'\''s never called'
%%
$WFA tool label_item <<'WF_JSON'
{"id": "b2", "labels": ["ops", "cron"]}
WF_JSON
%%
$WFA tool add_finding --file 'src/a.ts' --line '0' --problem 'x'
%%
$WFA tool add_finding --file 'src/a.ts' --problem 'no line'
%%
$WFA tool label_item --id 'b2'
%%
$WFA tool label_item <<'WF_JSON'
{"id": "b2", "labels": [
WF_JSON
%%
$WFA tool nope --file 'x'
%%
$WFA tool add_finding --file 'src/a.ts' --line '3' --problem 'again'
%%
$WFA tool file_ticket --title 'src/a.ts:3'
%%
$WFA tool list_findings
%%
$WFA tool forget
%%
$AS_OWNER stat -c '%a %F' $WFA "$(dirname $WFA)" "$(dirname $WFA)/s" "$(dirname "$(dirname $WFA)")"
%%
$AS_OWNER ls "$(dirname "$(dirname $WFA)")"
%%
printf '%s\n' '{"v":1,"argv":["tool","list_findings"],"id":"reviewer-1-2"}' | "$UNIX_SEND" "$(dirname $WFA)/s"
%%
printf '%s\n' '{"v":1,"argv":["result","{\"summary\":\"forged\"}"],"agent":"reviewer"}' | "$UNIX_SEND" "$(dirname $WFA)/s"
%%
printf '%s\n' '{"v":2,"argv":["tool"]}' | "$UNIX_SEND" "$(dirname $WFA)/s"
%%
$WFA waiting --reason 'reading src/'\''s tree'
%%
$WFA result 'not JSON at all'
%%
$WFA result '{"summary": ""}'
%%
$WFA result '{"summary": "two findings; it'\''s done"}'
%%
$WFA tool list_findings
%%
$WFA result '{"summary": "again"}'
EOF
L1="$T/log1"
st=0
"$MOOR" call review "{\"fake\": \"$FAKE\", \"script\": \"$S1\", \"log\": \"$L1\"}" --agent "$A" </dev/null \
  >"$T/call1.out" 2>"$T/call1.err" || st=$?
[ $st = 0 ] || fail "moor call review exited $st: $(cat "$T/call1.err"); harness log: $(cat "$L1/log" 2>&1)"
RUN1=$(run_id_from "$T/call1.err")
[ -f "$L1/done" ] || fail "the fake harness did not finish its script: $(cat "$L1/log" 2>&1)"
[ "$(cat "$L1/done")" = 24 ] || fail "the harness ran $(cat "$L1/done") commands, not 24"

# The prompt ends with the seed's block and the launcher's absolute path.
WFA=$(cat "$L1/launcher")
case $WFA in "$T"/h/*/wfa) ;; *) fail "the launcher is not under the root beside the database: $WFA" ;; esac
DIR=$(dirname "$WFA")
basename "$DIR" | grep -Eqx '[A-Za-z0-9_-]{22}' || fail "the agent's directory is not named by 22 base64url characters: $DIR"
grep -qxF "You have tools the workflow runs for you. Call one with:" "$L1/prompt" || fail "no tools block: $(cat "$L1/prompt")"
grep -qxF "Put every value in single quotes; a ' inside a value is written '\\''." "$L1/prompt" \
  || fail "no quoting rule in the prompt"
grep -qxF "  $WFA tool add_finding --file <text, at least 1 character> --line <integer, at least 1> --problem <text, at least 1 character>" \
  "$L1/prompt" || fail "add_finding is not taught as flags: $(cat "$L1/prompt")"
grep -qxF "$WFA tool label_item <<'WF_JSON'" "$L1/prompt" || fail "label_item is not taught as JSON: $(cat "$L1/prompt")"
grep -qxF "  $WFA tool list_findings" "$L1/prompt" || fail "list_findings is not taught by its name alone"

# `wfa tool` alone: exit 0, every code with its exit status, the limits,
# each harness's hand-back limit; nothing on stderr.
[ "$(cat "$L1/1.rc")" = 0 ] && [ ! -s "$L1/1.err" ] || fail "wfa tool exited $(cat "$L1/1.rc"): $(cat "$L1/1.err")"
head -1 "$L1/1.out" | grep -qx "Call a tool with:" || fail "wfa tool printed: $(cat "$L1/1.out")"
n=0
for ce in ok:0 failed:1 invalid-input:2 unknown-tool:3 busy:4 outside-a-turn:5 timed-out:6 \
  too-many-connections:7 bad-request:8 unreachable:9 invalid-answer:10; do
  line=$(printf '  %-3d %-21s ' "${ce##*:}" "${ce%%:*}")
  grep -qF -- "$line" "$L1/1.out" || fail "wfa tool does not list '${ce%%:*}' as exit ${ce##*:}: $(cat "$L1/1.out")"
  n=$((n + 1))
done
[ "$(grep -cE '^  [0-9]+ +[a-z-]+  ' "$L1/1.out")" = $n ] || fail "wfa tool lists other codes: $(cat "$L1/1.out")"
for want in "Limits:" "connections at once: 64" "a value (tool input or answer): 1 MiB" "a response: 256 KiB" \
  "reading standard input: 30 s" "a connection's lifetime: 30 s" "tools per agent: 16" \
  "codex   hands a running command back after 10 s"; do
  grep -qF -- "$want" "$L1/1.out" || fail "wfa tool does not say '$want': $(cat "$L1/1.out")"
done
# flags; a quote inside a value; JSON on standard input (a result that isn't a string comes as JSON)
check "$L1" 2 0 "Recorded; 1 so far." ""
check "$L1" 3 0 "Recorded; 2 so far." ""
check "$L1" 4 0 '{"id":"b2","labels":["ops","cron"]}' ""
# refused before the handler: what was wrong, exit 2; an unknown tool, exit 3
refused "$L1" 5 2 invalid-input "line"
refused "$L1" 6 2 invalid-input "--line"
refused "$L1" 7 2 invalid-input "standard input"
refused "$L1" 8 2 invalid-input "not JSON"
refused "$L1" 9 3 unknown-tool "nope"
grep -qF "add_finding, file_ticket, forget, label_item, list_findings" "$L1/9.err" \
  || fail "unknown-tool does not list the tools: $(cat "$L1/9.err")"
# a throw fails the call: stderr is exactly the message (no Lua position)
check "$L1" 10 1 "" $'src/a.ts:3 is already recorded\n'
check "$L1" 11 1 "" $'the ticket system is down; record a finding instead\n'
check "$L1" 12 0 $'src/report.ts:41  formatDate is never called\nsrc/a.ts:3  it\'s never called' ""
check "$L1" 13 0 "" ""
# modes: launcher 0500, its directory 0700, the socket 0600, the root 0300 and not listable
check "$L1" 14 0 $'500 regular file\n700 directory\n600 socket\n300 directory\n' ""
[ "$(cat "$L1/15.rc")" != 0 ] && grep -q "Permission denied" "$L1/15.err" \
  || fail "the root could be listed: $(cat "$L1/15.out" "$L1/15.err")"
# forged fields and another version: bad-request, exit 8, nothing done
[ "$(response "$L1" 16)" = '{"code":"bad-request","exit":8,"stderr":"bad-request: unknown field '"'id'"'\n","v":1}' ] \
  || fail "a request with an id: $(cat "$L1/16.out")"
[ "$(response "$L1" 17)" = '{"code":"bad-request","exit":8,"stderr":"bad-request: unknown field '"'agent'"'\n","v":1}' ] \
  || fail "a request with an agent: $(cat "$L1/17.out")"
[ "$(jq -r '.code + " " + (.exit|tostring)' "$L1/18.out")" = "bad-request 8" ] \
  || fail "a request of version 2: $(cat "$L1/18.out")"
check "$L1" 19 0 $'Noted.\n' ""
# an answer that doesn't fit the schema: 10, then another in the same turn
refused "$L1" 20 10 invalid-answer "must be an object"
refused "$L1" 21 10 invalid-answer "summary"
check "$L1" 22 0 $'Your answer was accepted.\n' ""
# after the answer: outside a turn
refused "$L1" 23 5 outside-a-turn "a tool can be called only during a turn"
refused "$L1" 24 5 outside-a-turn "already accepted"
pass "wfa through /bin/sh -c: flags, JSON heredoc, quote, refusals (2, 3, 8), throws (1, exact message), nothing, modes 0500/0700/0600/0300, waiting, invalid answer 10 then accepted, then 5"

# The run's value: both findings, the labels, the answer (the forged one never landed).
want='{"ended":"answered","findings":[{"file":"src/report.ts","line":41,"problem":"formatDate is never called"},{"file":"src/a.ts","line":3,"problem":"it'"'"'s never called"}],"labels":{"b2":["ops","cron"]},"value":{"summary":"two findings; it'"'"'s done"}}'
[ "$(jq -cS . "$T/call1.out")" = "$want" ] || fail "moor call printed: $(cat "$T/call1.out")"
# moor logs: each call that reached a handler, its input, its result or error (7 of them)
"$MOOR" logs "$RUN1" >"$T/logs1" || fail "moor logs $RUN1"
for want in \
  '"call":{"id":"reviewer-1-1","input":{"file":"src/report.ts","line":41,"problem":"formatDate is never called"},"tool":"add_finding"}' \
  '{"id":"reviewer-1-1","output":"Recorded; 1 so far."}' \
  '"input":{"file":"src/a.ts","line":3,"problem":"it'"'"'s never called"},"tool":"add_finding"' \
  '"input":{"id":"b2","labels":["ops","cron"]},"tool":"label_item"' \
  '"output":{"id":"b2","labels":["ops","cron"]}' \
  '"input":{"file":"src/a.ts","line":3,"problem":"again"},"tool":"add_finding"' \
  '"error":"src/a.ts:3 is already recorded"' \
  '"input":{"title":"src/a.ts:3"},"tool":"file_ticket"' \
  '"error":"the ticket system is down; record a finding instead"' \
  '"input":{},"tool":"forget"' \
  '{"answer":{"summary":"two findings; it'"'"'s done"},"turn":1}' \
  '{"ended":{"reason":"answered"},"turn":1}'; do
  grep -qF -- "$want" "$T/logs1" || fail "moor logs lacks $want: $(cat "$T/logs1")"
done
[ "$(grep -c ' hook.received .*"call":{' "$T/logs1")" = 7 ] || fail "calls in the log (7 reached a handler): $(cat "$T/logs1")"
[ "$(grep -c ' step.result  *harness.reply ' "$T/logs1")" = 7 ] || fail "replies in the log: $(cat "$T/logs1")"
! grep -qF '"forged"' "$T/logs1" || fail "the forged answer reached the run: $(cat "$T/logs1")"
# After the run its directory is gone and its socket unreachable.
[ ! -e "$DIR" ] || fail "the agent's directory outlived its run: $(ls -la "$DIR" 2>&1)"
st=0
"$WFA_BIN" "$DIR/s" "" tool list_findings >"$T/gone.out" 2>"$T/gone.err" || st=$?
[ $st = 9 ] && grep -q '^unreachable: ' "$T/gone.err" || fail "the closed socket gave $st: $(cat "$T/gone.err")"
pass "moor call: the run's value, moor logs shows each call with its input and result; the directory goes with the run (then 9)"

#############################################################################
# 2. kill -9 of the host mid-turn; restart; interrupted, with the findings
#############################################################################
S2="$T/s2.txt"
cat >"$S2" <<'EOF'
$WFA tool add_finding --file 'src/report.ts' --line '41' --problem 'formatDate is never called'
%%
$WFA tool add_finding --file 'src/util.ts' --line '7' --problem 'padLeft is never called'
%%
@hang 120
%%
$WFA result '{"summary": "never reached"}'
EOF
L2="$T/log2"
# The host runs under a subreaper that reaps every orphan at once, as a
# real init does: the killed harness leaves no zombie behind, so the restart
# must kill what is left of its group without its leader. (Without the
# reaper, here as in many containers, its zombie would keep its pid and
# start time, and hide that case.)
case $(uname -m) in
  x86_64) SYS_PRCTL=157 ;;
  aarch64) SYS_PRCTL=167 ;;
  *) SYS_PRCTL= ;;
esac
REAPER=
if [ -n "$SYS_PRCTL" ] && command -v perl >/dev/null; then
  # reaper.pl PIDFILE PROG ARGS...: PR_SET_CHILD_SUBREAPER (36), run PROG
  # (its pid to PIDFILE), reap every child and orphan until none is left.
  REAPER="$T/reaper.pl"
  cat >"$REAPER" <<PERL
use strict;
syscall($SYS_PRCTL, 36, 1, 0, 0, 0) == 0 or die "prctl: \$!\n";
my \$file = shift @ARGV;
my \$pid = fork() // die "fork: \$!\n";
if (!\$pid) { exec @ARGV; die "exec: \$!\n"; }
open(my \$f, ">", "\$file.tmp") or die; print \$f "\$pid\n"; close(\$f); rename("\$file.tmp", \$file);
1 while waitpid(-1, 0) > 0;
PERL
fi
if [ -n "$REAPER" ]; then
  : >"$T/dev.out"
  perl "$REAPER" "$T/dev.pid" "$MOOR" dev --agent "$A" --listen 127.0.0.1:0 >"$T/dev.out" 2>>"$T/dev.err" &
  wait_for test -s "$T/dev.pid"
  DEV_PID=$(cat "$T/dev.pid")
  wait_for grep -q '^http://' "$T/dev.out"
  URL=$(head -1 "$T/dev.out")
else
  start_dev "$A" 127.0.0.1:0
fi
call review "{\"fake\": \"$FAKE\", \"script\": \"$S2\", \"log\": \"$L2\"}"
RUN2=$RUN
wait_for test -s "$L2/pid"
wait_for test -s "$L2/child"
HPID=$(cat "$L2/pid")
CPID=$(cat "$L2/child")
HST=$(start_of "$HPID")
CST=$(start_of "$CPID")
[ -n "$HST" ] && [ -n "$CST" ] || fail "the harness ($HPID) or its child ($CPID) is not running"
echo "$HPID $HST" >>"$PIDS"
echo "$CPID $CST" >>"$PIDS"
PGID=$(pgid_of "$HPID")
[ "$PGID" = "$HPID" ] || fail "the harness is not the leader of its own process group: pgid $PGID"
[ "$(pgid_of "$CPID")" = "$PGID" ] || fail "the child is not in the harness's group"
[ "$(pgid_of "$DEV_PID")" != "$PGID" ] || fail "the harness shares the host's group"
check "$L2" 1 0 "Recorded; 1 so far." ""
check "$L2" 2 0 "Recorded; 2 so far." ""
[ "$(status "$RUN2")" = running ] || fail "the run is not running mid-turn: $(run_body "$RUN2")"
kill_dev
# The harness dies with the host (PR_SET_PDEATHSIG, set by the spawn shim);
# its child lives on in its group (the death signal is the harness's own).
wait_for gone "$HPID" "$HST"
[ -n "$(start_of "$CPID")" ] || fail "the harness's child died with the host: the restart's kill is not tested"
if [ -n "$REAPER" ]; then
  reaped() { [ ! -e "/proc/$HPID" ]; }
  wait_for reaped
fi
start_dev "$A" 127.0.0.1:0
settled "$RUN2" completed
want='{"ended":"interrupted","findings":[{"file":"src/report.ts","line":41,"problem":"formatDate is never called"},{"file":"src/util.ts","line":7,"problem":"padLeft is never called"}],"labels":{}}'
got=$(run_body "$RUN2" | jq -cS .result)
[ "$got" = "$want" ] || fail "after the restart the run's value is $got, not $want"
# What the harness left in its group is killed at the restart; nothing is left.
wait_for gone "$CPID" "$CST"
wait_for group_empty "$PGID"
[ ! -f "$L2/4.cmd" ] || fail "the harness ran on after the kill: $(cat "$L2/log")"
"$MOOR" logs "$RUN2" >"$T/logs2"
grep -qF '{"ended":{"reason":"interrupted"},"turn":1}' "$T/logs2" || fail "no interrupted end in the log: $(cat "$T/logs2")"
[ "$(grep -c ' step.result  *harness.reply ' "$T/logs2")" = 2 ] || fail "replies in the log: $(cat "$T/logs2")"
stop_dev
pass "kill -9 mid-turn: the harness died with the host, its child at the restart; the run completed with both findings, interrupted"

#############################################################################
# 3. two agents at once: the connection is the identity
#############################################################################
P="$T/pair"
mkdir -p "$P"
cat >"$P/alpha.txt" <<'EOF'
@wait ${T}/pair/beta/1.rc
%%
$AS_OWNER ls "$(dirname "$(dirname $WFA)")"
%%
"$WFA_BIN" "$(dirname "$(dirname $WFA)")/AAAAAAAAAAAAAAAAAAAAAA/s" '' tool add_finding --problem 'guessed'
%%
printf '%s\n' '{"v":1,"argv":["tool","add_finding","--problem","forged"],"id":"beta-1-1"}' | "$UNIX_SEND" "$(dirname $WFA)/s"
%%
printf '%s\n' '{"v":1,"argv":["result","{\"who\":\"beta\"}"],"agent":"beta"}' | "$UNIX_SEND" "$(dirname $WFA)/s"
%%
$WFA tool beta_only
%%
$WFA tool add_finding --problem 'from alpha'
%%
$WFA result '{"who": "alpha"}'
EOF
cat >"$P/beta.txt" <<'EOF'
$WFA tool add_finding --problem 'from beta'
%%
@wait ${T}/pair/alpha/7.rc
%%
$WFA tool beta_only
%%
$WFA result '{"who": "beta"}'
EOF
st=0
"$MOOR" call pair "{\"fake\": \"$FAKE\", \"dir\": \"$P\"}" --agent "$A" </dev/null >"$T/pair.out" 2>"$T/pair.err" || st=$?
[ $st = 0 ] || fail "moor call pair exited $st: $(cat "$T/pair.err"); alpha: $(cat "$P/alpha/log" 2>&1); beta: $(cat "$P/beta/log" 2>&1)"
LA="$P/alpha" LB="$P/beta"
[ "$(dirname "$(cat "$LA/launcher")")" != "$(dirname "$(cat "$LB/launcher")")" ] || fail "the two agents share a directory"
[ "$(dirname "$(dirname "$(cat "$LA/launcher")")")" = "$(dirname "$(dirname "$(cat "$LB/launcher")")")" ] \
  || fail "the two agents' directories are not under one root"
# (the @wait is the harness's own: the shell commands are numbered from 1)
[ "$(cat "$LA/1.rc")" != 0 ] && grep -q "Permission denied" "$LA/1.err" \
  || fail "alpha could list the root: $(cat "$LA/1.out" "$LA/1.err")"
[ "$(cat "$LA/2.rc")" = 9 ] && grep -q "^unreachable: the workflow's socket .* is not there" "$LA/2.err" \
  || fail "a guessed directory's socket: exit $(cat "$LA/2.rc"): $(cat "$LA/2.err")"
[ "$(jq -r '.code + " " + (.exit|tostring) + " " + .stderr' "$LA/3.out")" = "bad-request 8 bad-request: unknown field 'id'" ] \
  || fail "an id in the request: $(cat "$LA/3.out")"
[ "$(jq -r '.code + " " + (.exit|tostring) + " " + .stderr' "$LA/4.out")" = "bad-request 8 bad-request: unknown field 'agent'" ] \
  || fail "an agent in the request: $(cat "$LA/4.out")"
refused "$LA" 5 3 unknown-tool "beta_only"
check "$LA" 6 0 "Recorded for alpha." ""
check "$LA" 7 0 $'Your answer was accepted.\n' ""
check "$LB" 1 0 "Recorded for beta." ""
check "$LB" 2 0 "mine" ""
check "$LB" 3 0 $'Your answer was accepted.\n' ""
want='{"alpha":{"answered":true,"value":{"who":"alpha"}},"beta":{"answered":true,"value":{"who":"beta"}},"found":[{"agent":"beta","problem":"from beta"},{"agent":"alpha","problem":"from alpha"}]}'
[ "$(jq -cS . "$T/pair.out")" = "$want" ] || fail "the pair's value: $(cat "$T/pair.out")"
pass "two agents at once: root not listable, a guessed socket unreachable (9), forged id/agent refused (8), the other's tool unknown (3), each call and answer on its own connection's agent"
