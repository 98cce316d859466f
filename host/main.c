/* moor: the command-line host. It is the first user of host/moor.h and
 * reaches no engine internals. */
#include "moor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *USAGE =
  "usage: moor <command> [options]\n"
  "\n"
  "commands:\n"
  "  call TOOL [JSON]   start a run of TOOL with JSON input (default {}), drive it,\n"
  "                     print progress to stderr and the result JSON on stdout\n"
  "  resume             drive every unfinished run until none is runnable or due\n"
  "  runs [--json]      list runs (id, tool, status, started, updated)\n"
  "  logs RUN [--json]  print a run's event log\n"
  "  test [PATH...]     run busted specs inside the host (default: tests/lua)\n"
  "  help               this text\n"
  "\n"
  "options:\n"
  "  --agent DIR        the agent project (default: agent)\n"
  "  --db FILE          the SQLite database (default: $MOOR_DB or .moor/moor.db)\n"
  "  --durability MODE  normal (survives a killed process; default) or full\n"
  "                     (also survives power loss); or $MOOR_DURABILITY\n"
  "  --version          print the version\n"
  "\n"
  "exit status: 0 success, 1 the tool failed, 2 usage or load error\n";

typedef struct opts {
  const char *agent, *db, *cmd;
  int durability, json;
  int nargs;
  char **args;
} opts;

static int usage_error(const char *msg, const char *arg) {
  fprintf(stderr, "moor: ");
  fprintf(stderr, msg, arg);
  fprintf(stderr, "\nrun 'moor help' for usage\n");
  return 2;
}

static int parse(int argc, char **argv, opts *o) {
  o->args = calloc((size_t)argc + 1, sizeof *o->args);
  if (!o->args) return usage_error("out of memory%s", "");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--agent") || !strcmp(a, "--db") || !strcmp(a, "--durability")) {
      if (i + 1 >= argc) return usage_error("%s needs a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--agent")) o->agent = v;
      else if (!strcmp(a, "--db")) o->db = v;
      else if (!strcmp(v, "full")) o->durability = MOOR_DURABILITY_FULL;
      else if (!strcmp(v, "normal")) o->durability = MOOR_DURABILITY_NORMAL;
      else return usage_error("--durability must be normal or full, not '%s'", v);
    } else if (!strcmp(a, "--json")) {
      o->json = 1;
    } else if (!strcmp(a, "--version") || !strcmp(a, "-v")) {
      o->cmd = "version";
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      o->cmd = "help";
    } else if (a[0] == '-' && a[1] == '-' && !(o->cmd && !strcmp(o->cmd, "test"))) {
      return usage_error("unknown option '%s'", a);
    } else if (!o->cmd) {
      o->cmd = a;
    } else {
      o->args[o->nargs++] = argv[i];
    }
  }
  return 0;
}

/* Progress and retries go to stderr; `moor resume` (ud != NULL) also prints
 * each run that settles, one line on stdout. */
static void print_event(const moor_event *ev, void *ud) {
  if (ud && (!strcmp(ev->kind, "run.completed") || !strcmp(ev->kind, "run.failed")))
    printf("%s %s %s\n", ev->run_id, ev->kind + 4, ev->payload);
  if (!strcmp(ev->kind, "progress")) fprintf(stderr, "progress: %s\n", ev->payload);
  else if (!strcmp(ev->kind, "step.retry"))
    fprintf(stderr, "retry: step %s: %s\n", ev->name ? ev->name : "?", ev->payload);
  else if (!strcmp(ev->kind, "run.note")) fprintf(stderr, "note: %s\n", ev->payload);
}

static moor *open_engine(const opts *o, int read_only, int *status) {
  moor_config cfg = {o->db, o->durability, NULL, read_only};
  moor *m = NULL;
  int rc = moor_open(&m, &cfg);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    moor_close(m);
    *status = 2;
    return NULL;
  }
  return m;
}

static int load(moor *m, const opts *o) {
  int rc = moor_load_agent(m, o->agent ? o->agent : "agent");
  if (rc == MOOR_ELOAD) {
    fprintf(stderr, "%s\n", moor_errmsg(m));
    return 2;
  }
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    return 2;
  }
  return 0;
}

