/* moor engine benchmark, driven through the public API (host/moor.h) as an
 * embedder would. Prints figures; asserts nothing about time (see README).
 *
 *   moor_bench [AGENT_DIR [TASK_AGENT_DIR [WORKFLOW_AGENT_DIR]]]
 *   (defaults: tests/bench/agent, tests/bench/task_agent, tests/bench/workflow_agent)
 */
#define _GNU_SOURCE /* dlsym(RTLD_NEXT): the SQLite counters below */
#include "moor.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* What the store costs, counted beneath the engine: this program's own
 * definitions of SQLite entry points take the calls moor's (static) library
 * makes, count them and pass them on. Statements prepared; WAL frames (pages)
 * each commit appends, from a WAL hook on every connection, counted per
 * connection (the store's checkpointer opens a second one, which never
 * commits). The hook then calls the one the store set (sqlite3_wal_hook is
 * taken too: the store's wakes its checkpointer), or, where it set none,
 * does what SQLite's automatic checkpoint does (a passive checkpoint at
 * 1,000 frames, or as sqlite3_wal_autocheckpoint said). */
typedef int (*wal_hook_fn)(void *, sqlite3 *, const char *, int);
static struct conn {
  sqlite3 *db;
  int prev;          /* frames in its WAL after its last commit */
  int auto_frames;   /* no hook of the store's: checkpoint at this many (0: never) */
  wal_hook_fn hook;  /* the store's hook, when it set one */
  void *arg;
} conns[64];
static long n_prepared, n_commits, n_frames;

static struct conn *conn_of(sqlite3 *db) {
  for (size_t i = 0; db && i < sizeof conns / sizeof conns[0]; i++)
    if (conns[i].db == db) return &conns[i];
  return NULL;
}

int sqlite3_prepare_v2(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, const char **tail) {
  static int (*real)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "sqlite3_prepare_v2");
  n_prepared++;
  return real(db, sql, n, st, tail);
}

int sqlite3_prepare_v3(sqlite3 *db, const char *sql, int n, unsigned flags, sqlite3_stmt **st, const char **tail) {
  static int (*real)(sqlite3 *, const char *, int, unsigned, sqlite3_stmt **, const char **);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "sqlite3_prepare_v3");
  n_prepared++;
  return real(db, sql, n, flags, st, tail);
}

static int wal_hook(void *ud, sqlite3 *db, const char *name, int frames) {
  struct conn *c = ud;
  n_commits++;
  n_frames += frames < c->prev ? frames : frames - c->prev; /* (fewer: the WAL started over) */
  c->prev = frames;
  if (c->hook) return c->hook(c->arg, db, name, frames);
  if (c->auto_frames > 0 && frames >= c->auto_frames)
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  return SQLITE_OK;
}

static void *(*real_wal_hook(void))(sqlite3 *, wal_hook_fn, void *) {
  static void *(*real)(sqlite3 *, wal_hook_fn, void *);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "sqlite3_wal_hook");
  return real;
}

void *sqlite3_wal_hook(sqlite3 *db, wal_hook_fn fn, void *arg) {
  struct conn *c = conn_of(db);
  if (!c) return real_wal_hook()(db, fn, arg);
  void *old = c->hook ? c->arg : NULL;
  c->hook = fn;
  c->arg = arg;
  c->auto_frames = 0; /* (SQLite's automatic checkpoint is a WAL hook: replaced) */
  real_wal_hook()(db, wal_hook, c); /* (SQLite's own sets ours back: counting stays) */
  return old;
}

int sqlite3_wal_autocheckpoint(sqlite3 *db, int frames) {
  struct conn *c = conn_of(db);
  if (!c) {
    static int (*real)(sqlite3 *, int);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "sqlite3_wal_autocheckpoint");
    return real(db, frames);
  }
  c->hook = NULL;
  c->arg = NULL;
  c->auto_frames = frames;
  real_wal_hook()(db, wal_hook, c);
  return SQLITE_OK;
}

int sqlite3_open_v2(const char *path, sqlite3 **db, int flags, const char *vfs) {
  static int (*real)(const char *, sqlite3 **, int, const char *);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "sqlite3_open_v2");
  int rc = real(path, db, flags, vfs);
  struct conn *c = NULL; /* (a free slot: closing frees one) */
  for (size_t i = 0; !c && rc == SQLITE_OK && i < sizeof conns / sizeof conns[0]; i++)
    if (!conns[i].db) c = &conns[i];
  if (c) {
    *c = (struct conn){.db = *db, .auto_frames = 1000};
    real_wal_hook()(*db, wal_hook, c);
  }
  return rc;
}

