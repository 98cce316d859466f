/* moor: the command-line host. It is the first user of host/moor.h and
 * reaches no engine internals. */
#include "moor.h"
#include "json.h" /* moor's JSON codec, to read a request's approval binding */
#include "moorconf.h" /* the defaults it shows and the limits of its HTTP client */

#include <curl/curl.h>
#include "curl_dl.h" /* libcurl loaded at its first use */
#include <lauxlib.h>
#include <lualib.h>
#include <uv.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *USAGE =
  "usage: moor <command> [options]\n"
  "\n"
  "commands:\n"
  "  call TOOL [JSON]   start a run of TOOL with JSON input (default {}), drive it,\n"
  "                     print progress to stderr and the result JSON on stdout\n"
  "  resume             drive every unfinished run until none is runnable or due,\n"
  "                     then say what the rest wait on (exit 0)\n"
  "  runs [--json] [--status S] [--tool NAME] [--limit N]\n"
  "                     list runs (id, tool, status, started, updated): S is running,\n"
  "                     waiting (parked on a question, hook, sleep or child),\n"
  "                     completed, failed or cancelled; N the newest N\n"
  "  inputs [--json]    list pending questions with their request ids\n"
  "  logs RUN [--json]  print a run's event log\n"
  "  dev                serve the HTTP API and drive every run until SIGINT/SIGTERM;\n"
  "                     the first line of stdout is the URL it listens on\n"
  "  answer REQUEST (OPTION | --text TEXT)\n"
  "                     answer a pending question (through a running moor dev,\n"
  "                     else in the database)\n"
  "  cancel RUN         cancel a run (through a running moor dev, else in the database)\n"
  "  mcp                serve the agent's tools over MCP on stdin/stdout (JSON-RPC\n"
  "                     a line; logs on stderr); runs resume at start\n"
  "  chat               talk with the agent in the terminal: type messages (a message\n"
  "                     sent while a turn runs steers it; one that matches a pending\n"
  "                     question answers it); Ctrl-C cancels the session and quits\n"
  "  test [PATH...]     run busted specs inside the host (default: tests/lua)\n"
  "  init [DIR]         write a new agent project into DIR (default: here); never\n"
  "                     overwrites a file\n"
  "  help               this text\n"
  "\n"
  "options:\n"
  "  --agent DIR        the agent project (default: agent)\n"
  "  --db FILE          the SQLite database (default: $MOOR_DB or .moor/moor.db)\n"
  "  --durability MODE  normal (survives a killed process; default) or full\n"
  "                     (also survives power loss); or $MOOR_DURABILITY\n"
  "  --listen ADDR      moor dev's address (default " MOOR_DEFAULT_LISTEN "; port 0 picks one);\n"
  "                     a non-loopback address needs $MOOR_API_TOKEN (32+ characters);\n"
  "                     $MOOR_PUBLIC_URL (https://host[:port]) is the address\n"
  "                     webhook URLs use and, with $MOOR_API_TOKEN, a Host the\n"
  "                     API also answers to\n"
  "  --public-url URL   the base of every URL moor hands out (webhooks, sign-in\n"
  "                     callbacks), e.g. a tunnel's or proxy's address; sets\n"
  "                     $MOOR_PUBLIC_URL (default: the listen address)\n"
  "  --body-limit BYTES largest HTTP request body (default 1 MiB; or $MOOR_BODY_LIMIT)\n"
  "  --no-input         moor call: the run has no channel for questions\n"
  "                     (ctx.ask answers \"unavailable\" at once)\n"
  "  --version          print the version\n"
  "\n"
  "exit status: 0 success, 1 the tool failed, 2 usage or load error (runs and logs:\n"
  "             no database at FILE)\n";

