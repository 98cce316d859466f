/* The engine benchmark's sections 5-9 (moor_bench; main is in bench.c):
 * sessions with a scripted model, schema patterns against hostile input,
 * tasks, and the workflow tool. None is a target's figure: each is taken
 * once, on its own database, and printed as it is taken. */
#include "bench.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the task figures count, from the committed events (moor_on_event). */
struct task_count {
  long started, settled, results, held, steps; /* task.*, turn.held events; model steps of completed turns */
};

static void on_task_event(const moor_event *ev, void *ud) {
  struct task_count *c = ud;
  if (!strcmp(ev->kind, "task.started")) {
    c->started++;
  } else if (!strcmp(ev->kind, "task.settled")) {
    c->settled++;
  } else if (!strcmp(ev->kind, "task.result")) {
    c->results++;
  } else if (!strcmp(ev->kind, "turn.held")) {
    c->held++;
  } else if (!strcmp(ev->kind, "turn.completed")) {
    const char *p = strstr(ev->payload, "\"steps\":");
    if (p) c->steps += atol(p + 8);
  }
}

/* Tick until n tasks have started and every one of `sessions` turns is held
 * (the tasks parked), or fail after a bounded number of rounds. */
static void tick_until_parked(moor *m, struct task_count *c, long n, long sessions) {
  long long due = 0;
  for (int i = 0; i < 100000 && (c->started < n || c->held < sessions); i++) check(m, moor_tick(m, &due));
  if (c->started < n || c->held < sessions) {
    fprintf(stderr, "bench: %ld of %ld tasks started, %ld of %ld turns held\n", c->started, n, c->held, sessions);
    exit(1);
  }
}

/* The workflow figures count the children opened (agent.started). */
static void on_agent_event(const moor_event *ev, void *ud) {
  if (!strcmp(ev->kind, "agent.started")) ++*(long *)ud;
}

/* `n` runs of `tool` with input_json, one after another, each from
 * moor_call to its result; the seconds per run. Each result must be
 * {"output":"","result":<want>}. */
static double tool_runs(moor *m, const char *tool, const char *input, const char *want, int n) {
  char expect[64], id[64];
  snprintf(expect, sizeof expect, "\"result\":%s}", want);
  double t0 = now_s();
  for (int i = 0; i < n; i++) {
    check(m, moor_call(m, tool, input, id, sizeof id));
    check(m, moor_run(m));
    char *status = NULL, *json = NULL;
    check(m, moor_run_info(m, id, &status, &json));
    if (!status || strcmp(status, "completed") || !json || !strstr(json, expect)) {
      fprintf(stderr, "bench: %s %s: %s %s (wanted %s)\n", tool, input, status ? status : "?", json ? json : "",
              expect);
      exit(1);
    }
    free(status);
    free(json);
  }
  return (now_s() - t0) / n;
}

