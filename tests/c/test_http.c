/* Unit tests for the embeddable HTTP server (host/http.c).
 *
 * Each test runs a server on its own uv loop in a second thread; the test
 * thread is the client (libcurl, or raw sockets where curl cannot produce the
 * input). The handler routes on the path:
 *   /echo      answers at once with what it saw (method, path, query, headers, body)
 *   /later     answers 30 ms later, from a uv_timer
 *   /sse       streams three events, 10 ms apart, then ends
 *   /hang      never answers (/hang?stream opens a stream and never ends it)
 *   /big       a 300 KiB body
 *   /nocontent 204
 *   /twice     tries bad answers, answers, then tries to answer again (all but one refused)
 *   /flood     streams 64 KiB writes until one fails (for a client that never reads)
 * Teardown stops the server from the loop thread, runs the loop until it has
 * no handles left and checks uv_loop_close succeeds; ASan checks for leaks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "http.h"
#include "moor.h"

typedef struct job job;

typedef struct fx {
  uv_loop_t loop;
  uv_async_t stop;
  moor_http *srv;
  pthread_t thread;
  int port;
  job *jobs;                       /* pending timers, closed at stop */
  atomic_int requests;             /* handler calls */
  atomic_int closed;               /* on_closed calls */
  atomic_int gone_rc;              /* respond on a connection reported closed */
  atomic_int twice_rc;             /* a second answer to one request */
  atomic_int flood_rc;             /* the write that ended /flood */
  atomic_long flood_bytes;         /* what /flood got queued before that */
} fx;

struct job {
  uv_timer_t timer;
  fx *f;
  unsigned long long conn;
  int n;
  job *prev, *next;
};

/* ------------------------------------------------------------ the server */

static void job_closed(uv_handle_t *h) {
  free(h->data);
}

static void job_done(job *j) {
  if (j->prev) j->prev->next = j->next;
  else j->f->jobs = j->next;
  if (j->next) j->next->prev = j->prev;
  uv_close((uv_handle_t *)&j->timer, job_closed);
}

static void later_fire(uv_timer_t *t) {
  job *j = t->data;
  moor_http_respond(j->f->srv, j->conn, 202, "text/plain", NULL, "later", 5);
  job_done(j);
}

static void sse_fire(uv_timer_t *t) {
  job *j = t->data;
  char ev[32];
  int n = snprintf(ev, sizeof ev, "data: %d\n\n", ++j->n);
  if (moor_http_stream_write(j->f->srv, j->conn, ev, (size_t)n) != 0 || j->n == 3) {
    moor_http_stream_end(j->f->srv, j->conn);
    job_done(j);
  }
}

static void job_start(fx *f, unsigned long long conn, uv_timer_cb cb, uint64_t ms, uint64_t repeat) {
  job *j = calloc(1, sizeof *j);
  assert_non_null(j);
  j->f = f;
  j->conn = conn;
  j->timer.data = j;
  j->next = f->jobs;
  if (f->jobs) f->jobs->prev = j;
  f->jobs = j;
  uv_timer_init(&f->loop, &j->timer);
  uv_timer_start(&j->timer, cb, ms, repeat);
}

static void echo(moor_http *srv, const moor_http_request *req) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_non_null(out);
  fprintf(out, "method=%s\npath=%s\nquery=%s\n", req->method, req->path,
          req->query ? req->query : "(none)");
  for (size_t i = 0; i < req->nheaders; i++) fprintf(out, "h:%s=%s\n", req->names[i], req->values[i]);
  fprintf(out, "body=");
  fwrite(req->body, 1, req->body_len, out);
  fclose(out);
  assert_int_equal(moor_http_respond(srv, req->conn, 200, "text/plain", "X-Echo: yes\r\n", text, len), 0);
  free(text);
}