typedef struct opts {
  const char *agent, *db, *cmd, *listen, *text, *status, *tool;
  int durability, json, no_input, limit;
  size_t body_limit;
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
    } else if (!strcmp(a, "--listen") || !strcmp(a, "--text") || !strcmp(a, "--body-limit") ||
               !strcmp(a, "--public-url") || !strcmp(a, "--status") || !strcmp(a, "--tool") ||
               !strcmp(a, "--limit")) {
      if (i + 1 >= argc) return usage_error("%s needs a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--listen")) o->listen = v;
      else if (!strcmp(a, "--status")) o->status = v;
      else if (!strcmp(a, "--tool")) o->tool = v;
      else if (!strcmp(a, "--limit")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || end == v || n <= 0 || n > 1000000)
          return usage_error("--limit must be a number of runs (1 or more), not '%s'", v);
        o->limit = (int)n;
      }
      else if (!strcmp(a, "--public-url")) {
        /* The engine reads it where URLs are minted (lua/moor/conf.lua, moor.host serving). */
        if (setenv("MOOR_PUBLIC_URL", v, 1)) return usage_error("cannot set MOOR_PUBLIC_URL%s", "");
      }
      else if (!strcmp(a, "--text")) o->text = v;
      else {
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        if (*end || n == 0 || *v == '-') return usage_error("--body-limit must be a number of bytes, not '%s'", v);
        o->body_limit = (size_t)n;
      }
    } else if (!strcmp(a, "--no-input")) {
      o->no_input = 1;
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
static void json_string_field(const char *json, const char *field, char *out, size_t len);

static void print_event(const moor_event *ev, void *ud) {
  if (ev->seq == 0) return; /* live only (message.delta): not for the log lines */
  if (ud && (!strcmp(ev->kind, "run.completed") || !strcmp(ev->kind, "run.failed")))
    printf("%s %s %s\n", ev->run_id, ev->kind + 4, ev->payload);
  const char *what = !strcmp(ev->kind, "progress") ? "progress" : !strcmp(ev->kind, "step.retry") ? "retry"
                     : !strcmp(ev->kind, "run.note") ? "note" : !strcmp(ev->kind, "task.started") ? "task" : NULL;
  if (!what) return;
  char *text = strdup(ev->payload); /* for the terminal: no control characters */
  if (!text) return;
  moor_term_clean(text);
  if (!strcmp(what, "retry")) {
    fprintf(stderr, "retry: step %s: %s\n", ev->name ? ev->name : "?", text);
  } else if (!strcmp(what, "task")) {
    /* A task tool called on its own: its receipt, as a session's model reads it. */
    char receipt[256];
    json_string_field(text, "receipt", receipt, sizeof receipt);
    if (receipt[0]) fprintf(stderr, "%s\n", receipt);
  } else {
    fprintf(stderr, "%s: %s\n", what, text);
  }
  free(text);
}

static moor *open_engine(const opts *o, int read_only, int *status) {
  moor_config cfg = {o->db, o->durability, NULL, read_only, o->no_input, o->body_limit, 0};
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

/* Every descriptor the CLI holds once the engine is open and the agent
 * loaded (the lock, the database, sockets, a file a library left open) is
 * made close-on-exec, so a step's child process (os.execute, io.popen) never
 * holds the lock or the database after the host dies. Those opened later
 * are close-on-exec already (SQLite, libuv, moor's curl sockets). */
static void cloexec_all(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *de;
  if (!d) return;
  while ((de = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(de->d_name, &end, 10);
    if (*end || end == de->d_name || fd <= 2 || fd == dirfd(d)) continue;
    int fl = fcntl((int)fd, F_GETFD);
    if (fl >= 0 && !(fl & FD_CLOEXEC)) (void)fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC);
  }
  closedir(d);
}

static int load(moor *m, const opts *o) {
  int rc = moor_load_agent(m, o->agent ? o->agent : "agent");
  cloexec_all();
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
    char *waiting = NULL;
    int known = moor_run_waiting(m, run_id, &waiting) == 0 && waiting;
    if (known) {
      for (char *line = strtok(waiting, "\n"); line; line = strtok(NULL, "\n")) {
        fprintf(stderr, "waiting: %s\n", line);
        if (!strncmp(line, "question ", 9) || !strncmp(line, "approval ", 9))
          fprintf(stderr, "  answer it: moor answer %.*s OPTION (or --text TEXT); 'moor inputs' lists them\n",
                  (int)strcspn(line + 9, " "), line + 9);
      }
    }
    free(waiting);
    if (known)
      fprintf(stderr, "moor: run %s is %s, waiting as above; 'moor resume' or 'moor dev' drives it on\n", run_id,
              status);
    else
      fprintf(stderr,
              "moor: run %s is %s: it waits for something outside (a question: 'moor answer REQUEST "
              "OPTION'; a webhook or hook: 'moor dev' serves them), or a long timer; 'moor resume' or "
              "'moor dev' drives it on\n",
              run_id, status);
    code = 1;
  }
  free(status);
  free(json);
  return code;
}

/* On a terminal, `moor call` asks its questions in place: each
 * input.requested prints the question, and a line typed on stdin answers it
 * (read through the engine's loop, so timers racing the question still fire). */
typedef struct prompt_state {
  moor *m;
  char request[128];      /* the question being asked; "" when none */
  char run_id[64];        /* the run moor call drives, on a terminal */
  char shown[512];        /* the waiting lines last shown */
  uv_poll_t poll;
  int polling;
  uv_timer_t timer;       /* drive's wake-up for the next timer */
  int timing;
  int all;                /* moor resume on a terminal: show every waiting run */
} prompt_state;

static void json_string_field(const char *json, const char *field, char *out, size_t len) {
  /* Enough for our own events: "field":"value" with no escapes in ids. */
  char key[64];
  snprintf(key, sizeof key, "\"%s\":\"", field);
  const char *p = strstr(json, key);
  out[0] = 0;
  if (!p) return;
  p += strlen(key);
  size_t n = strcspn(p, "\"");
  if (n >= len) n = len - 1;
  memcpy(out, p, n);
  out[n] = 0;
}

/* Print a pending question as text (moor_format_input) between before and after. */
static void print_question(moor *m, const char *request, FILE *f, const char *before, const char *after) {
  char *text = NULL;
  if (moor_format_input(m, request, &text) == 0) {
    fprintf(f, "%s%s%s", before, text, after);
    fflush(f);
  }
  free(text);
}

static void show_question(prompt_state *ps) { print_question(ps->m, ps->request, stderr, "\n? ", "\n> "); }

/* A line from stdin for a poll handle, without its newline: 1; or 0 at the
 * end of the input or on an error (the handle is then stopped). */
static int poll_line(uv_poll_t *h, int status, char *line, int size) {
  if (status < 0 || !fgets(line, size, stdin)) {
    uv_poll_stop(h);
    return 0;
  }
  line[strcspn(line, "\n")] = 0;
  return 1;
}

static void on_stdin(uv_poll_t *h, int status, int events) {
  prompt_state *ps = h->data;
  (void)events;
  char line[4096];
  if (!poll_line(h, status, line, sizeof line)) return;
  if (!ps->request[0]) return;
  if (moor_answer_line(ps->m, ps->request, line) == 0) {
    ps->request[0] = 0;
  } else {
    fprintf(stderr, "%s\n", moor_errmsg(ps->m));
    show_question(ps);
  }
}

/* A webhook minted under moor call: nothing serves its URL in this process. */
static void webhook_note(const moor_event *ev) {
  char url[1024];
  json_string_field(ev->payload, "url", url, sizeof url);
  const char *pub = getenv("MOOR_PUBLIC_URL");
  if (pub && *pub)
    fprintf(stderr, "note: webhook %s: moor call serves nothing; deliveries reach this run once a 'moor dev' "
                    "serves the public URL %s\n", moor_term_clean(url), pub);
  else
    fprintf(stderr, "note: webhook %s: moor call serves nothing, so this URL needs a running 'moor dev' on that "
                    "address, or a public URL (--public-url URL or $MOOR_PUBLIC_URL) that reaches one\n",
            moor_term_clean(url));
}

static void show_waiting(moor *m, const char *run_id, char *shown, size_t size);

static void call_event(const moor_event *ev, void *ud) {
  prompt_state *ps = ud;
  print_event(ev, NULL);
  if (!strcmp(ev->kind, "hook.created") && ev->name && !strcmp(ev->name, "webhook")) webhook_note(ev);
  if (!ps) return;
  if (!strcmp(ev->kind, "input.requested")) {
    json_string_field(ev->payload, "requestId", ps->request, sizeof ps->request);
    if (ps->run_id[0]) show_waiting(ps->m, ps->run_id, ps->shown, sizeof ps->shown);
    show_question(ps);
  } else if (!strcmp(ev->kind, "input.resolved")) {
    char id[128];
    json_string_field(ev->payload, "requestId", id, sizeof id);
    if (!strcmp(id, ps->request)) ps->request[0] = 0;
  }
}

/* On a terminal, a wait that lasts (a sleep of 2 s or more, a question) is
 * shown once as it begins: "waiting: sleep until 18:30 (4h)", "waiting:
 * approval req_..." and how to come back after Ctrl-C. */
static void show_waiting(moor *m, const char *run_id, char *shown, size_t size) {
  char *waiting = NULL;
  if (moor_run_waiting(m, run_id, &waiting) || !waiting) {
    free(waiting);
    return;
  }
  if (strcmp(waiting, shown) != 0) {
    snprintf(shown, size, "%s", waiting);
    for (char *line = strtok(waiting, "\n"); line; line = strtok(NULL, "\n")) fprintf(stderr, "waiting: %s\n", line);
    fprintf(stderr, "  (Ctrl-C leaves the run recorded as it is; 'moor resume' or 'moor dev' picks it up)\n");
  }
  free(waiting);
}

/* moor resume on a terminal, before a long sleep: every run still waiting. */
static void show_all_waiting(moor *m, char *shown, size_t size) {
  char *waiting = NULL;
  if (moor_describe_waiting(m, &waiting) == 0 && waiting && strcmp(waiting, shown) != 0) {
    snprintf(shown, size, "%s", waiting);
    fprintf(stderr, "waiting:\n%s  (Ctrl-C stops; the runs stay recorded and 'moor resume' picks them up)\n",
            moor_term_clean(waiting));
  }
  free(waiting);
}

static void on_wake(uv_timer_t *t) { (void)t; }

/* Drive the engine until nothing is runnable or due, sleeping until timers
 * fall due (as moor_run); on a terminal (run_id set) say what a long wait is,
 * and wait for the person's answer while a question is shown. */
static int drive(moor *m, const char *run_id, prompt_state *ps) {
  int rc;
  if (!ps->timing) {
    if (uv_timer_init(moor_loop(m), &ps->timer)) return moor_run(m);
    ps->timing = 1;
  }
  for (;;) {
    long long due;
    if ((rc = moor_tick(m, &due))) break;
    if (due == 0) continue;
    int asking = ps->polling && ps->request[0] && uv_is_active((uv_handle_t *)&ps->poll);
    if (run_id && due >= 2000) show_waiting(m, run_id, ps->shown, sizeof ps->shown);
    if (!run_id && ps->all && due >= 2000) show_all_waiting(m, ps->shown, sizeof ps->shown);
    if (due < 0 && !asking) break;
    if (due > 0) uv_timer_start(&ps->timer, on_wake, (uint64_t)due, 0);
    uv_run(moor_loop(m), UV_RUN_ONCE);
    uv_timer_stop(&ps->timer);
  }
  return rc;
}

static int cmd_call(const opts *o) {
  if (o->nargs < 1 || o->nargs > 2) return usage_error("call needs TOOL [JSON]%s", "");
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  prompt_state ps = {m, "", "", "", {0}, 0, {0}, 0, 0};
  if ((status = load(m, o))) goto out;
  int tty = !o->no_input && isatty(0);
  if (tty && uv_poll_init(moor_loop(m), &ps.poll, 0) == 0) {
    ps.poll.data = &ps;
    ps.polling = 1;
  }
  moor_on_event(m, call_event, tty ? &ps : NULL);
  char run_id[64];
  int rc = moor_call(m, o->args[0], o->nargs > 1 ? o->args[1] : "{}", run_id, sizeof run_id);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = rc == MOOR_EIO ? 1 : 2; /* a commit that failed (a full disk) is no usage error */
    goto out;
  }
  fprintf(stderr, "run %s started\n", run_id);
  if (tty) snprintf(ps.run_id, sizeof ps.run_id, "%s", run_id);
  if (ps.polling) uv_poll_start(&ps.poll, UV_READABLE, on_stdin);
  if ((rc = drive(m, tty ? run_id : NULL, &ps))) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 1;
    goto out;
  }
  status = report(m, run_id);
