/* Restart after kill -9 (issue 13, item 6): `moor call` of
 * tests/bench/resume_agent's resume_steps runs 1,000 trivial durable steps,
 * then the step `edge`, whose first attempt writes a "ready" file and blocks;
 * this driver then kill -9s that process (the pid it started, no other),
 * takes CLOCK_MONOTONIC and starts `moor resume`. The re-run of `edge` (the
 * first new step) writes its own CLOCK_MONOTONIC reading (moor.core's mono):
 * the figure is that less the driver's reading, process start to first new
 * step. Three runs, min-max, and the whole `moor resume` wall time.
 *
 * Then the breakdown: three more runs with $MOOR_TRACE_START set, where the
 * host prints the time of each phase of its start (host/moor.c's trace), and
 * reference starts: `moor --version` (exec, dynamic loading, exit; no Lua),
 * a resume of the same tool with no steps before `edge` (the difference is
 * the replay of 1,000 steps), and the restart with $MOOR_LUA_BYTECODE=0
 * (moor's Lua parsed from source, as before moor.luab).
 *
 *   moor_resume_bench build/moor tests/bench/resume_agent build/resume-bench */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS 3
#define MAX_PHASES 16

static const char *moor_bin, *agent_dir, *work;

static long long mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *fmt, const char *a) {
  fprintf(stderr, "moor_resume_bench: ");
  fprintf(stderr, fmt, a);
  fputc('\n', stderr);
  exit(1);
}