static void handler(moor_http *srv, const moor_http_request *req, void *ud) {
  fx *f = ud;
  const char *p = req->path;
  atomic_fetch_add(&f->requests, 1);
  if (strcmp(p, "/echo") == 0) {
    echo(srv, req);
  } else if (strcmp(p, "/later") == 0) {
    job_start(f, req->conn, later_fire, 30, 0);
  } else if (strcmp(p, "/sse") == 0) {
    assert_int_equal(moor_http_stream_start(srv, req->conn, 200, "text/event-stream",
                                            "Cache-Control: no-cache\r\n"), 0);
    job_start(f, req->conn, sse_fire, 10, 10);
  } else if (strcmp(p, "/hang") == 0) {
    if (req->query && strcmp(req->query, "stream") == 0)
      assert_int_equal(moor_http_stream_start(srv, req->conn, 200, "text/event-stream", NULL), 0);
  } else if (strcmp(p, "/big") == 0) {
    size_t n = 300 * 1024;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'x', n);
    assert_int_equal(moor_http_respond(srv, req->conn, 200, "text/plain", NULL, big, n), 0);
    free(big);
  } else if (strcmp(p, "/nocontent") == 0) {
    assert_int_equal(moor_http_respond(srv, req->conn, 204, NULL, NULL, NULL, 0), 0);
  } else if (strcmp(p, "/flood") == 0) {
    static char chunk[64 * 1024];
    long total = 0;
    int rc = 0;
    assert_int_equal(moor_http_stream_start(srv, req->conn, 200, "text/event-stream", NULL), 0);
    for (int i = 0; i < 2000 && (rc = moor_http_stream_write(srv, req->conn, chunk, sizeof chunk)) == 0; i++)
      total += (long)sizeof chunk;
    atomic_store(&f->flood_bytes, total);
    atomic_store(&f->flood_rc, rc);
  } else if (strcmp(p, "/twice") == 0) {
    int bad = 0;
    bad += moor_http_respond(srv, req->conn, 99, NULL, NULL, NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, "text/plain\r\nX: y", NULL, NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, "X: y\r\n\r\nbody", NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, NULL, NULL, 5) == MOOR_EINVAL;
    /* no header injection: bare LF or CR, control bytes, a name that is not a token */
    bad += moor_http_respond(srv, req->conn, 200, "text/plain\nX: y", NULL, NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, "text/\x01plain", NULL, NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, "X-A: 1\nSet-Cookie: a=1\r\n", NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, "X-A: 1\rSet-Cookie: a=1", NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, "Bad Name: v\r\n", NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, "NoColon\r\n", NULL, 0) == MOOR_EINVAL;
    /* the framing headers are moor's own: a second one would desync the client */
    bad += moor_http_respond(srv, req->conn, 200, NULL, "X-A: 1\r\ncontent-LENGTH: 0\r\n", NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, "Transfer-Encoding: chunked", NULL, 0) == MOOR_EINVAL;
    bad += moor_http_respond(srv, req->conn, 200, NULL, "Connection: keep-alive\r\n", NULL, 0) == MOOR_EINVAL;
    bad += moor_http_stream_start(srv, req->conn, 200, "text/event-stream", "Content-Length: 9\r\n") == MOOR_EINVAL;
    bad += moor_http_stream_start(srv, req->conn, 200, "text/event-stream\r\nX: y", NULL) == MOOR_EINVAL;
    bad += moor_http_stream_write(srv, req->conn, "x", 1) == MOOR_EINVAL; /* no stream open */
    bad += moor_http_stream_end(srv, req->conn) == MOOR_EINVAL;
    assert_int_equal(bad, 17);
    assert_int_equal(moor_http_respond(srv, req->conn, 200, "text/plain", "X-A: 1\r\nX-B: 2", "one", 3), 0);
    atomic_store(&f->twice_rc, moor_http_respond(srv, req->conn, 200, "text/plain", NULL, "two", 3));
  } else {
    static const char nf[] = "{\"error\":{\"code\":\"not_found\",\"message\":\"no route\"}}";
    assert_int_equal(moor_http_respond(srv, req->conn, 404, "application/json", NULL, nf, sizeof nf - 1), 0);
  }
}

static void on_closed(moor_http *srv, unsigned long long conn, void *ud) {
  fx *f = ud;
  atomic_fetch_add(&f->closed, 1);
  atomic_store(&f->gone_rc, moor_http_respond(srv, conn, 200, "text/plain", NULL, "late", 4));
}

static void stop_cb(uv_async_t *a) {
  fx *f = a->data;
  moor_http_stop(f->srv);
  while (f->jobs) job_done(f->jobs);
  uv_close((uv_handle_t *)a, NULL);
}

static void *loop_main(void *arg) {
  fx *f = arg;
  uv_run(&f->loop, UV_RUN_DEFAULT);
  return NULL;
}

static int fx_start(void **state, const moor_http_config *cfg) {
  fx *f = calloc(1, sizeof *f);
  char err[256];
  assert_non_null(f);
  assert_int_equal(uv_loop_init(&f->loop), 0);
  assert_int_equal(moor_http_start(&f->loop, cfg, handler, on_closed, f, &f->srv, err, sizeof err), 0);
  f->port = moor_http_port(f->srv);
  assert_true(f->port > 0);
  f->stop.data = f;
  assert_int_equal(uv_async_init(&f->loop, &f->stop, stop_cb), 0);
  atomic_store(&f->gone_rc, 1);
  atomic_store(&f->twice_rc, 1);
  atomic_store(&f->flood_rc, 1);
  assert_int_equal(pthread_create(&f->thread, NULL, loop_main, f), 0);
  *state = f;
  return 0;
}

static void fx_stop(fx *f) {
  if (!f->srv) return;
  uv_async_send(&f->stop);
  pthread_join(f->thread, NULL);
  assert_int_equal(uv_loop_close(&f->loop), 0); /* every handle of ours is closed */
  f->srv = NULL;
}

static int setup_default(void **state) {
  return fx_start(state, NULL);
}

/* Short limits so the timeout tests run fast. */
static int setup_strict(void **state) {
  moor_http_config cfg = {.host = "127.0.0.1", .body_limit = 1000, .timeout_ms = 200, .idle_ms = 300};
  return fx_start(state, &cfg);
}

/* Small caps, a short first-byte timeout and an API token (issue 7 item 6). */
static int setup_caps(void **state) {
  moor_http_config cfg = {.host = "127.0.0.1", .api_token = "tok-123", .first_byte_ms = 300,
                          .max_connections = 5, .max_per_peer = 3};
  return fx_start(state, &cfg);
}