out:
  if (ps.polling) uv_close((uv_handle_t *)&ps.poll, NULL);
  if (ps.timing) uv_close((uv_handle_t *)&ps.timer, NULL);
  moor_close(m); /* (runs the loop: the handles above finish closing) */
  return status;
}

/* A small client for the commands that reach a running `moor dev`. */
static size_t collect(char *data, size_t size, size_t n, void *ud) {
  char *buf = ud;
  size_t have = strlen(buf), add = size * n;
  if (have + add >= 4096) add = 4095 - have;
  memcpy(buf + have, data, add);
  buf[have + add] = 0;
  return size * n;
}

/* h with "Authorization: Bearer $MOOR_API_TOKEN" added when the token is set. */
static struct curl_slist *with_token(struct curl_slist *h) {
  const char *token = getenv("MOOR_API_TOKEN");
  if (!token || !*token) return h;
  char auth[600];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
  struct curl_slist *more = curl_slist_append(h, auth); /* copies auth */
  return more ? more : h;
}

/* A request to url with headers h (still the caller's) whose answer goes to
 * fn(ud); NULL when curl has no handle. */
static CURL *client(const char *url, struct curl_slist *h, curl_write_callback fn, void *ud) {
  CURL *c = curl_easy_init();
  if (!c) return NULL;
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fn);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, ud);
  return c;
}