static int close_with(const char *fn, sqlite3 *db) {
  int (*real)(sqlite3 *) = NULL;
  *(void **)&real = dlsym(RTLD_NEXT, fn);
  int rc = real(db);
  struct conn *c = rc == SQLITE_OK ? conn_of(db) : NULL;
  if (c) *c = (struct conn){0};
  return rc;
}
int sqlite3_close(sqlite3 *db) { return close_with("sqlite3_close", db); }
int sqlite3_close_v2(sqlite3 *db) { return close_with("sqlite3_close_v2", db); }

static long minflt(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static const char *agent = "tests/bench/agent";
static const char *task_agent = "tests/bench/task_agent";
static const char *workflow_agent = "tests/bench/workflow_agent";
static char dir[] = "/tmp/moor-bench-XXXXXX";

static moor *open_agent_db(const char *name, int durability, const char *agent_dir) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  moor_config cfg = {.db_path = path, .durability = durability};
  moor *m = NULL;
  if (moor_open(&m, &cfg) || moor_load_agent(m, agent_dir)) {
    fprintf(stderr, "bench: %s\n", moor_errmsg(m));
    exit(1);
  }
  return m;
}

static moor *open_db(const char *name, int durability) { return open_agent_db(name, durability, agent); }

static void check(moor *m, int rc) {
  if (rc) {
    fprintf(stderr, "bench: %s\n", moor_errmsg(m));
    exit(1);
  }
}

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

static void call(moor *m, const char *input) {
  char id[64];
  check(m, moor_call(m, "steps", input, id, sizeof id));
}