static int teardown(void **state) {
  fx *f = *state;
  fx_stop(f);
  free(f);
  return 0;
}

/* ------------------------------------------------------------ the client */

typedef struct buf {
  char *p;
  size_t len;
} buf;

static size_t collect(char *data, size_t size, size_t n, void *ud) {
  buf *b = ud;
  char *p = realloc(b->p, b->len + size * n + 1);
  assert_non_null(p);
  memcpy(p + b->len, data, size * n);
  b->len += size * n;
  p[b->len] = '\0';
  b->p = p;
  return size * n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One request on h (reused across calls so connections are kept). Returns the
 * status; the body lands in *out (reset first; caller frees out->p). */
static long fetch(CURL *h, const fx *f, const char *method, const char *path, const char *body,
                  struct curl_slist *hdrs, buf *out) {
  char url[512];
  long status = 0;
  CURLcode rc;
  free(out->p);
  out->p = NULL;
  out->len = 0;
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", f->port, path);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_NOBODY, strcmp(method, "HEAD") == 0 ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, strcmp(method, "HEAD") == 0 ? NULL : method);
  if (body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  } else if (strcmp(method, "HEAD") != 0) {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  }
  rc = curl_easy_perform(h);
  if (rc != CURLE_OK) fail_msg("curl %s %s: %s", method, path, curl_easy_strerror(rc));
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  if (!out->p) collect("", 1, 0, out);
  return status;
}

static long new_connections(CURL *h) {
  long n = -1;
  curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &n);
  return n;
}

static int raw_connect(const fx *f) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
  struct timeval tv = {.tv_sec = 3};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* Send everything; the server may close early (413, 431), so errors are ignored. */
static void raw_send(int fd, const char *s, size_t len) {
  while (len) {
    ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
    if (n <= 0) return;
    s += n;
    len -= (size_t)n;
  }
}

#define RAW_SEND(fd, lit) raw_send((fd), (lit), sizeof(lit) - 1)

/* Read until the peer closes (or 3 s pass: then the test fails). */
static char *raw_read_all(int fd, size_t *len) {
  size_t cap = 4096, n = 0;
  char *p = malloc(cap + 1);
  assert_non_null(p);
  for (;;) {
    ssize_t r;
    if (n == cap) {
      p = realloc(p, (cap *= 2) + 1);
      assert_non_null(p);
    }
    r = recv(fd, p + n, cap - n, 0);
    if (r == 0) break;
    if (r < 0) fail_msg("no EOF from the server (read %zu bytes: %.*s)", n, (int)n, p);
    n += (size_t)r;
  }
  p[n] = '\0';
  if (len) *len = n;
  return p;
}

/* Read exactly one response with a Content-Length; returns it (caller frees). */
static char *raw_read_one(int fd) {
  size_t cap = 65536, n = 0;
  char *p = malloc(cap + 1);
  assert_non_null(p);
  for (;;) {
    char *end, *cl;
    ssize_t r;
    p[n] = '\0';
    end = strstr(p, "\r\n\r\n");
    if (end) {
      size_t want = (size_t)(end + 4 - p);
      cl = strstr(p, "Content-Length: ");
      if (cl && cl < end) want += strtoul(cl + 16, NULL, 10);
      if (n >= want) {
        assert_int_equal(n, want); /* nothing beyond it: we read one response at a time */
        return p;
      }
    }
    r = recv(fd, p + n, cap - n, 0);
    if (r <= 0) fail_msg("connection ended inside a response: %s", p);
    n += (size_t)r;
  }
}

/* -------------------------------------------------------------- the tests */

static void test_get_echo(void **state) {
  fx *f = *state;
  CURL *h = curl_easy_init();
  struct curl_slist *hd = curl_slist_append(NULL, "X-Test: Abc");
  buf b = {0};
  char *ctype = NULL;
  assert_int_equal(fetch(h, f, "GET", "/echo?a=1&b=2", NULL, hd, &b), 200);
  assert_non_null(strstr(b.p, "method=GET\npath=/echo\nquery=a=1&b=2\n"));
  assert_non_null(strstr(b.p, "h:x-test=Abc\n"));
  assert_non_null(strstr(b.p, "h:host=127.0.0.1:"));
  assert_string_equal(strstr(b.p, "body="), "body=");
  curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
  assert_string_equal(ctype, "text/plain");
  assert_int_equal(fetch(h, f, "DELETE", "/echo", NULL, NULL, &b), 200);
  assert_non_null(strstr(b.p, "method=DELETE\npath=/echo\nquery=(none)\n"));
  assert_int_equal(fetch(h, f, "GET", "/nowhere", NULL, NULL, &b), 404);
  assert_string_equal(b.p, "{\"error\":{\"code\":\"not_found\",\"message\":\"no route\"}}");
  assert_int_equal(fetch(h, f, "GET", "/twice", NULL, NULL, &b), 200);
  assert_string_equal(b.p, "one");
  /* The server thread stores the second answer's code after the client may
   * already have the first: wait for it (bounded: 2 s). */
  for (int i = 0; i < 200 && atomic_load(&f->twice_rc) == 1; i++) usleep(10000);
  assert_int_equal(atomic_load(&f->twice_rc), MOOR_EINVAL);
  curl_slist_free_all(hd);
  free(b.p);
  curl_easy_cleanup(h);
}