/* Run a request made by client (MOOR_CLI_HTTP_TIMEOUT_S at most) and free it
 * and h. Returns the HTTP status, or -1 when the server cannot be reached. */
static int perform(CURL *c, struct curl_slist *h) {
  curl_easy_setopt(c, CURLOPT_TIMEOUT, MOOR_CLI_HTTP_TIMEOUT_S);
  long code = 0;
  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return rc == CURLE_OK ? (int)code : -1;
}

/* POST a JSON body to a running moor dev (with $MOOR_API_TOKEN when set).
 * Returns the HTTP status, or -1 when the server cannot be reached. */
static int post_quiet(const char *url, const char *body, char *resp, size_t resp_size) {
  if (resp && resp_size) resp[0] = 0;
  struct curl_slist *h = with_token(curl_slist_append(NULL, "Content-Type: application/json"));
  CURL *c = client(url, h, collect, resp);
  if (!c) {
    curl_slist_free_all(h);
    return -1;
  }
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  return perform(c, h);
}

/* moor answer / moor cancel through a running moor dev: exit 0, 1 (refused)
 * or 2 (unreachable). */
static int post_json(const char *url, const char *body) {
  char resp[4096];
  int code = post_quiet(url, body, resp, sizeof resp);
  if (code < 0) {
    fprintf(stderr, "moor: cannot reach the running moor dev at %s\n", url);
    return 2;
  }
  if (code >= 300) {
    fprintf(stderr, "moor: %s\n", resp);
    return 1;
  }
  printf("%s\n", resp);
  return 0;
}

static void json_quote(char *out, size_t len, const char *s) {
  size_t k = 0;
  out[k++] = '"';
  for (; *s && k + 8 < len; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      out[k++] = '\\';
      out[k++] = (char)ch;
    } else if (ch < 0x20) {
      k += (size_t)snprintf(out + k, len - k, "\\u%04x", ch);
    } else {
      out[k++] = (char)ch;
    }
  }
  out[k++] = '"';
  out[k] = 0;
}

/* GET a running moor dev's URL into a growing buffer (at most 16 MiB).
 * Returns the HTTP status, or -1; *out is malloc'd (caller frees). */
typedef struct grow_buf {
  char *data;
  size_t len, cap;
} grow_buf;

static size_t grow_collect(char *data, size_t size, size_t n, void *ud) {
  grow_buf *b = ud;
  size_t add = size * n;
  if (b->len + add + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + add + 1) cap *= 2;
    if (cap > MOOR_CLI_RESPONSE_MAX) return 0; /* too big: curl stops with an error */
    char *p = realloc(b->data, cap);
    if (!p) return 0;
    b->data = p;
    b->cap = cap;
  }
  memcpy(b->data + b->len, data, add);
  b->len += add;
  b->data[b->len] = 0;
  return add;
}

static int get_quiet(const char *url, char **out) {
  *out = NULL;
  grow_buf b = {NULL, 0, 0};
  struct curl_slist *h = with_token(NULL);
  CURL *c = client(url, h, grow_collect, &b);
  if (!c) {
    curl_slist_free_all(h);
    return -1;
  }
  int code = perform(c, h);
  if (code < 0 || !b.data) {
    free(b.data);
    return -1;
  }
  *out = b.data;
  return code;
}

/* Find the approval of pending request `id` in GET /v1/inputs' JSON. */
static const char BINDING_LUA[] =
  "local json, text, id = ...\n"
  "local v = json.decode(text)\n"
  "if type(v) ~= 'table' or type(v.inputs) ~= 'table' then return end\n"
  "for _, q in ipairs(v.inputs) do\n"
  "  if type(q) == 'table' and q.requestId == id then\n"
  "    local a = type(q.request) == 'table' and q.request.approval\n"
  "    if type(a) == 'table' and type(a.callId) == 'string' and type(a.inputHash) == 'string' then\n"
  "      return a.callId, a.inputHash, tostring(a.toolName)\n"
  "    end\n"
  "    return\n"
  "  end\n"
  "end\n";

/* The answer a typed line gives the sole pending question of session `sid`
 * in GET /v1/inputs' JSON, as the body of POST /v1/sessions/{sid}
 * ({inputResponses: [...]}, an approval's callId and inputHash from the
 * request shown), or nothing when no single question is pending or the line
 * fits none of its options. */
static const char LINE_LUA[] =
  "local json, text, sid, line = ...\n"
  "local v = json.decode(text)\n"
  "if type(v) ~= 'table' or type(v.inputs) ~= 'table' then return end\n"
  "local q\n"
  "for _, i in ipairs(v.inputs) do\n"
  "  if type(i) == 'table' and i.sessionId == sid then\n"
  "    if q then return end\n"
  "    q = i\n"
  "  end\n"
  "end\n"
  "if not q or type(q.request) ~= 'table' then return end\n"
  "local req, r = q.request, { requestId = q.requestId }\n"
  "line = line:gsub('^%s+', ''):gsub('%s+$', '')\n"
  "local opts = type(req.options) == 'table' and req.options or {}\n"
  "for n, o in ipairs(opts) do\n"
  "  if line == tostring(n) or line == o.id or line:lower() == tostring(o.label):lower() then r.optionId = o.id end\n"
  "end\n"
  "if not r.optionId then\n"
  "  if #opts > 0 and not req.allowFreeform and req.display ~= 'text' then return end\n"
  "  r.text = line\n"
  "end\n"
  "if type(req.approval) == 'table' then r.callId, r.inputHash = req.approval.callId, req.approval.inputHash end\n"
  "return json.encode({ inputResponses = json.array({ r }) })\n";

