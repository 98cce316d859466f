/* moor dev HTTP benchmark: a real `moor dev` on loopback, driven with
 * libcurl (and wrk for throughput). Prints figures; asserts nothing about
 * time (see README).
 *
 *   moor_http_bench MOOR_BINARY [AGENT_DIR] [WRK_SCRIPT]
 *     (defaults: tests/bench/agent, tests/bench/wrk_webhook.lua)
 *   env: BENCH_RUNS (latency runs, 1000), BENCH_PARKED (10000),
 *        BENCH_WRK_SECONDS (5), BENCH_WRK_CONNS (32), BENCH_WRK_RUNS (32),
 *        BENCH_WRK_QUEUE_RUNS (256: queued deliveries are capped at 1,000 per
 *        token, so the queue figure spreads them over more webhooks than 5 s
 *        of requests can fill; wrk's non-2xx count is printed when there is one)
 *
 * 1. latency from a webhook POST to the run's `run.completed` event on its
 *    SSE stream, p50/p99 over BENCH_RUNS runs (one at a time); three rounds on fresh databases, min-max;
 * 2. requests per second on the webhook route under wrk, to webhooks of
 *    parked runs (each delivery wakes its run; and deliveries that queue);
 * 3. resident memory of the moor dev process with BENCH_PARKED runs parked
 *    on a question, and after a restart that resumes them all.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *moor_bin, *agent = "tests/bench/agent", *wrk_script = "tests/bench/wrk_webhook.lua";
static char dir[] = "/tmp/moor-http-bench-XXXXXX";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

static pid_t live_dev; /* the moor dev running now, stopped on the way out */

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "http bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (files kept in %s)\n", dir);
  if (live_dev > 0) kill(live_dev, SIGTERM);
  exit(1);
}

/* ------------------------------------------------------------ moor dev */

typedef struct dev {
  pid_t pid;
  int out; /* its stdout, kept open */
  char url[128];
  double start_s; /* seconds from exec to the URL line (includes resuming runs) */
} dev;

static void dev_start(dev *d, const char *db) {
  int p[2];
  if (pipe(p)) die("pipe: %s", strerror(errno));
  double t0 = now_s();
  d->pid = fork();
  if (d->pid < 0) die("fork: %s", strerror(errno));
  if (d->pid == 0) {
    char log[512];
    snprintf(log, sizeof log, "%s/dev.log", dir);
    int err = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(p[1], 1);
    if (err >= 0) dup2(err, 2);
    close(p[0]);
    execl(moor_bin, "moor", "dev", "--agent", agent, "--db", db, "--listen", "127.0.0.1:0", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  live_dev = d->pid;
  d->out = p[0];
  size_t n = 0;
  while (n + 1 < sizeof d->url) {
    ssize_t k = read(d->out, d->url + n, 1);
    if (k <= 0) die("moor dev exited before printing its URL (see %s/dev.log)", dir);
    if (d->url[n] == '\n') break;
    n++;
  }
  d->url[n] = 0;
  d->start_s = now_s() - t0;
}

static void dev_stop(dev *d) {
  int st;
  kill(d->pid, SIGTERM);
  waitpid(d->pid, &st, 0);
  live_dev = 0;
  close(d->out);
}

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  long kib = -1;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

/* ---------------------------------------------------------------- HTTP */

typedef struct buf {
  char *p;
  size_t len, cap;
} buf;

static size_t buf_write(char *data, size_t size, size_t n, void *ud) {
  buf *b = ud;
  size_t add = size * n;
  if (b->len + add + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + add + 1) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) die("out of memory%s", "");
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, add);
  b->len += add;
  b->p[b->len] = 0;
  return add;
}

static CURL *api; /* one keep-alive connection for API calls */
static buf resp;