typedef struct chunks {
  int left;
} chunks;

static size_t read_chunks(char *dst, size_t size, size_t n, void *ud) {
  chunks *c = ud;
  (void)size;
  (void)n;
  if (c->left == 0) return 0;
  c->left--;
  memcpy(dst, "0123456789", 10);
  return 10;
}

static void test_post_bodies(void **state) {
  fx *f = *state;
  CURL *h = curl_easy_init();
  buf b = {0};
  char *big = malloc(3001);
  double t0;
  chunks ck = {.left = 5};
  struct curl_slist *hd = curl_slist_append(NULL, "Transfer-Encoding: chunked");
  struct curl_slist *ex = curl_slist_append(NULL, "Expect: 100-continue");
  assert_int_equal(fetch(h, f, "POST", "/echo", "{\"x\":1}", NULL, &b), 200);
  assert_non_null(strstr(b.p, "method=POST\n"));
  assert_non_null(strstr(b.p, "h:content-length=7\n"));
  assert_string_equal(strstr(b.p, "body="), "body={\"x\":1}");

  /* With Expect: 100-continue curl waits a second for "go on" before sending the body. */
  memset(big, 'b', 3000);
  big[3000] = '\0';
  t0 = now_s();
  assert_int_equal(fetch(h, f, "PUT", "/echo", big, ex, &b), 200);
  assert_true(now_s() - t0 < 0.8);
  assert_non_null(strstr(b.p, "h:expect=100-continue\n"));
  assert_int_equal(strlen(strstr(b.p, "body=") + 5), 3000);

  /* A chunked body arrives de-chunked. */
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
  curl_easy_setopt(h, CURLOPT_READFUNCTION, read_chunks);
  curl_easy_setopt(h, CURLOPT_READDATA, &ck);
  curl_easy_setopt(h, CURLOPT_URL, "");
  {
    char url[128];
    long status = 0;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/echo", f->port);
    free(b.p);
    b.p = NULL;
    b.len = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    assert_int_equal(status, 200);
  }
  assert_non_null(strstr(b.p, "h:transfer-encoding=chunked\n"));
  assert_string_equal(strstr(b.p, "body="), "body=01234567890123456789012345678901234567890123456789");
  curl_slist_free_all(hd);
  curl_slist_free_all(ex);
  free(big);
  free(b.p);
  curl_easy_cleanup(h);
}

static void test_keepalive_reuse(void **state) {
  fx *f = *state;
  CURL *h = curl_easy_init();
  buf b = {0};
  assert_int_equal(fetch(h, f, "GET", "/echo?n=1", NULL, NULL, &b), 200);
  assert_int_equal(new_connections(h), 1);
  assert_int_equal(fetch(h, f, "GET", "/echo?n=2", NULL, NULL, &b), 200);
  assert_int_equal(new_connections(h), 0);
  assert_int_equal(fetch(h, f, "GET", "/later", NULL, NULL, &b), 202);
  assert_string_equal(b.p, "later");
  assert_int_equal(new_connections(h), 0);
  assert_int_equal(fetch(h, f, "GET", "/big", NULL, NULL, &b), 200);
  assert_int_equal(b.len, 300 * 1024);
  assert_int_equal(fetch(h, f, "HEAD", "/echo", NULL, NULL, &b), 200);
  assert_int_equal(b.len, 0);
  assert_int_equal(fetch(h, f, "GET", "/nocontent", NULL, NULL, &b), 204);
  assert_int_equal(b.len, 0);
  assert_int_equal(fetch(h, f, "GET", "/echo?n=3", NULL, NULL, &b), 200);
  assert_int_equal(new_connections(h), 0);
  /* Stop with the client's connection still open: it is closed, nothing leaks. */
  fx_stop(f);
  assert_int_equal(atomic_load(&f->closed), 0);
  free(b.p);
  curl_easy_cleanup(h);
}