/* Run one of these chunks over a running moor dev's GET /v1/inputs (in a
 * Lua state of its own, with moor's JSON codec): the chunk gets (moor.json,
 * body, a, b) and returns up to 3 strings. Returns the first as a malloc'd
 * string (caller frees), or NULL; out2/out3 receive the others when given. */
static char *inputs_chunk(const char *base, const char *chunk, const char *a, const char *b, char *out2,
                          size_t out2_len, char *out3, size_t out3_len) {
  char url[2048], *body = NULL, *first = NULL;
  snprintf(url, sizeof url, "%s/v1/inputs", base);
  if (get_quiet(url, &body) != 200) {
    free(body);
    return NULL;
  }
  lua_State *L = luaL_newstate();
  if (L) {
    luaL_openlibs(L);
    if (luaL_loadstring(L, chunk) == LUA_OK) {
      luaL_requiref(L, "moor.json", luaopen_moor_json, 0);
      lua_pushstring(L, body);
      lua_pushstring(L, a);
      if (b) lua_pushstring(L, b);
      else lua_pushnil(L);
      if (lua_pcall(L, 4, 3, 0) == LUA_OK && lua_type(L, -3) == LUA_TSTRING) {
        first = strdup(lua_tostring(L, -3));
        if (out2) snprintf(out2, out2_len, "%s", lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "");
        if (out3) snprintf(out3, out3_len, "%s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?");
      }
    }
    lua_close(L);
  }
  free(body);
  return first;
}

/* `moor answer` through a running moor dev answers an approval with the call
 * id and input hash of the request it names, as GET /v1/inputs shows them
 * (an approval answer over the wire must carry both). Returns 1 and fills
 * call/hash/tool when `id` is a pending approval, else 0. */
static int approval_binding(const char *base, const char *id, char *call, size_t call_len, char *hash,
                            size_t hash_len, char *tool, size_t tool_len) {
  char *c = inputs_chunk(base, BINDING_LUA, id, NULL, hash, hash_len, tool, tool_len);
  if (!c) return 0;
  snprintf(call, call_len, "%s", c);
  free(c);
  return 1;
}

/* A server named by a lock file that another user wrote, or at an address
 * that is not loopback, gets nothing from us: the token least of all. */
static int untrusted_server(const char *url) {
  fprintf(stderr,
          "moor: a moor dev at %s holds the database, but its lock file is another user's or that is not a "
          "loopback address: not sending it MOOR_API_TOKEN (or anything else). Stop that process, or use "
          "--db for another file\n",
          url);
  return 2;
}

/* answer and cancel: through a running moor dev when one holds the
 * database, else directly in the database (the run picks it up on resume). */
static int cmd_answer_or_cancel(const opts *o, int answer) {
  if (answer && !(o->nargs == 2 && !o->text) && !(o->nargs == 1 && o->text))
    return usage_error("answer needs REQUEST and an OPTION id, or REQUEST --text TEXT%s", "");
  if (!answer && o->nargs != 1) return usage_error("cancel needs a RUN id%s", "");
  char url[1024], full[2048], body[9800];
  int found = moor_find_server(o->db, url, sizeof url);
  if (found == MOOR_EINVAL) return untrusted_server(url);
  if (found == 0) {
    if (answer) {
      char q[8200], call[256], hash[256], tool[256], qc[600], qh[600];
      json_quote(q, sizeof q, o->text ? o->text : o->args[1]);
      if (approval_binding(url, o->args[0], call, sizeof call, hash, sizeof hash, tool, sizeof tool)) {
        /* The person names the request; the answer names the call it shows. */
        char tshow[256], cshow[256]; /* the server's words, for a terminal: no control characters */
        snprintf(tshow, sizeof tshow, "%s", tool);
        snprintf(cshow, sizeof cshow, "%s", call);
        fprintf(stderr, "answering the approval of %s (call %s)\n", moor_term_clean(tshow), moor_term_clean(cshow));
        json_quote(qc, sizeof qc, call);
        json_quote(qh, sizeof qh, hash);
        snprintf(body, sizeof body, "{\"%s\":%s,\"callId\":%s,\"inputHash\":%s}", o->text ? "text" : "optionId",
                 q, qc, qh);
      } else {
        snprintf(body, sizeof body, "{\"%s\":%s}", o->text ? "text" : "optionId", q);
      }
      snprintf(full, sizeof full, "%s/v1/inputs/%s", url, o->args[0]);
    } else {
      snprintf(body, sizeof body, "{}");
      snprintf(full, sizeof full, "%s/v1/runs/%s/cancel", url, o->args[0]);
    }
    return post_json(full, body);
  }
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  int rc = answer ? moor_answer(m, o->args[0], o->text ? NULL : o->args[1], o->text)
                  : moor_cancel(m, o->args[0]);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = rc == MOOR_EINVAL || rc == MOOR_ECONFLICT || rc == MOOR_ENOTFOUND ? 1 : 2;
  } else {
    printf(answer ? "answered %s\n" : "cancel requested for %s; it takes effect when the run is driven "
                                       "(moor resume or moor dev)\n", o->args[0]);
  }
  moor_close(m);
  return status;
}