static void path(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", work, name); }

/* fork/exec argv with stdout to /dev/null and stderr to err_file; the
 * environment gets MOOR_TRACE_START=1 when trace, and MOOR_LUA_BYTECODE=0
 * when from_source. */
static int from_source;

static pid_t spawn(char *const argv[], const char *err_file, int trace) {
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    int err = open(err_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (null < 0 || err < 0) _exit(126);
    dup2(null, 0);
    dup2(null, 1);
    dup2(err, 2);
    if (trace) setenv("MOOR_TRACE_START", "1", 1);
    else unsetenv("MOOR_TRACE_START");
    if (from_source) setenv("MOOR_LUA_BYTECODE", "0", 1);
    else unsetenv("MOOR_LUA_BYTECODE");
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static void show_file(const char *file) {
  char line[1024];
  FILE *f = fopen(file, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) fprintf(stderr, "  %s", line);
  fclose(f);
}

static void wait_ok(pid_t pid, const char *what, const char *err_file) {
  int st;
  if (waitpid(pid, &st, 0) != pid) die("waitpid: %s", strerror(errno));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "moor_resume_bench: %s failed (status %d); its stderr:\n", what, st);
    show_file(err_file);
    exit(1);
  }
}

static long long read_ll(const char *file) {
  FILE *f = fopen(file, "r");
  long long v = -1;
  if (!f || fscanf(f, "%lld", &v) != 1) die("cannot read a number from %s", file);
  fclose(f);
  return v;
}

typedef struct phase {
  char name[32];
  long long at; /* us since the driver's start of `moor resume` */
} phase;

typedef struct result {
  long long first_step, wall; /* us */
  phase ph[MAX_PHASES];
  int nph;
} result;

/* One kill -9 and restart of a run with n steps before `edge`. */
static result restart(int n, int trace) {
  char db[1024], ready[1024], block[1024], out[1024], call_err[1024], resume_err[1024], input[4096];
  static const char *const suffixes[] = {"", "-wal", "-shm", ".lock"};
  path(db, sizeof db, "resume.db");
  for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
    char f[1100];
    snprintf(f, sizeof f, "%s%s", db, suffixes[i]);
    unlink(f);
  }
  path(ready, sizeof ready, "ready");
  path(block, sizeof block, "block");
  path(out, sizeof out, "out");
  path(call_err, sizeof call_err, "call.err");
  path(resume_err, sizeof resume_err, "resume.err");
  unlink(ready);
  unlink(block);
  unlink(out);
  if (mkfifo(block, 0600)) die("mkfifo: %s", strerror(errno));
  snprintf(input, sizeof input, "{\"n\":%d,\"ready\":\"%s\",\"block\":\"%s\",\"out\":\"%s\"}", n, ready, block, out);

  char *call_argv[] = {(char *)moor_bin, "call", "resume_steps", input, "--db", db, "--agent", (char *)agent_dir, NULL};
  pid_t pid = spawn(call_argv, call_err, 0);
  /* Bounded: 60 s for 1,000 steps and the kill signal. */
  long long deadline = mono_us() + 60 * 1000000LL;
  struct stat st;
  while (stat(ready, &st) != 0) {
    int ws;
    if (waitpid(pid, &ws, WNOHANG) == pid) {
      fprintf(stderr, "moor_resume_bench: moor call exited (status %d) before its step was ready:\n", ws);
      show_file(call_err);
      exit(1);
    }
    if (mono_us() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      die("moor call was not ready within 60 s%s", "");
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  kill(pid, SIGKILL);
  int ws;
  if (waitpid(pid, &ws, 0) != pid || !WIFSIGNALED(ws)) die("moor call was not killed by the signal%s", "");

  char *resume_argv[] = {(char *)moor_bin, "resume", "--db", db, "--agent", (char *)agent_dir, NULL};
  result r = {0};
  long long t0 = mono_us();
  pid = spawn(resume_argv, resume_err, trace);
  wait_ok(pid, "moor resume", resume_err);
  r.wall = mono_us() - t0;
  r.first_step = read_ll(out) - t0;
  if (trace) {
    FILE *f = fopen(resume_err, "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f) && r.nph < MAX_PHASES) {
      long long at;
      char name[32];
      if (sscanf(line, "moor-trace %lld %31s", &at, name) == 2) {
        snprintf(r.ph[r.nph].name, sizeof r.ph[r.nph].name, "%s", name);
        r.ph[r.nph++].at = at - t0;
      }
    }
    if (f) fclose(f);
    if (!r.nph) die("no moor-trace lines from moor resume (MOOR_TRACE_START): is %s built from this tree?", moor_bin);
  }
  return r;
}

static void minmax(const long long *v, int n, long long *lo, long long *hi) {
  *lo = *hi = v[0];
  for (int i = 1; i < n; i++) {
    if (v[i] < *lo) *lo = v[i];
    if (v[i] > *hi) *hi = v[i];
  }
}

static void range_line(const char *label, const long long *v, int n) {
  long long lo, hi;
  minmax(v, n, &lo, &hi);
  printf("%-58s %6.2f-%6.2f ms\n", label, lo / 1e3, hi / 1e3);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MOOR_BIN AGENT_DIR WORK_DIR\n", argv[0]);
    return 2;
  }
  moor_bin = argv[1], agent_dir = argv[2], work = argv[3];
  mkdir(work, 0700);

  long long first[RUNS], wall[RUNS];
  restart(1000, 0); /* warm the page cache; not counted */
  for (int i = 0; i < RUNS; i++) {
    result r = restart(1000, 0);
    first[i] = r.first_step, wall[i] = r.wall;
  }
  printf("restart after kill -9, 1,000 steps done (three runs; target: first new step <= 5 ms)\n");
  range_line("  process start to the first new step", first, RUNS);
  range_line("  the whole `moor resume` (to its exit)", wall, RUNS);

  /* The breakdown: the host's trace of its phases. */
  result tr[RUNS];
  for (int i = 0; i < RUNS; i++) tr[i] = restart(1000, 1);
  printf("breakdown (MOOR_TRACE_START; each phase ends at the host's mark; three runs)\n");
  static const struct {
    const char *mark, *label;
  } phases[] = {
      {"loaded", "fork, exec and dynamic loading (to the first constructor)"},
      {"open", "main, options, to moor_open"},
      {"loop+curl", "the event loop and the HTTP client's handle"},
      {"store", "the lock and SQLite (open, schema, statements)"},
      {"lua.new", "the Lua directory, luaL_newstate"},
      {"lua.libs", "Lua's libraries and moor.core"},
      {"lua.engine", "require \"moor.host\": moor's Lua modules"},
      {"agent", "the agent's tools and the built-in ones"},
      {"resume_all", "resume_all (harness recovery, the unfinished runs)"},
      {"first step", "the first tick: replay of 1,000 steps, to the new step"},
      {"exit", "the step, its commit, close and exit"},
  };
  long long prev[RUNS] = {0};
  for (size_t p = 0; p < sizeof phases / sizeof phases[0]; p++) {
    long long d[RUNS];
    for (int i = 0; i < RUNS; i++) {
      long long at = -1;
      if (!strcmp(phases[p].mark, "first step")) at = tr[i].first_step;
      else if (!strcmp(phases[p].mark, "exit")) at = tr[i].wall;
      for (int k = 0; k < tr[i].nph && at < 0; k++)
        if (!strcmp(tr[i].ph[k].name, phases[p].mark)) at = tr[i].ph[k].at;
      if (at < 0) die("the trace has no mark '%s'", phases[p].mark);
      d[i] = at - prev[i];
      prev[i] = at;
    }
    char label[96];
    snprintf(label, sizeof label, "  %s", phases[p].label);
    range_line(label, d, RUNS);
  }
  long long tf[RUNS];
  for (int i = 0; i < RUNS; i++) tf[i] = tr[i].first_step;
  range_line("  (traced: process start to the first new step)", tf, RUNS);

  /* References: a start with no Lua at all, and a restart with no replay. */
  long long ver[RUNS], zero[RUNS];
  char ver_err[1024];
  path(ver_err, sizeof ver_err, "version.err");
  for (int i = 0; i < RUNS; i++) {
    char *v_argv[] = {(char *)moor_bin, "--version", NULL};
    long long t0 = mono_us();
    wait_ok(spawn(v_argv, ver_err, 0), "moor --version", ver_err);
    ver[i] = mono_us() - t0;
  }
  for (int i = 0; i < RUNS; i++) zero[i] = restart(0, 0).first_step;
  long long src[RUNS];
  from_source = 1;
  for (int i = 0; i < RUNS; i++) src[i] = restart(1000, 0).first_step;
  from_source = 0;
  printf("references (three runs)\n");
  range_line("  `moor --version` to its exit (exec, dynamic loading, no Lua)", ver, RUNS);
  range_line("  restart with no steps done, to the first new step", zero, RUNS);
  range_line("  the restart with MOOR_LUA_BYTECODE=0 (moor's Lua parsed)", src, RUNS);
  return 0;
}