static void test_sse_stream(void **state) {
  fx *f = *state;
  CURL *h = curl_easy_init();
  buf b = {0};
  char *ctype = NULL;
  int fd;
  char *all, *sep;
  assert_int_equal(fetch(h, f, "GET", "/sse", NULL, NULL, &b), 200);
  assert_string_equal(b.p, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
  curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
  assert_string_equal(ctype, "text/event-stream");
  /* The chunked end lets the connection carry the next request. */
  assert_int_equal(fetch(h, f, "GET", "/echo", NULL, NULL, &b), 200);
  assert_int_equal(new_connections(h), 0);

  /* HTTP/1.0 has no chunked coding: the body ends with the connection. */
  fd = raw_connect(f);
  RAW_SEND(fd, "GET /sse HTTP/1.0\r\n\r\n");
  all = raw_read_all(fd, NULL);
  assert_true(strncmp(all, "HTTP/1.1 200 OK\r\n", 17) == 0);
  assert_non_null(strstr(all, "Connection: close\r\n"));
  assert_null(strstr(all, "Transfer-Encoding"));
  sep = strstr(all, "\r\n\r\n");
  assert_non_null(sep);
  assert_string_equal(sep + 4, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
  free(all);
  close(fd);
  free(b.p);
  curl_easy_cleanup(h);
}

static void test_malformed_400(void **state) {
  fx *f = *state;
  static const char *const bad[] = {
      "GET /x HTTP/1.1\r\nBad Header\r\n\r\n",
      "GET /x HTTP/9.x\r\n\r\n",
      "GET /x HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int fd = raw_connect(f);
    char *all;
    raw_send(fd, bad[i], strlen(bad[i]));
    all = raw_read_all(fd, NULL);
    assert_true(strncmp(all, "HTTP/1.1 400 Bad Request\r\n", 26) == 0);
    assert_non_null(strstr(all, "Content-Type: application/json\r\n"));
    assert_non_null(strstr(all, "Connection: close\r\n"));
    assert_non_null(strstr(all, "\r\n\r\n{\"error\":{\"code\":\"bad_request\",\"message\":\"malformed request: "));
    assert_non_null(strstr(all, "(HPE_"));
    free(all);
    close(fd);
  }
  assert_int_equal(atomic_load(&f->requests), 0);
}

static void test_timeout_408(void **state) {
  fx *f = *state;
  int fd = raw_connect(f);
  double t0 = now_s(), dt;
  char *all;
  RAW_SEND(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"); /* stalls */
  all = raw_read_all(fd, NULL);
  dt = now_s() - t0;
  assert_true(strncmp(all, "HTTP/1.1 408 Request Timeout\r\n", 30) == 0);
  assert_non_null(strstr(all, "{\"error\":{\"code\":\"request_timeout\",\"message\":\"the request was not complete within 200 ms\"}}"));
  assert_true(dt > 0.15 && dt < 1.5);
  free(all);
  close(fd);
}

static void test_idle_close(void **state) {
  fx *f = *state;
  int fd = raw_connect(f);
  char *one, *rest;
  size_t n;
  double t0;
  RAW_SEND(fd, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  one = raw_read_one(fd);
  assert_non_null(strstr(one, "Connection: keep-alive\r\n"));
  t0 = now_s();
  rest = raw_read_all(fd, &n); /* the idle connection is closed after idle_ms */
  assert_int_equal(n, 0);
  assert_true(now_s() - t0 > 0.2);
  free(one);
  free(rest);
  close(fd);
}

static void test_body_limit_413(void **state) {
  fx *f = *state;
  int fd = raw_connect(f);
  char *all;
  CURL *h;
  buf b = {0};
  char big[1501];
  /* By Content-Length, before any of the body is read. */
  RAW_SEND(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
  all = raw_read_all(fd, NULL);
  assert_true(strncmp(all, "HTTP/1.1 413 Payload Too Large\r\n", 32) == 0);
  assert_non_null(strstr(all, "{\"error\":{\"code\":\"body_too_large\",\"message\":\"request body is over the 1000-byte limit\"}}"));
  free(all);
  close(fd);

  /* Chunked: counted while it arrives. */
  fd = raw_connect(f);
  RAW_SEND(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 3; i++) {
    char chunk[600];
    int n = snprintf(chunk, sizeof chunk, "1f4\r\n%0500d\r\n", 0);
    raw_send(fd, chunk, (size_t)n);
  }
  all = raw_read_all(fd, NULL);
  assert_true(strncmp(all, "HTTP/1.1 413 ", 13) == 0);
  free(all);
  close(fd);

  /* curl sees the 413 as an answer to its Expect: 100-continue. */
  h = curl_easy_init();
  memset(big, 'z', 1500);
  big[1500] = '\0';
  assert_int_equal(fetch(h, f, "POST", "/echo", big, NULL, &b), 413);
  assert_non_null(strstr(b.p, "body_too_large"));
  /* Exactly at the limit is fine. */
  big[1000] = '\0';
  assert_int_equal(fetch(h, f, "POST", "/echo", big, NULL, &b), 200);
  free(b.p);
  curl_easy_cleanup(h);
}

static void test_headers_431(void **state) {
  fx *f = *state;
  size_t n = 70 * 1024;
  char *req = malloc(n + 64), *all;
  int fd = raw_connect(f);
  int len = snprintf(req, 64, "GET /echo HTTP/1.1\r\nX-Big: ");
  memset(req + len, 'a', n);
  memcpy(req + len + n, "\r\n\r\n", 4);
  raw_send(fd, req, (size_t)len + n + 4);
  all = raw_read_all(fd, NULL);
  assert_true(strncmp(all, "HTTP/1.1 431 ", 13) == 0);
  assert_non_null(strstr(all, "\"code\":\"headers_too_large\""));
  free(all);
  free(req);
  close(fd);
}

/* http-parser skips leading whitespace of a value without a callback: its own
 * overflow (HPE_HEADER_OVERFLOW) must be a 431 too. */
static void test_headers_431_padded(void **state) {
  fx *f = *state;
  size_t n = 90 * 1024;
  char *req = malloc(n + 64), *all;
  int fd = raw_connect(f);
  int len = snprintf(req, 64, "GET /echo HTTP/1.1\r\nX-Pad:");
  memset(req + len, ' ', n);
  memcpy(req + len + n, "a\r\n\r\n", 5);
  raw_send(fd, req, (size_t)len + n + 5);
  all = raw_read_all(fd, NULL);
  assert_true(strncmp(all, "HTTP/1.1 431 ", 13) == 0);
  assert_non_null(strstr(all, "\"code\":\"headers_too_large\""));
  free(all);
  free(req);
  close(fd);
  assert_int_equal(atomic_load(&f->requests), 0);
}

static void test_versions(void **state) {
  fx *f = *state;
  static const struct { const char *req, *status, *code; } cases[] = {
      {"GET /echo HTTP/9.9\r\nHost: x\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported\r\n",
       "http_version_not_supported"},
      {"GET /echo HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/1.1 505 ", "http_version_not_supported"},
      {"GET /echo HTTP/1.2\r\nHost: x\r\n\r\n", "HTTP/1.1 505 ", "http_version_not_supported"},
      {"GET /echo\r\nHost: x\r\n\r\n", "HTTP/1.1 400 ", "bad_request"},
      {"GET /echo\r\n\r\n", "HTTP/1.1 400 ", "bad_request"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int fd = raw_connect(f);
    char *all, want[64];
    raw_send(fd, cases[i].req, strlen(cases[i].req));
    all = raw_read_all(fd, NULL);
    if (strncmp(all, cases[i].status, strlen(cases[i].status)) != 0)
      fail_msg("%s: got %.60s", cases[i].req, all);
    snprintf(want, sizeof want, "\"code\":\"%s\"", cases[i].code);
    assert_non_null(strstr(all, want));
    free(all);
    close(fd);
  }
  assert_int_equal(atomic_load(&f->requests), 0);
}

static void test_caps_and_auth(void **state) {
  fx *f = *state;
  char *all, *one;
  double t0;
  size_t n;
  /* A silent connection is closed after first_byte_ms. */
  int fd = raw_connect(f);
  t0 = now_s();
  all = raw_read_all(fd, &n);
  assert_int_equal(n, 0);
  assert_true(now_s() - t0 > 0.2 && now_s() - t0 < 2.0);
  free(all);
  close(fd);

  /* Idle connections give way: 3 silent ones fill the per-peer cap, a 4th is served. */
  int idle[3];
  for (int i = 0; i < 3; i++) idle[i] = raw_connect(f);
  fd = raw_connect(f);
  RAW_SEND(fd, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  one = raw_read_one(fd);
  assert_true(strncmp(one, "HTTP/1.1 200 ", 13) == 0);
  free(one);
  close(fd);
  all = raw_read_all(idle[0], &n); /* the oldest idle one was closed to make room */
  assert_int_equal(n, 0);
  free(all);
  for (int i = 0; i < 3; i++) close(idle[i]);

  /* Busy connections do not give way: 3 unanswered requests, then a 503 at once. */
  usleep(100 * 1000); /* the closes above reach the server */
  int busy[3];
  for (int i = 0; i < 3; i++) {
    busy[i] = raw_connect(f);
    RAW_SEND(busy[i], "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  for (int i = 0; i < 3000 && atomic_load(&f->requests) < 1 + 3; i++) usleep(1000); /* the /echo, the hangs */
  fd = raw_connect(f);
  t0 = now_s();
  all = raw_read_all(fd, NULL);
  assert_true(now_s() - t0 < 1.0);
  assert_true(strncmp(all, "HTTP/1.1 503 ", 13) == 0);
  assert_non_null(strstr(all, "\"code\":\"too_many_connections\""));
  free(all);
  close(fd);
  for (int i = 0; i < 3; i++) close(busy[i]);
  usleep(100 * 1000);

  /* The token is checked when the headers are complete: the body is never waited for. */
  fd = raw_connect(f);
  RAW_SEND(fd, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n");
  t0 = now_s();
  all = raw_read_all(fd, NULL);
  assert_true(now_s() - t0 < 1.0);
  assert_true(strncmp(all, "HTTP/1.1 401 ", 13) == 0);
  assert_non_null(strstr(all, "WWW-Authenticate: Bearer\r\n"));
  free(all);
  close(fd);
  static const char *const wrong[] = {"Bearer tok-12", "Bearer tok-1234", "Bearer tok-124", "bearer tok-123",
                                      "tok-123", ""};
  for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
    char req[160];
    int len = snprintf(req, sizeof req, "GET /v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n\r\n", wrong[i]);
    fd = raw_connect(f);
    raw_send(fd, req, (size_t)len);
    all = raw_read_all(fd, NULL);
    if (strncmp(all, "HTTP/1.1 401 ", 13) != 0) fail_msg("'%s': %.40s", wrong[i], all);
    free(all);
    close(fd);
  }
  fd = raw_connect(f);
  RAW_SEND(fd, "GET /v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-123\r\n\r\n"
               "GET http://h/v1/x HTTP/1.1\r\nHost: x\r\n\r\n");
  all = raw_read_all(fd, NULL);
  assert_true(strncmp(all, "HTTP/1.1 404 ", 13) == 0); /* the handler's: authorized */
  assert_non_null(strstr(all + 13, "HTTP/1.1 401 ")); /* absolute-form is checked too */
  free(all);
  close(fd);
  fd = raw_connect(f); /* outside /v1/: no token needed */
  RAW_SEND(fd, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  all = raw_read_all(fd, NULL);
  assert_true(strncmp(all, "HTTP/1.1 200 ", 13) == 0);
  free(all);
  close(fd);
}

static void test_header_ok(void **state) {
  (void)state;
  assert_int_equal(moor_http_header_ok("X-A: 1", 6), 0);
  assert_int_equal(moor_http_header_ok("X-A:", 4), 0);
  assert_int_equal(moor_http_header_ok("X-A: a\tb", 8), 0);
  assert_int_equal(moor_http_header_ok("X-A: 1\r\nSet-Cookie: x=1", 24), MOOR_EINVAL);
  assert_int_equal(moor_http_header_ok("X-A: 1\nB: 2", 11), MOOR_EINVAL);
  assert_int_equal(moor_http_header_ok("X-A: \x7f", 6), MOOR_EINVAL);
  assert_int_equal(moor_http_header_ok("X A: 1", 6), MOOR_EINVAL);
  assert_int_equal(moor_http_header_ok(": 1", 3), MOOR_EINVAL);
  assert_int_equal(moor_http_header_ok("X-A", 3), MOOR_EINVAL);
  assert_int_equal(moor_http_header_ok("X-A: a\0b", 8), MOOR_EINVAL);
}

static void test_pipelined(void **state) {
  fx *f = *state;
  int fd = raw_connect(f);
  char *all, *p1, *p2, *p3;
  RAW_SEND(fd, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"
               "POST /echo?n=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
               "GET /echo?n=3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
               "GET /echo?n=4 HTTP/1.1\r\nHost: x\r\n\r\n"); /* after close: never answered */
  all = raw_read_all(fd, NULL);
  p1 = strstr(all, "HTTP/1.1 202 Accepted\r\n");
  p2 = strstr(all, "query=n=2\n");
  p3 = strstr(all, "query=n=3\n");
  assert_true(p1 == all);
  assert_non_null(p2);
  assert_non_null(p3);
  assert_true(p1 < p2 && p2 < p3);
  assert_non_null(strstr(p2, "body=abc"));
  assert_non_null(strstr(p2, "Connection: close\r\n"));
  assert_null(strstr(all, "n=4"));
  assert_int_equal(atomic_load(&f->requests), 3);
  free(all);
  close(fd);
}

static void test_http10_and_urls(void **state) {
  fx *f = *state;
  int fd = raw_connect(f);
  char *one, *all;
  RAW_SEND(fd, "GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  one = raw_read_one(fd);
  assert_non_null(strstr(one, "Connection: keep-alive\r\n"));
  free(one);
  RAW_SEND(fd, "GET http://example.com/echo?x=1#frag HTTP/1.0\r\n\r\n");
  all = raw_read_all(fd, NULL);
  assert_non_null(strstr(all, "Connection: close\r\n"));
  assert_non_null(strstr(all, "path=/echo\nquery=x=1\n"));
  free(all);
  close(fd);

  fd = raw_connect(f);
  RAW_SEND(fd, "OPTIONS /echo#frag HTTP/1.1\r\nHost: x\r\nEmpty:\r\n\r\n");
  one = raw_read_one(fd);
  assert_non_null(strstr(one, "method=OPTIONS\npath=/echo\nquery=(none)\nh:host=x\nh:empty=\n"));
  free(one);
  RAW_SEND(fd, "GET /twice HTTP/1.1\r\n\r\n");
  one = raw_read_one(fd);
  assert_non_null(strstr(one, "Connection: keep-alive\r\nX-A: 1\r\nX-B: 2\r\n\r\none"));
  free(one);
  close(fd);
}

static void wait_for(atomic_int *v, int want) {
  for (int i = 0; i < 300 && atomic_load(v) != want; i++) usleep(10000);
  assert_int_equal(atomic_load(v), want);
}

static void test_peer_close(void **state) {
  fx *f = *state;
  int fd = raw_connect(f);
  RAW_SEND(fd, "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n");
  wait_for(&f->requests, 1);
  close(fd);
  wait_for(&f->closed, 1);
  assert_int_equal(atomic_load(&f->gone_rc), MOOR_ENOTFOUND);

  /* The same for an open stream. */
  atomic_store(&f->gone_rc, 1);
  fd = raw_connect(f);
  RAW_SEND(fd, "GET /hang?stream HTTP/1.1\r\nHost: x\r\n\r\n");
  wait_for(&f->requests, 2);
  close(fd);
  wait_for(&f->closed, 2);
  assert_int_equal(atomic_load(&f->gone_rc), MOOR_ENOTFOUND);

  /* Stopping the server with a request unanswered does not call on_closed. */
  fd = raw_connect(f);
  RAW_SEND(fd, "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n");
  wait_for(&f->requests, 3);
  fx_stop(f);
  assert_int_equal(atomic_load(&f->closed), 2);
  close(fd);
}

/* A client that never reads: the server queues up to 8 MiB, then drops it. */
static void test_slow_reader(void **state) {
  fx *f = *state;
  int fd = raw_connect(f);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  RAW_SEND(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n");
  wait_for(&f->flood_rc, MOOR_EIO);
  assert_true(atomic_load(&f->flood_bytes) >= 8L * 1024 * 1024);
  assert_true(atomic_load(&f->flood_bytes) < 64L * 1024 * 1024);
  assert_int_equal(atomic_load(&f->closed), 0); /* the caller learnt it from MOOR_EIO */
  close(fd);
}

/* Far more pipelined bytes than the server holds while a request waits: it
 * stops reading, then catches up, and every response comes in order. */
static void test_pipeline_flood(void **state) {
  fx *f = *state;
  enum { N = 5000 };
  size_t cap = (size_t)N * 96 + 256, len = 0, n;
  char *req = malloc(cap), *all, *p;
  int fd = raw_connect(f), i;
  len += (size_t)snprintf(req + len, cap - len, "GET /later HTTP/1.1\r\n\r\n");
  for (i = 1; i < N; i++)
    len += (size_t)snprintf(req + len, cap - len, "GET /echo?%d HTTP/1.1\r\nX-Pad: %040d\r\n%s\r\n", i, 0,
                            i == N - 1 ? "Connection: close\r\n" : "");
  raw_send(fd, req, len);
  all = raw_read_all(fd, &n);
  assert_true(strncmp(all, "HTTP/1.1 202 ", 13) == 0);
  p = all;
  for (i = 1; i < N; i++) {
    char want[32];
    snprintf(want, sizeof want, "query=%d\n", i);
    p = strstr(p, want);
    if (!p) fail_msg("response %d missing or out of order", i);
  }
  assert_int_equal(atomic_load(&f->requests), N);
  free(all);
  free(req);
  close(fd);
}

static void drain(uv_loop_t *loop) {
  uv_run(loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(loop), 0);
}

static void test_start_errors(void **state) {
  fx *f = *state;
  uv_loop_t loop;
  moor_http *srv = (moor_http *)&loop;
  char err[256];
  moor_http_config cfg = {.host = "localhost"};
  assert_int_equal(uv_loop_init(&loop), 0);
  assert_int_equal(moor_http_start(&loop, &cfg, handler, NULL, NULL, &srv, err, sizeof err), MOOR_EINVAL);
  assert_null(srv);
  assert_string_equal(err, "http: 'localhost' is not an IPv4 or IPv6 address");
  cfg.host = NULL;
  cfg.port = 70000;
  assert_int_equal(moor_http_start(&loop, &cfg, handler, NULL, NULL, &srv, err, sizeof err), MOOR_EINVAL);
  assert_int_equal(moor_http_start(&loop, NULL, NULL, NULL, NULL, &srv, err, sizeof err), MOOR_EINVAL);
  cfg.port = f->port; /* taken by the fixture's server */
  assert_int_equal(moor_http_start(&loop, &cfg, handler, NULL, NULL, &srv, err, sizeof err), MOOR_EIO);
  assert_null(srv);
  assert_non_null(strstr(err, "cannot listen on 127.0.0.1 port"));
  assert_non_null(strstr(err, "address already in use"));
  drain(&loop); /* the failed listener is freed by the loop */

  /* Calls on ids that never existed. */
  assert_int_equal(moor_http_respond(f->srv, 12345, 200, NULL, NULL, NULL, 0), MOOR_ENOTFOUND);
  assert_int_equal(moor_http_stream_write(f->srv, 99ULL << 32, "x", 1), MOOR_ENOTFOUND);
  assert_int_equal(moor_http_stream_end(f->srv, 0), MOOR_ENOTFOUND);

  /* IPv6 loopback, where the machine has it. */
  assert_int_equal(uv_loop_init(&loop), 0);
  cfg.host = "::1";
  cfg.port = 0;
  if (moor_http_start(&loop, &cfg, handler, NULL, NULL, &srv, err, sizeof err) == 0) {
    assert_true(moor_http_port(srv) > 0);
    moor_http_stop(srv);
  }
  drain(&loop);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_get_echo, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_post_bodies, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_keepalive_reuse, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_sse_stream, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_malformed_400, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_timeout_408, setup_strict, teardown),
      cmocka_unit_test_setup_teardown(test_idle_close, setup_strict, teardown),
      cmocka_unit_test_setup_teardown(test_body_limit_413, setup_strict, teardown),
      cmocka_unit_test_setup_teardown(test_headers_431, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_headers_431_padded, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_versions, setup_default, teardown),
      cmocka_unit_test(test_header_ok),
      cmocka_unit_test_setup_teardown(test_caps_and_auth, setup_caps, teardown),
      cmocka_unit_test_setup_teardown(test_pipelined, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_http10_and_urls, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_peer_close, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_slow_reader, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_pipeline_flood, setup_default, teardown),
      cmocka_unit_test_setup_teardown(test_start_errors, setup_default, teardown),
  };
  int rc;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