/* moor chat: a session in the terminal, driven in this process. */
typedef struct chat_state {
  moor *m;
  char session[64];
  uv_poll_t poll;
  uv_signal_t sigint;
  int eof, busy, quit;
  int mid; /* the model's text is streaming: the line "agent: ..." is open */
} chat_state;

static void chat_event(const moor_event *ev, void *ud) {
  chat_state *cs = ud;
  if (strcmp(ev->run_id, cs->session) != 0) return;
  if (!strcmp(ev->kind, "turn.started")) cs->busy = 1;
  if (!strcmp(ev->kind, "turn.completed") || !strcmp(ev->kind, "turn.failed")) cs->busy = 0;
  char *line = NULL;
  if (!strcmp(ev->kind, "message.delta")) {
    /* streamed text (seq 0: live only), printed as it comes on one open line */
    if (moor_format_event(cs->m, ev, &line) == 0 && line && *line) {
      if (!cs->mid) fputs("agent: ", stdout);
      fputs(line, stdout);
      cs->mid = 1;
    }
  } else if (!strcmp(ev->kind, "message.completed") && cs->mid) {
    putchar('\n'); /* its text is the streamed one, already shown */
    cs->mid = 0;
  } else if (!strcmp(ev->kind, "input.requested")) {
    char id[128];
    if (cs->mid) putchar('\n');
    cs->mid = 0;
    json_string_field(ev->payload, "requestId", id, sizeof id);
    print_question(cs->m, id, stdout, "? ", "\n  (type your answer)\n");
  } else if (moor_format_event(cs->m, ev, &line) == 0 && line) {
    if (cs->mid) putchar('\n');
    cs->mid = 0;
    printf("%s\n", line);
  }
  free(line);
  fflush(stdout);
}

static void chat_stdin(uv_poll_t *h, int status, int events) {
  chat_state *cs = h->data;
  (void)events;
  char line[8192];
  if (!poll_line(h, status, line, sizeof line)) {
    cs->eof = 1;
    return;
  }
  if (!line[0]) return;
  /* A typed line answers the sole pending question when it fits (the input
   * channel, approvals included), else it is a message. */
  if (moor_session_line(cs->m, cs->session, line)) fprintf(stderr, "moor: %s\n", moor_errmsg(cs->m));
  else cs->busy = 1;
}

static void chat_sigint(uv_signal_t *h, int signum) {
  chat_state *cs = h->data;
  (void)signum;
  fprintf(stderr, "\ncancelling the session\n");
  moor_cancel(cs->m, cs->session);
  cs->quit = 1;
}

/* moor chat through a running moor dev: the session's stream as text
 * (?format=text) read with libcurl's multi interface, stdin polled beside it. */
typedef struct sse_state {
  char buf[16384];
  size_t len;
  int busy;
  int delta, completed; /* the event being read is a message.delta / message.completed */
  int lines;            /* data lines of it so far */
  int mid;              /* streamed text is on an open "agent: ..." line */
} sse_state;

static size_t sse_write(char *data, size_t size, size_t n, void *ud) {
  sse_state *ss = ud;
  size_t total = size * n;
  for (size_t i = 0; i < total; i++) {
    char c = data[i];
    if (c != '\n') {
      if (ss->len + 1 < sizeof ss->buf) ss->buf[ss->len++] = c;
      continue;
    }
    ss->buf[ss->len] = 0;
    if (!strncmp(ss->buf, "event: ", 7)) {
      const char *k = ss->buf + 7;
      if (!strcmp(k, "turn.started")) ss->busy = 1;
      if (!strcmp(k, "turn.completed") || !strcmp(k, "turn.failed")) ss->busy = 0;
      ss->delta = !strcmp(k, "message.delta");
      ss->completed = !strcmp(k, "message.completed");
      ss->lines = 0;
    } else if (!strncmp(ss->buf, "data: ", 6) && ss->delta) {
      /* streamed text: its data lines joined by LF, on the open line */
      if (!ss->mid) fputs("agent: ", stdout);
      else if (ss->lines > 0) putchar('\n');
      fputs(moor_term_clean(ss->buf + 6), stdout);
      ss->mid = 1;
      ss->lines++;
      fflush(stdout);
    } else if (!strncmp(ss->buf, "data: ", 6) && ss->completed && ss->mid) {
      ss->lines++; /* the text streamed already: the line only ends (below) */
    } else if (!strncmp(ss->buf, "data: ", 6) && ss->buf[6]) {
      if (ss->mid) putchar('\n');
      ss->mid = 0;
      printf("%s\n", moor_term_clean(ss->buf + 6));
      fflush(stdout);
    } else if (!ss->buf[0] && ss->completed && ss->mid) {
      putchar('\n');
      fflush(stdout);
      ss->mid = 0;
    }
    ss->len = 0;
  }
  return total;
}

static volatile sig_atomic_t chat_interrupted;
static void chat_on_sigint(int sig) { (void)sig; chat_interrupted = 1; }