/* Print a settled run: result JSON on stdout (exit 0), or the error on stderr (exit 1). */
static int report(moor *m, const char *run_id) {
  char *status = NULL, *json = NULL;
  if (moor_run_info(m, run_id, &status, &json)) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    return 2;
  }
  int code;
  if (!strcmp(status, "completed")) {
    printf("%s\n", json);
    code = 0;
  } else if (!strcmp(status, "failed")) {
    fprintf(stderr, "moor: run %s failed: %s\n", run_id, json);
    code = 1;
  } else {
    fprintf(stderr, "moor: run %s is %s (nothing is due; drive it later with 'moor resume')\n",
            run_id, status);
    code = 1;
  }
  free(status);
  free(json);
  return code;
}

static int cmd_call(const opts *o) {
  if (o->nargs < 1 || o->nargs > 2) return usage_error("call needs TOOL [JSON]%s", "");
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  if ((status = load(m, o))) goto out;
  moor_on_event(m, print_event, NULL);
  char run_id[64];
  int rc = moor_call(m, o->args[0], o->nargs > 1 ? o->args[1] : "{}", run_id, sizeof run_id);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 2;
    goto out;
  }
  fprintf(stderr, "run %s started\n", run_id);
  if ((rc = moor_run(m))) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 1;
    goto out;
  }
  status = report(m, run_id);
out:
  moor_close(m);
  return status;
}

static int cmd_resume(const opts *o) {
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  if ((status = load(m, o))) goto out;
  moor_on_event(m, print_event, (void *)1);
  int rc = moor_resume_all(m);
  if (!rc) rc = moor_run(m);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 1;
  }
out:
  moor_close(m);
  return status;
}

static int cmd_list(const opts *o, int events) {
  if (events && o->nargs != 1) return usage_error("logs needs a RUN id%s", "");
  int status = 0;
  moor *m = open_engine(o, 1, &status);
  if (!m) return status;
  char *json = NULL;
  int rc = events ? moor_list_events(m, o->args[0], o->json, &json) : moor_list_runs(m, o->json, &json);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = rc == MOOR_ENOTFOUND ? 1 : 2;
  } else {
    fputs(json, stdout);
  }
  free(json);
  moor_close(m);
  return status;
}

static int cmd_test(const opts *o) {
  /* Specs get their own throwaway database unless --db names one. */
  char tmpl[] = "/tmp/moor-test-XXXXXX";
  char dbpath[128];
  opts t = *o;
  if (!t.db) {
    if (!mkdtemp(tmpl)) return usage_error("cannot create a temporary directory%s", "");
    snprintf(dbpath, sizeof dbpath, "%s/test.db", tmpl);
    t.db = dbpath;
  }
  int status = 0;
  moor *m = open_engine(&t, 0, &status);
  if (m) {
    if (o->agent && (status = load(m, o))) {
      moor_close(m);
      return status;
    }
    status = moor_test(m, o->nargs, o->args);
    if (status < 0) {
      fprintf(stderr, "moor: %s\n", moor_errmsg(m));
      status = 2;
    }
    moor_close(m);
  }
  if (!o->db) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    if (system(cmd) != 0) { /* a leftover temp dir is harmless */ }
  }
  return status;
}

int main(int argc, char **argv) {
  opts o = {0};
  int status = parse(argc, argv, &o);
  if (status) goto done;
  const char *c = o.cmd;
  if (!c || !strcmp(c, "help")) {
    fputs(USAGE, c ? stdout : stderr);
    status = c ? 0 : 2;
  } else if (!strcmp(c, "version")) {
    printf("moor %s\n", MOOR_VERSION);
  } else if (!strcmp(c, "call")) {
    status = cmd_call(&o);
  } else if (!strcmp(c, "resume")) {
    status = cmd_resume(&o);
  } else if (!strcmp(c, "runs")) {
    status = cmd_list(&o, 0);
  } else if (!strcmp(c, "logs")) {
    status = cmd_list(&o, 1);
  } else if (!strcmp(c, "test")) {
    status = cmd_test(&o);
  } else {
    status = usage_error("unknown command '%s'", c);
  }
done:
  free(o.args);
  fflush(stdout);
  return status;
}
