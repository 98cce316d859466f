/* moor engine benchmark, driven through the public API (host/moor.h) as an
 * embedder would. Prints figures; asserts nothing about time (see README).
 * This file: the figures of issue 13's targets, each taken in three rounds on
 * fresh databases and printed as min-max, and main; bench_agents.c: the
 * sections taken once (sessions, patterns, tasks, workflow).
 *
 *   moor_bench [AGENT_DIR [TASK_AGENT_DIR [WORKFLOW_AGENT_DIR]]]
 *   (defaults: tests/bench/agent, tests/bench/task_agent, tests/bench/workflow_agent)
 */
#define _GNU_SOURCE /* dlsym(RTLD_NEXT): the SQLite counters below */
#include "bench.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

long rss_kib(void) {
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
const char *task_agent = "tests/bench/task_agent";
const char *workflow_agent = "tests/bench/workflow_agent";
static char dir[] = "/tmp/moor-bench-XXXXXX";

moor *open_agent_db(const char *name, int durability, const char *agent_dir) {
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

moor *open_db(const char *name, int durability) { return open_agent_db(name, durability, agent); }

void check(moor *m, int rc) {
  if (rc) {
    fprintf(stderr, "bench: %s\n", moor_errmsg(m));
    exit(1);
  }
}

static void call(moor *m, const char *input) {
  char id[64];
  check(m, moor_call(m, "steps", input, id, sizeof id));
}

/* The figures tied to issue 13's targets (sections 1-4 and 10) are taken in
 * ROUNDS rounds, each on fresh databases, the sections taking turns round by
 * round so that the machine's drift falls on each alike, and printed as
 * min-max. The others (sections 5-9: sessions, patterns, tasks, workflow;
 * bench_agents.c) are no target's and are taken once. */
enum { ROUNDS = 3 };

/* One figure over the rounds: its least and its greatest value. */
struct range {
  double lo, hi;
  int n;
};

static void add(struct range *r, double v) {
  if (!r->n++ || v < r->lo) r->lo = v;
  if (r->n == 1 || v > r->hi) r->hi = v;
}

/* r as "lo-hi" in the printf format fmt (one value when the rounds agree to
 * that precision), in one of 8 buffers taken in turn: several fit in one
 * printf. */
static const char *rg(const struct range *r, const char *fmt) {
  static char buf[8][64];
  static int k;
  char *b = buf[k++ % 8], lo[28], hi[28];
  snprintf(lo, sizeof lo, fmt, r->lo);
  snprintf(hi, sizeof hi, fmt, r->hi);
  if (strcmp(lo, hi))
    snprintf(b, sizeof buf[0], "%s-%s", lo, hi);
  else
    snprintf(b, sizeof buf[0], "%s", lo);
  return b;
}

/* 1. One run of 10,000 trivial steps: each step is its own commit. */
struct one_fig {
  struct range us, commits, faults, wal, prepared;
};

static void one_run(int round, struct one_fig *f) {
  char db[32];
  snprintf(db, sizeof db, "one-%d.db", round);
  moor *m = open_db(db, MOOR_DURABILITY_NORMAL);
  long flt0 = minflt(), prep0 = n_prepared, com0 = n_commits, fr0 = n_frames;
  double t0 = now_s();
  call(m, "{\"n\":10000}");
  check(m, moor_run(m));
  double dt = now_s() - t0;
  long commits = n_commits - com0;
  add(&f->us, dt / 10000 * 1e6);
  add(&f->commits, commits);
  add(&f->faults, (double)(minflt() - flt0) / commits);
  add(&f->wal, (double)(n_frames - fr0) / commits);
  add(&f->prepared, n_prepared - prep0);
  moor_close(m);
}

/* 2. 100 concurrent runs of 100 steps: results of one round share a commit.
 * synchronous=NORMAL, then FULL. */
static const char *sync_names[] = {"normal", "full"};

struct conc_fig {
  struct range rate[2], commits[2], wal[2], faults[2], ratio;
};

static void concurrent(int round, struct conc_fig *f) {
  double rate[2];
  for (int d = 0; d < 2; d++) {
    char db[32];
    snprintf(db, sizeof db, "conc-%s-%d.db", sync_names[d], round);
    moor *m = open_db(db, d);
    long com0 = n_commits, fr0 = n_frames, flt0 = minflt();
    double t0 = now_s();
    for (int i = 0; i < 100; i++) call(m, "{\"n\":100}");
    check(m, moor_run(m));
    rate[d] = 10000 / (now_s() - t0);
    long commits = n_commits - com0;
    add(&f->rate[d], rate[d]);
    add(&f->commits[d], commits);
    add(&f->wal[d], (double)(n_frames - fr0) / commits);
    add(&f->faults[d], (double)(minflt() - flt0) / commits);
    moor_close(m);
  }
  add(&f->ratio, rate[1] / rate[0]);
}

/* 3. Replay: a run with a 10,000-step log parked on a sleep, reloaded by a
 * new engine (a restart) and replayed up to the sleep. */
struct replay_fig {
  struct range rate, load_ms, replay_ms;
};

static void replay(int round, struct replay_fig *f) {
  char db[32];
  snprintf(db, sizeof db, "replay-%d.db", round);
  moor *m = open_db(db, MOOR_DURABILITY_NORMAL);
  call(m, "{\"n\":10000,\"park\":\"1h\"}");
  long long due = 0;
  check(m, moor_tick(m, &due));
  moor_close(m);
  m = open_db(db, MOOR_DURABILITY_NORMAL);
  double t0 = now_s();
  check(m, moor_resume_all(m));
  double loaded = now_s() - t0;
  check(m, moor_tick(m, &due));
  double rep = now_s() - t0;
  add(&f->rate, 10000 / rep);
  add(&f->load_ms, loaded * 1e3);
  add(&f->replay_ms, (rep - loaded) * 1e3);
  moor_close(m);
}

/* 4. Memory: 10,000 runs parked on a sleep. */
struct park_fig {
  struct range kib, before, after;
};

static void park(int round, struct park_fig *f) {
  char db[32];
  snprintf(db, sizeof db, "park-%d.db", round);
  moor *m = open_db(db, MOOR_DURABILITY_NORMAL);
  long long due = 0;
  check(m, moor_tick(m, &due));
  malloc_trim(0); /* (the free heap MOOR_MALLOC_TRIM_THRESHOLD keeps, and earlier rounds', would hide growth) */
  long before = rss_kib();
  for (int i = 0; i < 10000; i++) call(m, "{\"n\":0,\"park\":\"1h\"}");
  check(m, moor_tick(m, &due));
  long after = rss_kib();
  add(&f->kib, (after - before) / 10000.0);
  add(&f->before, before);
  add(&f->after, after);
  moor_close(m);
}

/* 10. The store's share of a short run (issue 13): 2,000 runs of one step,
 * each from moor_call to moor_run's return (its result checked after), with
 * the statements SQLite prepared and the page faults taken meanwhile. */
enum { ONE_N = 2000, PARK_N = 1000 };

struct short_fig {
  struct range mean, p50, p99, prepared, commits, faults, wal;
};

static void short_runs(int round, struct short_fig *f) {
  char db[32];
  snprintf(db, sizeof db, "short-%d.db", round);
  moor *m = open_db(db, MOOR_DURABILITY_NORMAL);
  static double lat[ONE_N];
  long prep_runs = 0, flt_runs = 0, com_runs = 0, fr_runs = 0;
  for (int i = -200; i < ONE_N; i++) { /* (200 to warm up) */
    char id[64];
    long p = n_prepared, fl = minflt(), c = n_commits, w = n_frames;
    double t0 = now_s();
    check(m, moor_call(m, "steps", "{\"n\":1}", id, sizeof id));
    check(m, moor_run(m));
    double dt = now_s() - t0;
    if (i >= 0) {
      lat[i] = dt;
      prep_runs += n_prepared - p;
      flt_runs += minflt() - fl;
      com_runs += n_commits - c;
      fr_runs += n_frames - w;
    }
    char *status = NULL, *json = NULL;
    check(m, moor_run_info(m, id, &status, &json));
    if (!status || strcmp(status, "completed")) {
      fprintf(stderr, "bench: a 1-step run ended %s\n", status ? status : "?");
      exit(1);
    }
    free(status);
    free(json);
  }
  double sum = 0;
  for (int i = 0; i < ONE_N; i++) sum += lat[i];
  qsort(lat, ONE_N, sizeof lat[0], cmp_double);
  add(&f->mean, sum / ONE_N * 1e6);
  add(&f->p50, lat[ONE_N / 2] * 1e6);
  add(&f->p99, lat[ONE_N * 99 / 100] * 1e6);
  add(&f->prepared, (double)prep_runs / ONE_N);
  add(&f->commits, (double)com_runs / ONE_N);
  add(&f->faults, (double)flt_runs / com_runs);
  add(&f->wal, (double)fr_runs / com_runs);
  moor_close(m);
}

/* 10, then: a restart that resumes 1,000 runs parked on a question and
 * 1,000 on a hook (their rows read back: questions, hooks, deliveries). */
struct restart_fig {
  struct range us, prepared;
};

static void restart(int round, struct restart_fig *f) {
  char db[32];
  snprintf(db, sizeof db, "restart-%d.db", round);
  moor *m = open_db(db, MOOR_DURABILITY_NORMAL);
  for (int i = 0; i < PARK_N; i++) {
    char id[64];
    check(m, moor_call(m, "ask", "{}", id, sizeof id));
    check(m, moor_call(m, "webhook", "{\"mode\":\"queue\"}", id, sizeof id));
  }
  check(m, moor_run(m));
  moor_close(m);
  m = open_db(db, MOOR_DURABILITY_NORMAL);
  long p = n_prepared;
  double t0 = now_s();
  check(m, moor_resume_all(m));
  check(m, moor_run(m));
  double resumed = now_s() - t0;
  add(&f->us, resumed / (2 * PARK_N) * 1e6);
  add(&f->prepared, (double)(n_prepared - p) / (2 * PARK_N));
  moor_close(m);
}

int main(int argc, char **argv) {
  if (argc > 1) agent = argv[1];
  if (argc > 2) task_agent = argv[2];
  if (argc > 3) workflow_agent = argv[3];
  if (!mkdtemp(dir)) return 1;
  printf("moor %s engine benchmark (figures, not pass/fail; a-b: min-max over %d rounds, each on fresh databases)\n\n",
         MOOR_VERSION, ROUNDS);

  struct one_fig one = {0};
  struct conc_fig conc = {0};
  struct replay_fig rep = {0};
  struct park_fig pk = {0};
  struct short_fig sh = {0};
  struct restart_fig rs = {0};
  for (int r = 0; r < ROUNDS; r++) {
    one_run(r, &one);
    concurrent(r, &conc);
    replay(r, &rep);
    park(r, &pk);
    short_runs(r, &sh);
    restart(r, &rs);
  }
  printf("one run, 10,000 steps:            %13s us/step   (target <= 50)\n", rg(&one.us, "%.1f"));
  printf("  (%s commits: %s page faults, %s WAL pages per commit; %s statements prepared)\n",
         rg(&one.commits, "%.0f"), rg(&one.faults, "%.2f"), rg(&one.wal, "%.2f"), rg(&one.prepared, "%.0f"));
  for (int d = 0; d < 2; d++)
    printf("100 concurrent runs, sync=%-6s  %13s steps/s  (%s commits: %s WAL pages, %s page faults each%s)\n",
           sync_names[d], rg(&conc.rate[d], "%.0f"), rg(&conc.commits[d], "%.0f"), rg(&conc.wal[d], "%.1f"),
           rg(&conc.faults[d], "%.1f"), d ? "" : "; target >= 120,000");
  printf("  full / normal:                  %13s            (target >= 0.67: FULL within 1.5x of NORMAL)\n",
         rg(&conc.ratio, "%.2f"));
  printf("  (load %s ms, replay %s ms)\n", rg(&rep.load_ms, "%.1f"), rg(&rep.replay_ms, "%.1f"));
  printf("replay of a 10,000-step log:      %13s ops/s     (target >= 1,500,000)\n", rg(&rep.rate, "%.0f"));
  printf("10,000 runs parked on a sleep:    %13s KiB/run  (target <= 8; RSS %s -> %s KiB)\n", rg(&pk.kib, "%.2f"),
         rg(&pk.before, "%.0f"), rg(&pk.after, "%.0f"));
  fflush(stdout);

  bench_agents(); /* sections 5-9 (bench_agents.c) */

  /* 10. (measured in the rounds above) */
  printf("1-step run, moor_call to result:  %13s us/run    (p50 %s, p99 %s; target <= 80)\n", rg(&sh.mean, "%.1f"),
         rg(&sh.p50, "%.1f"), rg(&sh.p99, "%.1f"));
  printf("  (per run: %s statements prepared, %s commits; %s page faults, %s WAL pages per commit)\n",
         rg(&sh.prepared, "%.2f"), rg(&sh.commits, "%.2f"), rg(&sh.faults, "%.2f"), rg(&sh.wal, "%.2f"));
  printf("restart, %d parked runs resumed: %13s us/run    (half on a question, half on a hook; "
         "%s statements prepared per run)\n", 2 * PARK_N, rg(&rs.us, "%.1f"), rg(&rs.prepared, "%.2f"));

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return 0;
}