static int chat_http(const char *base) {
  char url[2048], resp[4096], sid[128], body[9000], q[8300];
  snprintf(url, sizeof url, "%s/v1/sessions", base);
  int code = post_quiet(url, "{}", resp, sizeof resp);
  json_string_field(resp, "sessionId", sid, sizeof sid);
  if (code != 201 || !sid[0]) {
    fprintf(stderr, "moor: cannot start a session at %s: %d %s\n", base, code, resp);
    return 2;
  }
  fprintf(stderr, "session %s (through %s): type a message; Ctrl-C cancels and quits\n", sid, base);
  CURLM *multi = curl_multi_init();
  sse_state ss = {{0}, 0, 0, 0, 0, 0, 0};
  struct curl_slist *h = with_token(NULL);
  snprintf(url, sizeof url, "%s/v1/sessions/%s/stream?format=text", base, sid);
  CURL *stream = client(url, h, sse_write, &ss);
  curl_multi_add_handle(multi, stream);
  signal(SIGINT, chat_on_sigint);
  int eof = 0, running = 1, status = 0, idle_rounds = 0;
  while (running && !chat_interrupted) {
    struct curl_waitfd in = {0, CURL_WAIT_POLLIN, 0};
    curl_multi_perform(multi, &running);
    /* No line is read before the stream answers: the text a turn streams
     * (message.delta, live only) would pass before we listen. */
    long listening = 0;
    curl_easy_getinfo(stream, CURLINFO_RESPONSE_CODE, &listening);
    int reading = !eof && listening != 0;
    curl_multi_poll(multi, reading ? &in : NULL, reading ? 1 : 0, 200, NULL);
    if (reading && (in.revents & CURL_WAIT_POLLIN)) {
      char line[8192];
      if (!fgets(line, sizeof line, stdin)) {
        eof = 1;
      } else {
        line[strcspn(line, "\n")] = 0;
        if (line[0]) {
          /* A line that fits the session's sole pending question answers it
           * through the input channel (inputResponses, with an approval's
           * binding from the request shown); any other line is a message. */
          snprintf(url, sizeof url, "%s/v1/sessions/%s", base, sid);
          char *answer = inputs_chunk(base, LINE_LUA, sid, line, NULL, 0, NULL, 0);
          int sent = answer && post_quiet(url, answer, resp, sizeof resp) == 202;
          free(answer);
          if (!sent) {
            json_quote(q, sizeof q, line);
            snprintf(body, sizeof body, "{\"message\":%s}", q);
            if (post_quiet(url, body, resp, sizeof resp) != 202) fprintf(stderr, "moor: %s\n", resp);
            else ss.busy = 1;
          }
        }
      }
    }
    /* Input closed: leave once the session has been idle for a moment. */
    if (eof && !ss.busy && ++idle_rounds > 5) break;
    if (!eof || ss.busy) idle_rounds = 0;
  }
  if (chat_interrupted) {
    fprintf(stderr, "\ncancelling the session\n");
    snprintf(url, sizeof url, "%s/v1/sessions/%s/cancel", base, sid);
    post_quiet(url, "{}", resp, sizeof resp);
  }
  curl_multi_remove_handle(multi, stream);
  curl_easy_cleanup(stream);
  curl_multi_cleanup(multi);
  curl_slist_free_all(h);
  return status;
}

static int cmd_chat(const opts *o) {
  if (o->nargs) return usage_error("chat takes no arguments%s", "");
  char url[1024];
  int found = moor_find_server(o->db, url, sizeof url);
  if (found == MOOR_EINVAL) return untrusted_server(url);
  if (found == 0) return chat_http(url);
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  chat_state cs = {m, "", {0}, {0}, 0, 0, 0, 0};
  if ((status = load(m, o))) goto out;
  if (moor_resume_all(m) || moor_session_start(m, NULL, cs.session, sizeof cs.session)) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 2;
    goto out;
  }
  moor_on_event(m, chat_event, &cs);
  fprintf(stderr, "session %s: type a message; Ctrl-C cancels and quits\n", cs.session);
  uv_loop_t *loop = moor_loop(m);
  if (uv_poll_init(loop, &cs.poll, 0) != 0) {
    fprintf(stderr, "moor: chat reads its messages from a terminal or a pipe\n");
    status = 2;
    goto out;
  }
  cs.poll.data = &cs;
  uv_poll_start(&cs.poll, UV_READABLE, chat_stdin);
  uv_signal_init(loop, &cs.sigint);
  cs.sigint.data = &cs;
  uv_signal_start(&cs.sigint, chat_sigint, SIGINT);
  for (;;) {
    if (moor_run(m)) {
      fprintf(stderr, "moor: %s\n", moor_errmsg(m));
      status = 1;
      break;
    }
    /* Nothing runnable or due: with input closed there is nothing more to wait for. */
    if (cs.quit || cs.eof) {
      if (cs.busy && !cs.quit)
        fprintf(stderr, "session %s waits (for an answer?); 'moor dev' or 'moor chat' continues it\n", cs.session);
      break;
    }
    uv_run(loop, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&cs.poll, NULL);
  uv_close((uv_handle_t *)&cs.sigint, NULL);
out:
  moor_close(m);
  return status;
}

static int cmd_dev(const opts *o) {
  if (o->nargs) return usage_error("dev takes no arguments%s", "");
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  if ((status = load(m, o))) goto out;
  moor_on_event(m, print_event, NULL);
  char url[600];
  int rc = moor_resume_all(m);
  if (!rc) rc = moor_listen(m, o->listen, url, sizeof url); /* NULL: MOOR_DEFAULT_LISTEN */
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 2;
    goto out;
  }
  printf("%s\n", url);
  fflush(stdout);
  const char *pub = getenv("MOOR_PUBLIC_URL");
  fprintf(stderr, "moor dev: serving %s%s%s with the agent in %s (Ctrl-C stops)\n", url,
          pub && *pub ? ", public URL " : "", pub && *pub ? pub : "", o->agent ? o->agent : "agent");
  if ((rc = moor_serve(m))) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 1;
  }
  fprintf(stderr, "moor dev: stopped\n");
out:
  moor_close(m);
  return status;
}

/* moor mcp: the agent's tools over MCP on stdin/stdout. The real stdout is
 * kept for the protocol and fd 1 points at stderr before anything runs, so
 * a tool's print or io.write cannot corrupt the stream. */