static long http(const char *method, const char *url, const char *body) {
  static struct curl_slist *json;
  if (!json) json = curl_slist_append(NULL, "Content-Type: application/json");
  resp.len = 0;
  if (resp.p) resp.p[0] = 0;
  curl_easy_reset(api);
  curl_easy_setopt(api, CURLOPT_URL, url);
  curl_easy_setopt(api, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(api, CURLOPT_WRITEFUNCTION, buf_write);
  curl_easy_setopt(api, CURLOPT_WRITEDATA, &resp);
  curl_easy_setopt(api, CURLOPT_TIMEOUT, 60L);
  if (body || !strcmp(method, "POST")) curl_easy_setopt(api, CURLOPT_HTTPHEADER, json); /* the API wants JSON */
  if (body) curl_easy_setopt(api, CURLOPT_POSTFIELDS, body);
  CURLcode rc = curl_easy_perform(api);
  if (rc != CURLE_OK) die("request failed: %s", curl_easy_strerror(rc));
  long code = 0;
  curl_easy_getinfo(api, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

/* The value of "key":"..." in s (no escapes in our ids and URLs). */
static int json_str(const char *s, const char *key, char *out, size_t len) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", key);
  const char *p = s ? strstr(s, pat) : NULL;
  if (!p) return -1;
  p += strlen(pat);
  size_t n = strcspn(p, "\"");
  if (n >= len) return -1;
  memcpy(out, p, n);
  out[n] = 0;
  return 0;
}

static void start_run(const dev *d, const char *tool, const char *input, char *run, size_t len) {
  char url[256];
  snprintf(url, sizeof url, "%s/v1/tools/%s/calls", d->url, tool);
  long code = http("POST", url, input);
  if (code != 201 || json_str(resp.p, "runId", run, len)) die("call failed: %s", resp.p ? resp.p : "");
}

/* An SSE stream of one run: watches for the webhook URL (the progress
 * snapshot) and for run.completed, noting when each arrived. */
typedef struct sse {
  buf b;
  size_t scanned;
  char url[256];
  double url_at, done_at;
  int stop_at_url;
} sse;

static size_t sse_write(char *data, size_t size, size_t n, void *ud) {
  sse *s = ud;
  buf_write(data, size, n, &s->b);
  double t = now_s();
  /* Look at complete events only. */
  char *end;
  while ((end = strstr(s->b.p + s->scanned, "\n\n"))) {
    *end = 0;
    const char *ev = s->b.p + s->scanned;
    if (!s->url[0] && strstr(ev, "event: progress") && json_str(ev, "url", s->url, sizeof s->url) == 0)
      s->url_at = t;
    if (strstr(ev, "event: run.completed")) s->done_at = t;
    *end = '\n';
    s->scanned = (size_t)(end - s->b.p) + 2;
  }
  if (s->stop_at_url && s->url[0]) return 0; /* abort the transfer: we have what we came for */
  return size * n;
}

static void sse_open(CURL *h, sse *s, const dev *d, const char *run) {
  char url[256];
  snprintf(url, sizeof url, "%s/v1/runs/%s/events", d->url, run);
  s->b.len = 0;
  s->scanned = 0;
  s->url[0] = 0;
  s->url_at = s->done_at = 0;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sse_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
}

/* The webhook URL a run published, read from its event stream. */
static void webhook_url(const dev *d, const char *run, char *out, size_t len) {
  static CURL *h;
  static sse s;
  if (!h) h = curl_easy_init();
  sse_open(h, &s, d, run);
  s.stop_at_url = 1;
  curl_easy_perform(h); /* ends with a write error once the URL is in */
  if (!s.url[0]) die("no webhook URL on the stream of %s", run);
  snprintf(out, len, "%s", s.url);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The page faults a process has taken (minflt, /proc/PID/stat's 10th field). */
static long minflt_of(pid_t pid) {
  char path[64], line[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  char *p = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL; /* (the name may hold spaces) */
  if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %ld", &v) != 1) v = -1;
  fclose(f);
  return v;
}

/* ------------------------------------------------------------- figures */

/* One round of `runs` runs on a fresh database: p50, p99, mean, max (ms)
 * and moor dev's page faults per run, in out[0..4]. */
static void bench_latency(int runs, int round, double out[5]) {
  char db[512];
  snprintf(db, sizeof db, "%s/latency-%d.db", dir, round);
  dev d;
  dev_start(&d, db);
  CURLM *multi = curl_multi_init();
  CURL *stream = curl_easy_init(), *post = curl_easy_init();
  struct curl_slist *json = curl_slist_append(NULL, "Content-Type: application/json");
  buf post_resp = {0};
  sse s = {0};
  double *lat = calloc((size_t)runs, sizeof *lat);
  if (!lat) die("out of memory%s", "");
  long flt0 = 0;
  for (int i = 0; i < runs + 20; i++) { /* the first 20 warm up and are not counted */
    char run[64];
    if (i == 20) flt0 = minflt_of(d.pid);
    start_run(&d, "webhook", "{\"mode\":\"once\"}", run, sizeof run);
    sse_open(stream, &s, &d, run);
    s.stop_at_url = 0;
    curl_multi_add_handle(multi, stream);
    int running = 1, posted = 0;
    double t0 = 0;
    while (running) {
      curl_multi_perform(multi, &running);
      if (s.url[0] && !posted) {
        post_resp.len = 0;
        curl_easy_reset(post);
        curl_easy_setopt(post, CURLOPT_URL, s.url);
        curl_easy_setopt(post, CURLOPT_HTTPHEADER, json);
        curl_easy_setopt(post, CURLOPT_POSTFIELDS, "{\"status\":\"ok\"}");
        curl_easy_setopt(post, CURLOPT_WRITEFUNCTION, buf_write);
        curl_easy_setopt(post, CURLOPT_WRITEDATA, &post_resp);
        t0 = now_s();
        curl_multi_add_handle(multi, post);
        posted = 1;
        running = 1;
        continue;
      }
      if (running) curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(multi, &left))) {
      if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK)
        die("transfer failed: %s", curl_easy_strerror(msg->data.result));
    }
    curl_multi_remove_handle(multi, stream);
    if (posted) curl_multi_remove_handle(multi, post);
    long code = 0;
    curl_easy_getinfo(post, CURLINFO_RESPONSE_CODE, &code);
    if (!posted || !s.done_at || code != 202) die("run %s did not complete through its webhook", run);
    if (i >= 20) lat[i - 20] = (s.done_at - t0) * 1e3;
  }
  long flt = minflt_of(d.pid) - flt0;
  qsort(lat, (size_t)runs, sizeof *lat, cmp_double);
  double sum = 0;
  for (int i = 0; i < runs; i++) sum += lat[i];
  out[0] = lat[runs / 2];
  out[1] = lat[(runs * 99) / 100 < runs ? (runs * 99) / 100 : runs - 1];
  out[2] = sum / runs;
  out[3] = lat[runs - 1];
  out[4] = (double)flt / runs;
  free(lat);
  free(post_resp.p);
  free(s.b.p);
  curl_slist_free_all(json);
  curl_easy_cleanup(stream);
  curl_easy_cleanup(post);
  curl_multi_cleanup(multi);
  dev_stop(&d);
}

static void bench_wrk(const char *mode, int nruns, int seconds, int conns) {
  char db[512], paths[512], cmd[2048];
  snprintf(db, sizeof db, "%s/wrk-%s.db", dir, mode);
  snprintf(paths, sizeof paths, "%s/paths-%s", dir, mode);
  dev d;
  dev_start(&d, db);
  FILE *f = fopen(paths, "w");
  if (!f) die("cannot write %s", paths);
  char input[64];
  snprintf(input, sizeof input, "{\"mode\":\"%s\"}", mode);
  for (int i = 0; i < nruns; i++) {
    char run[64], url[256];
    start_run(&d, "webhook", input, run, sizeof run);
    webhook_url(&d, run, url, sizeof url);
    fprintf(f, "%s\n", url + strlen(d.url));
  }
  fclose(f);
  long rss0 = rss_kib(d.pid);
  snprintf(cmd, sizeof cmd, "wrk -t1 -c%d -d%ds -s %s %s -- %s 2>&1", conns, seconds, wrk_script, d.url, paths);
  FILE *p = popen(cmd, "r");
  if (!p) die("cannot run wrk%s", "");
  char line[512], rps[64] = "?", lat[128] = "?", errors[256] = "";
  while (fgets(line, sizeof line, p)) {
    line[strcspn(line, "\n")] = 0;
    if (sscanf(line, " Requests/sec: %63s", rps) == 1) continue;
    if (strstr(line, "Latency") && strstr(line, "ms")) snprintf(lat, sizeof lat, "%s", line + strspn(line, " "));
    if (strstr(line, "Non-2xx") || strstr(line, "Socket errors") || strstr(line, "unable"))
      snprintf(errors + strlen(errors), sizeof errors - strlen(errors), "  [%s]", line + strspn(line, " "));
  }
  int st = pclose(p);
  if (st != 0) die("wrk failed (is it installed?)%s", "");
  long rss1 = rss_kib(d.pid);
  /* How many deliveries the server recorded. */
  char url[256];
  snprintf(url, sizeof url, "%s/v1/runs", d.url);
  http("GET", url, NULL);
  printf("wrk -t1 -c%d -d%ds, POST to %d webhooks of parked runs (%s):\n", conns, seconds, nruns,
         !strcmp(mode, "loop") ? "each delivery recorded and handed to its run"
                               : "deliveries recorded and queued; the runs park elsewhere");
  printf("  %s requests/s   %s%s\n", rps, lat, errors);
  printf("  (RSS %ld -> %ld KiB)\n", rss0, rss1);
  dev_stop(&d);
}

static void bench_memory(int parked) {
  char db[512], url[256];
  snprintf(db, sizeof db, "%s/parked.db", dir);
  dev d;
  dev_start(&d, db);
  usleep(200 * 1000);
  long before = rss_kib(d.pid);
  double t0 = now_s();
  for (int i = 0; i < parked; i++) {
    char run[64], input[64];
    snprintf(input, sizeof input, "{\"n\":%d}", i);
    start_run(&d, "ask", input, run, sizeof run);
  }
  double started = now_s() - t0;
  /* Every run parked on its question? */
  snprintf(url, sizeof url, "%s/v1/inputs", d.url);
  int n = 0;
  for (int tries = 0; tries < 100; tries++) {
    http("GET", url, NULL);
    n = 0;
    for (const char *p = resp.p; (p = strstr(p, "\"requestId\"")); p++) n++;
    if (n >= parked) break;
    usleep(100 * 1000);
  }
  if (n < parked) die("not every run parked on its question%s", "");
  long after = rss_kib(d.pid);
  printf("%d runs parked on a question (ctx.ask), started over HTTP in %.1f s (%.0f calls/s):\n", parked, started,
         parked / started);
  printf("  RSS %ld -> %ld KiB: %.2f KiB per run\n", before, after, (after - before) / (double)parked);
  dev_stop(&d);
  /* A restart resumes (replays) every parked run before it serves. */
  dev_start(&d, db);
  usleep(200 * 1000);
  long resumed = rss_kib(d.pid);
  snprintf(url, sizeof url, "%s/v1/inputs", d.url);
  http("GET", url, NULL);
  n = 0;
  for (const char *p = resp.p; (p = strstr(p, "\"requestId\"")); p++) n++;
  printf("  after a restart: %d runs resumed in %.2f s (to the URL line), RSS %ld KiB, %d questions pending\n",
         parked, d.start_s, resumed, n);
  dev_stop(&d);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: moor_http_bench MOOR_BINARY [AGENT_DIR] [WRK_SCRIPT]\n");
    return 2;
  }
  moor_bin = argv[1];
  if (argc > 2) agent = argv[2];
  if (argc > 3) wrk_script = argv[3];
  signal(SIGPIPE, SIG_IGN);
  if (!mkdtemp(dir)) return 1;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  api = curl_easy_init();
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("\nmoor dev HTTP benchmark on loopback (figures, not pass/fail)\n\n");
  /* three rounds, each on a fresh database: min-max of each figure */
  int runs = env_int("BENCH_RUNS", 1000);
  double lo[5], hi[5];
  for (int r = 0; r < 3; r++) {
    double f[5];
    bench_latency(runs, r, f);
    for (int k = 0; k < 5; k++) {
      if (r == 0 || f[k] < lo[k]) lo[k] = f[k];
      if (r == 0 || f[k] > hi[k]) hi[k] = f[k];
    }
  }
  printf("webhook POST -> run.completed on SSE, %d runs (min-max over 3 rounds; target: p50 <= 0.2 ms):\n", runs);
  printf("  p50 %.2f-%.2f ms   p99 %.2f-%.2f ms   mean %.2f-%.2f ms   max %.2f-%.2f ms\n", lo[0], hi[0], lo[1],
         hi[1], lo[2], hi[2], lo[3], hi[3]);
  printf("  (moor dev took %.2f-%.2f page faults per run: its call, webhook, delivery and end)\n", lo[4], hi[4]);
  printf("\n");
  int secs = env_int("BENCH_WRK_SECONDS", 5), conns = env_int("BENCH_WRK_CONNS", 32);
  int nruns = env_int("BENCH_WRK_RUNS", 32), nqueue = env_int("BENCH_WRK_QUEUE_RUNS", 256);
  if (system("command -v wrk >/dev/null 2>&1") == 0) {
    bench_wrk("loop", nruns, secs, conns);
    bench_wrk("queue", nqueue, secs, conns);
  } else {
    printf("wrk is not installed: no requests/s figure (apt-get install wrk)\n");
  }
  printf("\n");
  bench_memory(env_int("BENCH_PARKED", 10000));
  free(resp.p);
  curl_easy_cleanup(api);
  curl_global_cleanup();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return 0;
}