int main(int argc, char **argv) {
  if (argc > 1) agent = argv[1];
  if (argc > 2) task_agent = argv[2];
  if (argc > 3) workflow_agent = argv[3];
  if (!mkdtemp(dir)) return 1;
  printf("moor %s engine benchmark (figures, not pass/fail)\n\n", MOOR_VERSION);

  /* 1. One run of 10,000 trivial steps: each step is its own commit. */
  moor *m = open_db("one.db", MOOR_DURABILITY_NORMAL);
  long flt0 = minflt(), prep0 = n_prepared, com0 = n_commits, fr0 = n_frames;
  double t0 = now_s();
  call(m, "{\"n\":10000}");
  check(m, moor_run(m));
  double one = now_s() - t0;
  long commits = n_commits - com0;
  printf("one run, 10,000 steps:            %8.1f us/step   (target <= 50)\n", one / 10000 * 1e6);
  printf("  (%ld commits: %.2f page faults, %.2f WAL pages per commit; %ld statements prepared)\n", commits,
         (double)(minflt() - flt0) / commits, (double)(n_frames - fr0) / commits, n_prepared - prep0);
  moor_close(m);

  /* 2. 100 concurrent runs of 100 steps: results of one round share a commit. */
  static const char *names[] = {"normal", "full"};
  double rate[2];
  for (int d = 0; d < 2; d++) {
    char db[32];
    snprintf(db, sizeof db, "conc-%s.db", names[d]);
    m = open_db(db, d);
    com0 = n_commits, fr0 = n_frames, flt0 = minflt();
    t0 = now_s();
    for (int i = 0; i < 100; i++) call(m, "{\"n\":100}");
    check(m, moor_run(m));
    rate[d] = 10000 / (now_s() - t0);
    commits = n_commits - com0;
    printf("100 concurrent runs, sync=%-6s  %8.0f steps/s  (%ld commits: %.1f WAL pages, %.1f page faults each)\n",
           names[d], rate[d], commits, (double)(n_frames - fr0) / commits, (double)(minflt() - flt0) / commits);
    moor_close(m);
  }
  printf("  full / normal:                  %8.2f\n", rate[1] / rate[0]);

  /* 3. Replay: a run with a 10,000-step log parked on a sleep, reloaded by a
   * new engine (a restart) and replayed up to the sleep. */
  m = open_db("replay.db", MOOR_DURABILITY_NORMAL);
  call(m, "{\"n\":10000,\"park\":\"1h\"}");
  long long due = 0;
  check(m, moor_tick(m, &due));
  moor_close(m);
  m = open_db("replay.db", MOOR_DURABILITY_NORMAL);
  t0 = now_s();
  check(m, moor_resume_all(m));
  double loaded = now_s() - t0;
  check(m, moor_tick(m, &due));
  double rep = now_s() - t0;
  printf("  (load %.1f ms, replay %.1f ms)\n", loaded * 1e3, (rep - loaded) * 1e3);
  printf("replay of a 10,000-step log:      %8.0f ops/s     (target >= 500,000)\n", 10000 / rep);
  moor_close(m);

  /* 4. Memory: 10,000 runs parked on a sleep. */
  m = open_db("park.db", MOOR_DURABILITY_NORMAL);
  check(m, moor_tick(m, &due));
  malloc_trim(0); /* (the free heap MOOR_MALLOC_TRIM_THRESHOLD keeps would hide growth) */
  long before = rss_kib();
  for (int i = 0; i < 10000; i++) call(m, "{\"n\":0,\"park\":\"1h\"}");
  check(m, moor_tick(m, &due));
  long after = rss_kib();
  printf("10,000 runs parked on a sleep:    %8.2f KiB/run  (target <= 8; RSS %ld -> %ld KiB)\n",
         (after - before) / 10000.0, before, after);
  moor_close(m);

  /* 5. Sessions with a scripted model (no model time): a turn is two model
   * steps and one plain tool call. */
  m = open_db("sessions.db", MOOR_DURABILITY_NORMAL);
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
  if (!input) return 1;
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
        return 1;
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
      return 1;
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
    return 1;
  }
  printf("workflow, a trivial program:       %8.0f us/run    (moor_call of `return 1` to its result)\n",
         wf_none * 1e6);
  printf("workflow ctx.agent, 100 in a row:  %8.0f us/call   (less a program with none; scripted subagent)\n",
         (wf_seq - wf_none) / 100 * 1e6);
  printf("workflow ctx.agent, 100 in ctx.all: %7.0f us/call\n", (wf_all - wf_none) / 100 * 1e6);
  printf("  (the same 100 from an authored task tool: %.0f us/call; a task with none: %.0f us)\n",
         (direct_seq - direct_none) / 100 * 1e6, direct_none * 1e6);
  moor_close(m);

  /* 10. The store's share of a short run (issue 13): 2,000 runs of one step,
   * each from moor_call to moor_run's return (its result checked after),
   * with the statements SQLite prepared and the page faults taken meanwhile;
   * then a restart that resumes 1,000 runs parked on a question and 1,000 on
   * a hook (their rows read back: questions, hooks, deliveries). */
  enum { ONE_N = 2000, PARK_N = 1000 };
  m = open_db("short.db", MOOR_DURABILITY_NORMAL);
  static double lat[ONE_N];
  long prep_runs = 0, flt_runs = 0, com_runs = 0, fr_runs = 0;
  for (int i = -200; i < ONE_N; i++) { /* (200 to warm up) */
    char id[64];
    long p = n_prepared, f = minflt(), c = n_commits, w = n_frames;
    t0 = now_s();
    check(m, moor_call(m, "steps", "{\"n\":1}", id, sizeof id));
    check(m, moor_run(m));
    double dt = now_s() - t0;
    if (i >= 0) {
      lat[i] = dt;
      prep_runs += n_prepared - p;
      flt_runs += minflt() - f;
      com_runs += n_commits - c;
      fr_runs += n_frames - w;
    }
    char *status = NULL, *json = NULL;
    check(m, moor_run_info(m, id, &status, &json));
    if (!status || strcmp(status, "completed")) {
      fprintf(stderr, "bench: a 1-step run ended %s\n", status ? status : "?");
      return 1;
    }
    free(status);
    free(json);
  }
  double sum = 0;
  for (int i = 0; i < ONE_N; i++) sum += lat[i];
  qsort(lat, ONE_N, sizeof lat[0], cmp_double);
  printf("1-step run, moor_call to result:  %8.1f us/run    (p50 %.1f, p99 %.1f; target <= 80)\n",
         sum / ONE_N * 1e6, lat[ONE_N / 2] * 1e6, lat[ONE_N * 99 / 100] * 1e6);
  printf("  (per run: %.2f statements prepared, %.2f commits; %.2f page faults, %.2f WAL pages per commit)\n",
         (double)prep_runs / ONE_N, (double)com_runs / ONE_N, (double)flt_runs / com_runs,
         (double)fr_runs / com_runs);
  moor_close(m);
  m = open_db("restart.db", MOOR_DURABILITY_NORMAL);
  for (int i = 0; i < PARK_N; i++) {
    char id[64];
    check(m, moor_call(m, "ask", "{}", id, sizeof id));
    check(m, moor_call(m, "webhook", "{\"mode\":\"queue\"}", id, sizeof id));
  }
  check(m, moor_run(m));
  moor_close(m);
  m = open_db("restart.db", MOOR_DURABILITY_NORMAL);
  long p = n_prepared;
  t0 = now_s();
  check(m, moor_resume_all(m));
  check(m, moor_run(m));
  double resumed = now_s() - t0;
  printf("restart, %d parked runs resumed: %8.1f us/run    (half on a question, half on a hook; "
         "%.2f statements prepared per run)\n", 2 * PARK_N, resumed / (2 * PARK_N) * 1e6,
         (double)(n_prepared - p) / (2 * PARK_N));
  moor_close(m);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return 0;
}