static int cmd_mcp(const opts *o) {
  if (o->nargs) return usage_error("mcp takes no arguments%s", "");
  fflush(stdout);
  int out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (out < 0 || dup2(2, 1) < 0) {
    fprintf(stderr, "moor: cannot set stdout aside for the protocol\n");
    return 2;
  }
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  if ((status = load(m, o))) goto out;
  /* The HTTP API too (loopback, a free port unless --listen): the other
   * channels (moor answer, moor cancel, GET /v1/inputs) reach this process. */
  char url[600];
  int rc = moor_resume_all(m);
  if (!rc) rc = moor_listen(m, o->listen ? o->listen : "127.0.0.1:0", url, sizeof url);
  if (!rc) {
    fprintf(stderr, "moor mcp: serving the agent in %s over stdio (and the HTTP API at %s)\n",
            o->agent ? o->agent : "agent", url);
    rc = moor_mcp_stdio(m, out);
  }
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 1;
  }
out:
  moor_close(m);
  close(out);
  return status;
}

static int cmd_resume(const opts *o) {
  int status = 0;
  moor *m = open_engine(o, 0, &status);
  if (!m) return status;
  if ((status = load(m, o))) goto out;
  moor_on_event(m, print_event, (void *)1);
  prompt_state ps = {m, "", "", "", {0}, 0, {0}, 0, isatty(2)};
  int rc = moor_resume_all(m);
  if (!rc) rc = drive(m, NULL, &ps);
  if (ps.timing) uv_close((uv_handle_t *)&ps.timer, NULL);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = 1;
  } else {
    /* Runs left waiting are not an error (exit 0): say what each waits on. */
    char *waiting = NULL;
    if (moor_describe_waiting(m, &waiting) == 0 && waiting) fputs(moor_term_clean(waiting), stdout);
    free(waiting);
  }
out:
  moor_close(m);
  return status;
}

/* runs (0), logs (1) and inputs (2): read-only listings. */
static int cmd_list(const opts *o, int events) {
  if (events == 1 && o->nargs != 1) return usage_error("logs needs a RUN id%s", "");
  if (events != 1 && o->nargs) return usage_error("%s takes no arguments", o->cmd);
  int status = 0;
  moor *m = open_engine(o, 1, &status);
  if (!m) return status;
  char *json = NULL;
  moor_run_filter f = {o->status, o->tool, o->limit};
  int rc = events == 1 ? moor_list_events(m, o->args[0], o->json, &json)
           : events == 2 ? moor_list_inputs(m, o->json, &json)
                         : moor_list_runs_filtered(m, &f, o->json, &json);
  if (rc) {
    fprintf(stderr, "moor: %s\n", moor_errmsg(m));
    status = rc == MOOR_ENOTFOUND ? 1 : 2;
  } else if (json) {
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

/* Process settings every command wants, before anything else runs:
 * - SIGPIPE ignored: libuv writes sockets with write(2), so a client that
 *   hangs up while a response or an SSE event is written would otherwise
 *   kill the host (exit 141); the write fails with EPIPE instead.
 * - No core dumps (RLIMIT_CORE 0): a core would hold the API keys of the
 *   environment and whatever the engine had in memory.
 * - The soft RLIMIT_NOFILE raised to the hard limit, so many held
 *   connections (bounded by the server's caps) cannot starve the database,
 *   curl or new clients of descriptors. */
static void harden_process(void) {
  struct rlimit rl;
  signal(SIGPIPE, SIG_IGN);
  rl.rlim_cur = rl.rlim_max = 0;
  if (setrlimit(RLIMIT_CORE, &rl) != 0) { /* best effort: keep going */ }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) { /* best effort */ }
  }
}

/* moor init [DIR]: the scaffold (lua/moor/scaffold.lua); exit 2 when a file
 * it would write exists (nothing is written then). */
static int cmd_init(const opts *o) {
  if (o->nargs > 1) return usage_error("init takes at most one DIR%s", "");
  char *out = NULL;
  int rc = moor_scaffold(o->nargs ? o->args[0] : ".", &out);
  if (rc) fprintf(stderr, "moor: %s\n", out ? out : moor_strerror(rc));
  else fputs(out, stdout);
  free(out);
  return rc == 0 ? 0 : rc == MOOR_ECONFLICT ? 2 : 1;
}

static int cmd_runs(const opts *o) { return cmd_list(o, 0); }
static int cmd_logs(const opts *o) { return cmd_list(o, 1); }
static int cmd_inputs(const opts *o) { return cmd_list(o, 2); }
static int cmd_answer(const opts *o) { return cmd_answer_or_cancel(o, 1); }
static int cmd_cancel(const opts *o) { return cmd_answer_or_cancel(o, 0); }

static const struct {
  const char *name;
  int (*run)(const opts *o);
} COMMANDS[] = {
  {"inputs", cmd_inputs},
  {"call", cmd_call}, {"resume", cmd_resume}, {"runs", cmd_runs},     {"logs", cmd_logs},
  {"chat", cmd_chat}, {"dev", cmd_dev},       {"answer", cmd_answer}, {"cancel", cmd_cancel},
  {"test", cmd_test}, {"init", cmd_init}, {"mcp", cmd_mcp},
};

int main(int argc, char **argv) {
  opts o = {0};
  harden_process();
  int status = parse(argc, argv, &o);
  if (status) goto done;
  const char *c = o.cmd;
  if (!c || !strcmp(c, "help")) {
    fputs(USAGE, c ? stdout : stderr);
    status = c ? 0 : 2;
  } else if (!strcmp(c, "version")) {
    printf("moor %s\n", MOOR_VERSION);
  } else {
    size_t i = 0;
    while (i < sizeof COMMANDS / sizeof COMMANDS[0] && strcmp(c, COMMANDS[i].name)) i++;
    status = i < sizeof COMMANDS / sizeof COMMANDS[0] ? COMMANDS[i].run(&o) : usage_error("unknown command '%s'", c);
  }
done:
  free(o.args);
  fflush(stdout);
  return status;
}