/* The same for the workflow tool with `lua` (JSON string contents) as the program. */
static double workflow_runs(moor *m, const char *lua, const char *want, int n) {
  char input[512];
  snprintf(input, sizeof input, "{\"lua\":\"%s\"}", lua);
  return tool_runs(m, "workflow", input, want, n);
}
void bench_agents(void) {
  /* 5. Sessions with a scripted model (no model time): a turn is two model
   * steps and one plain tool call. */
  moor *m = open_db("sessions.db", MOOR_DURABILITY_NORMAL);
  long long due = 0;
  long before, after;
  double t0;
  char sid[64];
  check(m, moor_session_start(m, NULL, sid, sizeof sid));
  check(m, moor_run(m));
  t0 = now_s();
  for (int i = 0; i < 1000; i++) {
    check(m, moor_session_send(m, sid, "go", NULL));
    check(m, moor_run(m));
  }
  double turn = (now_s() - t0) / 1000;
  printf("one session, 1,000 turns:         %8.0f us/turn   (2 model steps + 1 tool call, no model time)\n",
         turn * 1e6);
  t0 = now_s();
  for (int i = 0; i < 1000; i++) check(m, moor_session_start(m, "go", sid, sizeof sid));
  check(m, moor_run(m));
  printf("1,000 new sessions, one turn each: %8.0f sessions/s\n", 1000 / (now_s() - t0));
  moor_close(m);

  /* 6. Schema patterns against hostile input: 1 MiB of "a" and a "!" checked
   * against ^(a+)+$ and ^([a-z0-9]+-?)*$ (seconds of backtracking without a
   * limit); the call is refused at PCRE2's match limit. Worst of 5 each. */
  m = open_db("patterns.db", MOOR_DURABILITY_NORMAL);
  size_t mib = 1024 * 1024;
  char *input = malloc(mib + 32);
  if (!input) exit(1);
  double worst = 0;
  const char *fields[] = {"plus", "slug"};
  for (int f = 0; f < 2; f++) {
    int k = snprintf(input, 32, "{\"%s\":\"", fields[f]);
    memset(input + k, 'a', mib);
    strcpy(input + k + mib, "!\"}");
    for (int i = 0; i < 5; i++) {
      char id[64];
      t0 = now_s();
      int rc = moor_call(m, "patterns", input, id, sizeof id);
      double dt = now_s() - t0;
      if (rc == 0 || !strstr(moor_errmsg(m), "too costly")) {
        fprintf(stderr, "bench: patterns: expected a refusal at the match limit, got %d %s\n", rc, moor_errmsg(m));
        exit(1);
      }
      if (dt > worst) worst = dt;
    }
  }
  free(input);
  printf("hostile pattern, 1 MiB input:     %8.1f ms/call  (worst; refused at the match limit)\n", worst * 1e3);
  moor_close(m);

  /* 7. Tasks (issue 9) with a scripted model (no model time), bodies with no
   * waits: 100 sessions whose one turn calls the task tool `job` 32 times
   * (MAX_TASKS) in one model step, then answers "ok" while the turn holds
   * until every result is appended; 100 whose turn calls it once; beside
   * them 100 sessions whose turn calls nothing. The host's time per task is
   * the difference, from the model's task call to its task.result appended
   * (with the model steps the results bring about). */
  m = open_agent_db("tasks.db", MOOR_DURABILITY_NORMAL, task_agent);
  struct task_count tc;
  static const char *task_msgs[] = {"run 0", "run 1", "run 32"};
  static const long task_k[] = {0, 1, 32};
  double task_turn[3];
  long task_steps[3], task_results[3];
  for (int w = 0; w < 3; w++) {
    memset(&tc, 0, sizeof tc);
    moor_on_event(m, on_task_event, &tc);
    t0 = now_s();
    for (int i = 0; i < 100; i++) {
      check(m, moor_session_start(m, task_msgs[w], sid, sizeof sid));
      check(m, moor_run(m));
    }
    task_turn[w] = (now_s() - t0) / 100;
    if (tc.started != 100 * task_k[w] || tc.settled != 100 * task_k[w] || tc.results < (task_k[w] ? 100 : 0)) {
      fprintf(stderr, "bench: '%s': %ld started, %ld settled, %ld task.result\n", task_msgs[w], tc.started,
              tc.settled, tc.results);
      exit(1);
    }
    task_steps[w] = tc.steps;
    task_results[w] = tc.results;
  }
  moor_on_event(m, NULL, NULL);
  for (int w = 2; w >= 1; w--)
    printf("task call -> task.result, %2ld/turn: %6.0f us/task   (%.1f model steps, %.1f task.result per turn)\n",
           task_k[w], (task_turn[w] - task_turn[0]) / task_k[w] * 1e6, task_steps[w] / 100.0,
           task_results[w] / 100.0);
  printf("  (a turn with no task: %.0f us, 1 model step)\n", task_turn[0] * 1e6);
  moor_close(m);

  /* 8. Memory: 10,000 tasks parked on a sleep. A session holds at most 32
   * working tasks (MAX_TASKS), so 313 sessions (312 x 32 + 16), each turn
   * held while its tasks sleep; beside it, as many sessions idle after a turn
   * with no tasks, for the sessions' own share. */
  m = open_agent_db("park-tasks.db", MOOR_DURABILITY_NORMAL, task_agent);
  memset(&tc, 0, sizeof tc);
  moor_on_event(m, on_task_event, &tc);
  check(m, moor_tick(m, &due));
  malloc_trim(0); /* (what the sections above freed would hide growth) */
  long before_idle = rss_kib();
  for (int i = 0; i < 313; i++) check(m, moor_session_start(m, "run 0", sid, sizeof sid));
  check(m, moor_run(m));
  long after_idle = rss_kib();
  memset(&tc, 0, sizeof tc);
  malloc_trim(0);
  before = rss_kib();
  for (int i = 0; i < 313; i++) check(m, moor_session_start(m, i < 312 ? "park 32" : "park 16", sid, sizeof sid));
  tick_until_parked(m, &tc, 10000, 313);
  after = rss_kib();
  moor_on_event(m, NULL, NULL);
  double per_task = (after - before) / 10000.0, per_session = (after_idle - before_idle) / 313.0;
  printf("10,000 tasks parked on a sleep:   %8.2f KiB/task (313 held sessions; RSS %ld -> %ld KiB)\n",
         per_task, before, after);
  printf("  (an idle session: %.1f KiB; per task less the sessions' share: %.2f KiB)\n", per_session,
         per_task - per_session * 313 / 10000);
  moor_close(m);

  /* 9. The workflow tool (issue 10) through the public API, as `moor call
   * workflow` runs it: tools/workflow.lua (maxSubagents = 128) and a scripted
   * subagent that answers at once (one model step, no model time). A trivial
   * program from moor_call to its result (run, task, sandbox, commits); then
   * programs making 100 ctx.agent calls one after another, and 100 in one
   * ctx.all, against one making none: the host's time per call is the
   * difference (the recorded call step, the child session opened, its turn,
   * the reply back into the parked program). Beside them the same 100 calls
   * from an authored task tool (agent_calls: no sandbox, no recorded step),
   * for the workflow tool's own share. */
  enum { WF_N = 20 }; /* rounds; each runs one program of every kind below */
  static const char *seq_lua = "local n = 0 for i = 1, 100 do "
                               "if ctx.agent('helper', { message = 'm' .. i }) == 'ok' then n = n + 1 end end "
                               "return n";
  static const char *all_lua = "local fs = {} for i = 1, 100 do "
                               "fs[i] = function() return ctx.agent('helper', { message = 'm' .. i }) end end "
                               "return #ctx.all(fs)";
  m = open_agent_db("workflow.db", MOOR_DURABILITY_NORMAL, workflow_agent);
  long children = 0;
  moor_on_event(m, on_agent_event, &children);
  workflow_runs(m, "return 1", "1", 20); /* (warm up) */
  tool_runs(m, "agent_calls", "{\"n\":0}", "0", 20);
  /* The kinds alternate round by round, so that the machine's drift falls
   * on each alike. */
  double wf_none = 0, wf_seq = 0, wf_all = 0, direct_none = 0, direct_seq = 0;
  long seq_children = 0, all_children = 0, direct_children = 0;
  for (int r = 0; r < WF_N; r++) {
    wf_none += workflow_runs(m, "return 1", "1", 25) / WF_N;
    direct_none += tool_runs(m, "agent_calls", "{\"n\":0}", "0", 25) / WF_N;
    children = 0;
    wf_seq += workflow_runs(m, seq_lua, "100", 1) / WF_N;
    seq_children += children;
    children = 0;
    wf_all += workflow_runs(m, all_lua, "100", 1) / WF_N;
    all_children += children;
    children = 0;
    direct_seq += tool_runs(m, "agent_calls", "{\"n\":100}", "100", 1) / WF_N;
    direct_children += children;
  }
  moor_on_event(m, NULL, NULL);
  if (seq_children != 100 * WF_N || all_children != 100 * WF_N || direct_children != 100 * WF_N) {
    fprintf(stderr, "bench: workflow: %ld, %ld and %ld children opened, wanted %d each\n", seq_children,
            all_children, direct_children, 100 * WF_N);
    exit(1);
  }
  printf("workflow, a trivial program:       %8.0f us/run    (moor_call of `return 1` to its result)\n",
         wf_none * 1e6);
  printf("workflow ctx.agent, 100 in a row:  %8.0f us/call   (less a program with none; scripted subagent)\n",
         (wf_seq - wf_none) / 100 * 1e6);
  printf("workflow ctx.agent, 100 in ctx.all: %7.0f us/call\n", (wf_all - wf_none) / 100 * 1e6);
  printf("  (the same 100 from an authored task tool: %.0f us/call; a task with none: %.0f us)\n",
         (direct_seq - direct_none) / 100 * 1e6, direct_none * 1e6);
  moor_close(m);
}
