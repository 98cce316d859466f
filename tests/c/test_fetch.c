/* Unit tests for the fetch client (host/fetch.c) and its Lua binding
 * (host/fetch_lua.c).
 *
 * Everything runs on one uv loop in one thread: the project's own HTTP server
 * (host/http.c) is the peer. Its handler routes on the path:
 *   /echo        answers at once with what it saw (method, query, headers, body)
 *   /status?N    answers status N (429 with Retry-After: 7)
 *   /later?N     answers N ms later (default 30), from a uv_timer
 *   /slow        answers 500 ms later
 *   /hang        never answers
 *   /redirect    302 to /echo
 *   /goto?URL    307 to URL (/goto303?URL: 303)
 *   /big         a 33 MiB body with Content-Length
 *   /bigstream   a 33 MiB body, chunked, written a slice at a time
 *   /pieces      "one\n", "two\n", "three\n" chunked, 20 ms apart (streaming)
 * Teardown closes the client (if the test did not), stops the server, runs
 * the loop until it has no handles and checks uv_loop_close succeeds; ASan
 * checks for leaks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fetch.h"
#include "http.h"
#include "moor.h"

#define BIG ((size_t)33 * 1024 * 1024)
#define SLICE ((size_t)512 * 1024)

typedef struct job job;

typedef struct fx {
  uv_loop_t loop;
  uv_timer_t guard;            /* wakes run_until at its deadline */
  int expired;
  moor_http *srv;
  moor_http *other;            /* a second server (another origin), when a test starts one */
  moor_fetch *f;               /* NULL once a test closed it */
  char base[64];               /* http://127.0.0.1:PORT */
  job *jobs;
  int requests;                /* handler calls */
  int waiting, most_waiting;   /* delayed answers pending, now and at most */
  char *big;
  lua_State *L;
  int lua_done;                /* calls of done() from Lua */
} fx;

struct job {
  uv_timer_t timer;
  fx *x;
  unsigned long long conn;
  size_t sent;
  job *prev, *next;
};

/* ------------------------------------------------------------ the server */

static void job_closed(uv_handle_t *h) { free(h->data); }

static void job_done(job *j) {
  if (j->prev) j->prev->next = j->next;
  else j->x->jobs = j->next;
  if (j->next) j->next->prev = j->prev;
  j->x->waiting--;
  uv_close((uv_handle_t *)&j->timer, job_closed);
}

static void later_fire(uv_timer_t *t) {
  job *j = t->data;
  moor_http_respond(j->x->srv, j->conn, 200, "text/plain", NULL, "later", 5); /* ENOTFOUND if gone */
  job_done(j);
}

static void stream_fire(uv_timer_t *t) {
  job *j = t->data;
  size_t n = BIG - j->sent < SLICE ? BIG - j->sent : SLICE;
  if (moor_http_stream_write(j->x->srv, j->conn, j->x->big + j->sent, n) != 0) {
    job_done(j); /* the client hung up */
    return;
  }
  j->sent += n;
  if (j->sent == BIG) {
    moor_http_stream_end(j->x->srv, j->conn);
    job_done(j);
  }
}

static const char *const PIECES[] = {"one\n", "two\n", "three\n"};

static void pieces_fire(uv_timer_t *t) {
  job *j = t->data;
  if (j->sent == 3) {
    moor_http_stream_end(j->x->srv, j->conn);
    job_done(j);
    return;
  }
  if (moor_http_stream_write(j->x->srv, j->conn, PIECES[j->sent], strlen(PIECES[j->sent])) != 0) {
    job_done(j); /* the client hung up (a cancel) */
    return;
  }
  j->sent++;
}

static void job_start(fx *x, unsigned long long conn, uv_timer_cb cb, uint64_t ms, uint64_t repeat) {
  job *j = calloc(1, sizeof *j);
  assert_non_null(j);
  j->x = x;
  j->conn = conn;
  j->timer.data = j;
  j->next = x->jobs;
  if (x->jobs) x->jobs->prev = j;
  x->jobs = j;
  if (++x->waiting > x->most_waiting) x->most_waiting = x->waiting;
  assert_int_equal(uv_timer_init(&x->loop, &j->timer), 0);
  assert_int_equal(uv_timer_start(&j->timer, cb, ms, repeat), 0);
}

static void echo(moor_http *srv, const moor_http_request *req) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_non_null(out);
  fprintf(out, "method=%s\nquery=%s\n", req->method, req->query ? req->query : "(none)");
  for (size_t i = 0; i < req->nheaders; i++) fprintf(out, "h:%s=%s\n", req->names[i], req->values[i]);
  fprintf(out, "body=");
  fwrite(req->body, 1, req->body_len, out);
  fclose(out);
  assert_int_equal(moor_http_respond(srv, req->conn, 200, "text/plain",
                                     "X-Mixed-CASE: Yes\r\nX-Dup: a\r\nX-Dup: b\r\n", text, len), 0);
  free(text);
}

static void handler(moor_http *srv, const moor_http_request *req, void *ud) {
  fx *x = ud;
  const char *p = req->path;
  x->requests++;
  if (strcmp(p, "/echo") == 0) {
    echo(srv, req);
  } else if (strcmp(p, "/status") == 0) {
    int code = req->query ? atoi(req->query) : 200;
    assert_int_equal(moor_http_respond(srv, req->conn, code, "text/plain", code == 429 ? "Retry-After: 7" : NULL,
                                       "status", 6), 0);
  } else if (strcmp(p, "/later") == 0) {
    job_start(x, req->conn, later_fire, req->query ? (uint64_t)atoi(req->query) : 30, 0);
  } else if (strcmp(p, "/slow") == 0) {
    job_start(x, req->conn, later_fire, 500, 0);
  } else if (strcmp(p, "/hang") == 0) {
    /* never answered; stopping the server closes it */
  } else if (strcmp(p, "/redirect") == 0) {
    assert_int_equal(moor_http_respond(srv, req->conn, 302, "text/plain", "Location: /echo?moved\r\n", "moved", 5), 0);
  } else if (strcmp(p, "/goto") == 0 || strcmp(p, "/goto303") == 0) {
    /* a redirect to the URL in the query: 307 (method and body kept) or 303 (GET) */
    char loc[512];
    snprintf(loc, sizeof loc, "Location: %s\r\n", req->query ? req->query : "/echo");
    assert_int_equal(moor_http_respond(srv, req->conn, strcmp(p, "/goto") == 0 ? 307 : 303, "text/plain", loc,
                                       "moved", 5), 0);
  } else if (strcmp(p, "/big") == 0) {
    moor_http_respond(srv, req->conn, 200, "application/octet-stream", NULL, x->big, BIG);
  } else if (strcmp(p, "/pieces") == 0) {
    assert_int_equal(moor_http_stream_start(srv, req->conn, 200, "text/event-stream", NULL), 0);
    job_start(x, req->conn, pieces_fire, 20, 20);
  } else if (strcmp(p, "/bigstream") == 0) {
    assert_int_equal(moor_http_stream_start(srv, req->conn, 200, "application/octet-stream", NULL), 0);
    job_start(x, req->conn, stream_fire, 1, 1); /* paced: the server drops a reader 8 MiB behind */
  } else {
    assert_int_equal(moor_http_respond(srv, req->conn, 404, "text/plain", NULL, "no route", 8), 0);
  }
}

/* ------------------------------------------------------------ fixture */

static void guard_fire(uv_timer_t *t) {
  fx *x = t->data;
  x->expired = 1;
}

/* Run the loop until *counter reaches target or ms pass; 0 when reached. */
static int run_until(fx *x, const int *counter, int target, unsigned ms) {
  x->expired = 0;
  uv_timer_start(&x->guard, guard_fire, ms, 0);
  while (*counter < target && !x->expired) uv_run(&x->loop, UV_RUN_ONCE);
  uv_timer_stop(&x->guard);
  return *counter >= target ? 0 : -1;
}

/* Run the loop for ms, whatever happens. */
static void run_for(fx *x, unsigned ms) {
  int never = 0;
  run_until(x, &never, 1, ms);
}

static int setup(void **state) {
  fx *x = calloc(1, sizeof *x);
  char err[256];
  assert_non_null(x);
  assert_int_equal(uv_loop_init(&x->loop), 0);
  assert_int_equal(uv_timer_init(&x->loop, &x->guard), 0);
  x->guard.data = x;
  moor_http_config cfg;
  memset(&cfg, 0, sizeof cfg);
  assert_int_equal(moor_http_start(&x->loop, &cfg, handler, NULL, x, &x->srv, err, sizeof err), 0);
  snprintf(x->base, sizeof x->base, "http://127.0.0.1:%d", moor_http_port(x->srv));
  assert_int_equal(moor_fetch_open(&x->loop, &x->f), 0);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  fx *x = *state;
  if (x->L) lua_close(x->L);
  moor_fetch_close(x->f);
  moor_http_stop(x->srv);
  moor_http_stop(x->other);
  while (x->jobs) job_done(x->jobs);
  uv_close((uv_handle_t *)&x->guard, NULL);
  uv_run(&x->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&x->loop), 0);
  free(x->big);
  free(x);
  return 0;
}

/* ------------------------------------------------------------ C helpers */

/* What a callback saw, copied: the response is valid only during it. */
typedef struct seen {
  fx *x;
  int calls;
  long status;
  int timed_out;
  char *error;
  char *body;
  size_t body_len;
  size_t nheaders;
  char names[32][64];
  char values[32][64];
  void (*then)(struct seen *s);   /* more work inside the callback */
  void *arg;
} seen;

static void record(const moor_fetch_response *r, void *ud) {
  seen *s = ud;
  s->calls++;
  s->status = r->status;
  s->timed_out = r->timed_out;
  free(s->error);
  free(s->body);
  s->error = r->error ? strdup(r->error) : NULL;
  assert_non_null(r->body);
  assert_int_equal(r->body[r->body_len], '\0');
  s->body = malloc(r->body_len + 1);
  assert_non_null(s->body);
  memcpy(s->body, r->body, r->body_len + 1);
  s->body_len = r->body_len;
  s->nheaders = r->nheaders < 32 ? r->nheaders : 32;
  for (size_t i = 0; i < s->nheaders; i++) {
    snprintf(s->names[i], sizeof s->names[i], "%s", r->header_names[i]);
    snprintf(s->values[i], sizeof s->values[i], "%s", r->header_values[i]);
  }
  if (s->then) s->then(s);
}

static void seen_free(seen *s) {
  free(s->error);
  free(s->body);
  s->error = s->body = NULL;
}

static const char *header(const seen *s, const char *name) {
  for (size_t i = 0; i < s->nheaders; i++)
    if (strcmp(s->names[i], name) == 0) return s->values[i];
  return NULL;
}

static unsigned long long start(fx *x, const char *method, const char *path, const char *const *headers,
                                const char *body, size_t body_len, long timeout_ms, seen *s) {
  char url[256];
  snprintf(url, sizeof url, "%s%s", x->base, path);
  moor_fetch_request req = {method, url, headers, body, body_len, timeout_ms, 0, 0, NULL, NULL};
  unsigned long long id = 0;
  int rc = moor_fetch_start(x->f, &req, record, s, &id);
  if (rc) fprintf(stderr, "start %s: %s\n", path, moor_fetch_errmsg(x->f));
  assert_int_equal(rc, 0);
  assert_true(id > 0);
  return id;
}

/* ------------------------------------------------------------ C tests */

static void test_get_echo(void **state) {
  fx *x = *state;
  seen s = {.x = x};
  const char *hdrs[] = {"X-Test: hello world", "Accept: text/plain", "X-Empty;", NULL};
  start(x, NULL, "/echo?a=1&b=2", hdrs, NULL, 0, 0, &s);
  assert_int_equal(moor_fetch_active(x->f), 1);
  assert_int_equal(s.calls, 0); /* never from inside start */
  assert_int_equal(run_until(x, &s.calls, 1, 2000), 0);
  assert_null(s.error);
  assert_int_equal(s.status, 200);
  assert_int_equal(s.timed_out, 0);
  assert_non_null(strstr(s.body, "method=GET\n"));
  assert_non_null(strstr(s.body, "query=a=1&b=2\n"));
  assert_non_null(strstr(s.body, "h:x-test=hello world\n"));
  assert_non_null(strstr(s.body, "h:accept=text/plain\n"));
  assert_non_null(strstr(s.body, "h:x-empty=\n"));
  assert_non_null(strstr(s.body, "h:user-agent=moor/"));
  assert_null(strstr(s.body, "h:expect"));
  /* response headers: names lower-cased, values as sent */
  assert_string_equal(header(&s, "x-mixed-case"), "Yes");
  assert_string_equal(header(&s, "content-type"), "text/plain");
  assert_non_null(header(&s, "content-length"));
  int dups = 0;
  for (size_t i = 0; i < s.nheaders; i++) {
    for (const char *c = s.names[i]; *c; c++) assert_false(*c >= 'A' && *c <= 'Z');
    dups += strcmp(s.names[i], "x-dup") == 0;
  }
  assert_int_equal(dups, 2);
  assert_int_equal(moor_fetch_active(x->f), 0);
  seen_free(&s);
}

static void test_post_bodies(void **state) {
  fx *x = *state;
  seen post = {.x = x}, put = {.x = x}, del = {.x = x}, empty = {.x = x}, head = {.x = x};
  static const char bin[] = {'a', '\0', 'b', '\n', 'c'};
  const char *hdrs[] = {"Content-Type: application/octet-stream", "Authorization: Bearer sk-secret", NULL};
  start(x, "POST", "/echo", hdrs, bin, sizeof bin, 0, &post);
  start(x, "put", "/echo", NULL, "{\"k\":1}", 7, 0, &put); /* methods are upper-cased */
  start(x, "DELETE", "/echo", NULL, NULL, 0, 0, &del);
  start(x, "POST", "/echo", NULL, NULL, 0, 0, &empty);
  start(x, "HEAD", "/echo", NULL, NULL, 0, 0, &head);
  seen *all[] = {&post, &put, &del, &empty, &head};
  for (int i = 0; i < 5; i++) assert_int_equal(run_until(x, &all[i]->calls, 1, 2000), 0);
  assert_null(post.error);
  assert_int_equal(post.status, 200);
  assert_non_null(strstr(post.body, "method=POST\n"));
  assert_non_null(strstr(post.body, "h:content-length=5\n"));
  assert_non_null(strstr(post.body, "h:content-type=application/octet-stream\n"));
  assert_non_null(strstr(post.body, "h:authorization=Bearer sk-secret\n"));
  const char *b = strstr(post.body, "body=");
  assert_non_null(b);
  b += 5;
  assert_int_equal((size_t)(post.body + post.body_len - b), sizeof bin);
  assert_memory_equal(b, bin, sizeof bin);
  assert_non_null(strstr(put.body, "method=PUT\n"));
  assert_non_null(strstr(put.body, "body={\"k\":1}"));
  assert_non_null(strstr(del.body, "method=DELETE\n"));
  assert_null(strstr(del.body, "h:content-length"));
  assert_non_null(strstr(empty.body, "method=POST\n"));
  assert_non_null(strstr(empty.body, "h:content-length=0\n"));
  assert_int_equal(head.status, 200);
  assert_int_equal(head.body_len, 0);
  seen_free(&post);
  seen_free(&put);
  seen_free(&del);
  seen_free(&empty);
  seen_free(&head);
}

static void test_status_codes(void **state) {
  fx *x = *state;
  static const int codes[] = {200, 404, 429, 500};
  seen s[4];
  memset(s, 0, sizeof s);
  for (int i = 0; i < 4; i++) {
    char path[32];
    snprintf(path, sizeof path, "/status?%d", codes[i]);
    start(x, NULL, path, NULL, NULL, 0, 0, &s[i]);
  }
  for (int i = 0; i < 4; i++) {
    assert_int_equal(run_until(x, &s[i].calls, 1, 2000), 0);
    assert_null(s[i].error); /* an HTTP error status is a response */
    assert_int_equal(s[i].status, codes[i]);
    assert_string_equal(s[i].body, "status");
    if (codes[i] == 429) assert_string_equal(header(&s[i], "retry-after"), "7");
    else assert_null(header(&s[i], "retry-after"));
    seen_free(&s[i]);
  }
}

static void test_redirects(void **state) {
  fx *x = *state;
  seen follow = {.x = x}, stay = {.x = x};
  start(x, NULL, "/redirect", NULL, NULL, 0, 0, &follow);
  char url[128];
  snprintf(url, sizeof url, "%s/redirect", x->base);
  moor_fetch_request req = {.url = url, .max_redirects = -1};
  assert_int_equal(moor_fetch_start(x->f, &req, record, &stay, NULL), 0);
  assert_int_equal(run_until(x, &follow.calls, 1, 2000), 0);
  assert_int_equal(run_until(x, &stay.calls, 1, 2000), 0);
  assert_int_equal(follow.status, 200);
  assert_non_null(strstr(follow.body, "query=moved\n"));
  assert_null(header(&follow, "location")); /* the final response's headers only */
  assert_string_equal(header(&follow, "x-mixed-case"), "Yes");
  assert_int_equal(stay.status, 302);
  assert_string_equal(header(&stay, "location"), "/echo?moved");
  assert_string_equal(stay.body, "moved");
  seen_free(&follow);
  seen_free(&stay);
}

/* Issue 7 item 3: a redirect to another origin (here: another port on
 * 127.0.0.1, a second server) must not carry the author's headers (an
 * x-api-key, Authorization, any other); a same-origin one keeps them. */
static void test_redirect_drops_headers_off_origin(void **state) {
  fx *x = *state;
  moor_http *other = NULL;
  char err[256], path[512], base2[64];
  /* teardown stops it, even when an assertion below fails */
  moor_http_config cfg;
  memset(&cfg, 0, sizeof cfg);
  assert_int_equal(moor_http_start(&x->loop, &cfg, handler, NULL, x, &other, err, sizeof err), 0);
  x->other = other;
  snprintf(base2, sizeof base2, "http://127.0.0.1:%d", moor_http_port(other));
  const char *hdrs[] = {"X-Api-Key: sk-SECRET", "Authorization: Bearer tok-SECRET", "X-Custom: mine",
                        "Content-Type: application/json", NULL};
  seen off = {.x = x}, same = {.x = x}, g303 = {.x = x}, back = {.x = x}, many = {.x = x};

  snprintf(path, sizeof path, "/goto?%s/echo", base2);
  start(x, "POST", path, hdrs, "{\"q\":1}", 7, 0, &off);
  start(x, "POST", "/goto?/echo", hdrs, "{\"q\":2}", 7, 0, &same);
  snprintf(path, sizeof path, "/goto303?%s/echo", base2);
  start(x, "POST", path, hdrs, "{\"q\":3}", 7, 0, &g303);
  snprintf(path, sizeof path, "/goto?%s/goto?%s/echo", base2, x->base); /* away and back */
  start(x, "POST", path, hdrs, "{\"q\":4}", 7, 0, &back);
  assert_int_equal(run_until(x, &off.calls, 1, 3000), 0);
  assert_int_equal(run_until(x, &same.calls, 1, 3000), 0);
  assert_int_equal(run_until(x, &g303.calls, 1, 3000), 0);
  assert_int_equal(run_until(x, &back.calls, 1, 3000), 0);

  assert_null(off.error);
  assert_int_equal(off.status, 200);
  assert_non_null(strstr(off.body, "method=POST\n")); /* 307 keeps the method and body */
  assert_non_null(strstr(off.body, "body={\"q\":1}"));
  assert_null(strstr(off.body, "SECRET"));
  assert_null(strstr(off.body, "h:x-custom"));
  assert_null(strstr(off.body, "h:authorization"));
  assert_non_null(strstr(off.body, "h:user-agent=moor/"));

  assert_int_equal(same.status, 200);
  assert_non_null(strstr(same.body, "h:x-api-key=sk-SECRET\n"));
  assert_non_null(strstr(same.body, "h:x-custom=mine\n"));
  assert_non_null(strstr(same.body, "body={\"q\":2}"));

  assert_int_equal(g303.status, 200);
  assert_non_null(strstr(g303.body, "method=GET\n"));
  assert_null(strstr(g303.body, "SECRET"));

  assert_int_equal(back.status, 200); /* once dropped, they stay dropped */
  assert_null(strstr(back.body, "SECRET"));
  assert_null(strstr(back.body, "h:x-custom"));

  /* more hops than allowed: an error, as curl's own limit was */
  char url[512];
  snprintf(url, sizeof url, "%s/goto?%s/goto?%s/echo", x->base, base2, x->base);
  moor_fetch_request req = {.url = url, .max_redirects = 1};
  assert_int_equal(moor_fetch_start(x->f, &req, record, &many, NULL), 0);
  assert_int_equal(run_until(x, &many.calls, 1, 3000), 0);
  assert_non_null(many.error);
  assert_non_null(strstr(many.error, "too many redirects"));

  seen_free(&off);
  seen_free(&same);
  seen_free(&g303);
  seen_free(&back);
  seen_free(&many);
}

static void test_concurrency(void **state) {
  fx *x = *state;
  enum { N = 20 };
  seen s[N];
  unsigned long long ids[N];
  int done = 0;
  memset(s, 0, sizeof s);
  for (int i = 0; i < N; i++) ids[i] = start(x, NULL, "/later?200", NULL, NULL, 0, 0, &s[i]);
  assert_int_equal(moor_fetch_active(x->f), N);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < i; j++) assert_true(ids[i] != ids[j]);
  uint64_t t0 = uv_now(&x->loop);
  while (done < N) {
    int before = done;
    run_for(x, 5);
    done = 0;
    for (int i = 0; i < N; i++) done += s[i].calls;
    if (done == before && uv_now(&x->loop) - t0 > 3000) break;
  }
  assert_int_equal(done, N);
  assert_int_equal(x->requests, N);
  assert_int_equal(x->most_waiting, N); /* all were at the server at once */
  for (int i = 0; i < N; i++) {
    assert_int_equal(s[i].calls, 1);
    assert_int_equal(s[i].status, 200);
    assert_string_equal(s[i].body, "later");
    seen_free(&s[i]);
  }
  /* in parallel: 20 answers 200 ms late take far less than 20 * 200 ms */
  assert_true(uv_now(&x->loop) - t0 < 1500);
  assert_int_equal(moor_fetch_active(x->f), 0);
}

static void test_timeout(void **state) {
  fx *x = *state;
  seen s = {.x = x};
  uv_update_time(&x->loop);
  uint64_t t0 = uv_now(&x->loop);
  start(x, NULL, "/slow", NULL, NULL, 0, 100, &s);
  assert_int_equal(run_until(x, &s.calls, 1, 2000), 0);
  uint64_t took = uv_now(&x->loop) - t0;
  assert_int_equal(s.status, 0);
  assert_int_equal(s.timed_out, 1);
  assert_non_null(s.error);
  assert_non_null(strstr(s.error, "timed out"));
  assert_int_equal(s.body_len, 0);
  assert_true(took >= 90 && took < 450); /* not the server's 500 ms */
  seen_free(&s);
}

static int closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd); /* bound, never listening: connecting is refused */
  return ntohs(a.sin_port);
}

static void test_refused(void **state) {
  fx *x = *state;
  seen s = {.x = x};
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", closed_port());
  moor_fetch_request req = {.url = url};
  assert_int_equal(moor_fetch_start(x->f, &req, record, &s, NULL), 0);
  assert_int_equal(run_until(x, &s.calls, 1, 2000), 0);
  assert_int_equal(s.status, 0);
  assert_int_equal(s.timed_out, 0);
  assert_non_null(s.error);
  assert_int_equal(s.nheaders, 0);
  /* by name: the threaded resolver, then every address refused in turn */
  seen n = {.x = x};
  snprintf(url, sizeof url, "http://localhost:%d/", closed_port());
  assert_int_equal(moor_fetch_start(x->f, &req, record, &n, NULL), 0);
  assert_int_equal(run_until(x, &n.calls, 1, 2000), 0);
  assert_int_equal(n.status, 0);
  assert_int_equal(n.timed_out, 0);
  assert_non_null(n.error);
  seen_free(&s);
  seen_free(&n);
}

static void test_cancel(void **state) {
  fx *x = *state;
  seen a = {.x = x}, b = {.x = x}, c = {.x = x};
  /* at once, before the loop ran */
  unsigned long long ia = start(x, NULL, "/hang", NULL, NULL, 0, 0, &a);
  assert_int_equal(moor_fetch_cancel(x->f, ia), 0);
  assert_int_equal(moor_fetch_cancel(x->f, ia), MOOR_ENOTFOUND);
  /* once the server has the request */
  unsigned long long ib = start(x, NULL, "/hang", NULL, NULL, 0, 0, &b);
  assert_int_equal(run_until(x, &x->requests, 1, 2000), 0);
  assert_int_equal(moor_fetch_active(x->f), 1);
  assert_int_equal(moor_fetch_cancel(x->f, ib), 0);
  assert_int_equal(moor_fetch_active(x->f), 0);
  /* a finished request is not found; nor is one never started */
  unsigned long long ic = start(x, NULL, "/echo", NULL, NULL, 0, 0, &c);
  assert_int_equal(run_until(x, &c.calls, 1, 2000), 0);
  assert_int_equal(moor_fetch_cancel(x->f, ic), MOOR_ENOTFOUND);
  assert_int_equal(moor_fetch_cancel(x->f, 999999), MOOR_ENOTFOUND);
  run_for(x, 50);
  assert_int_equal(a.calls, 0);
  assert_int_equal(b.calls, 0);
  assert_int_equal(c.calls, 1);
  seen_free(&c);
}

static void test_close_in_flight(void **state) {
  fx *x = *state;
  seen s[4];
  memset(s, 0, sizeof s);
  for (int i = 0; i < 3; i++) start(x, NULL, "/hang", NULL, NULL, 0, 0, &s[i]);
  start(x, NULL, "/slow", NULL, NULL, 0, 0, &s[3]);
  assert_int_equal(run_until(x, &x->requests, 4, 2000), 0);
  moor_fetch_close(x->f);
  assert_int_equal(moor_fetch_active(x->f), 0); /* still valid until the loop runs */
  assert_int_equal(moor_fetch_cancel(x->f, 1), MOOR_ENOTFOUND);
  moor_fetch_request req = {.url = x->base};
  assert_int_equal(moor_fetch_start(x->f, &req, record, &s[0], NULL), MOOR_EINVAL);
  x->f = NULL;
  run_for(x, 600);
  for (int i = 0; i < 4; i++) assert_int_equal(s[i].calls, 0);
}

/* Callbacks may start, cancel and close. */
typedef struct chain {
  fx *x;
  seen first, second, victim, last;
  unsigned long long victim_id;
} chain;

static void close_inside(seen *s) {
  chain *ch = s->arg;
  moor_fetch_close(ch->x->f);
  ch->x->f = NULL;
}

static void start_inside(seen *s) {
  chain *ch = s->arg;
  fx *x = ch->x;
  assert_int_equal(moor_fetch_cancel(x->f, ch->victim_id), 0);
  ch->second.then = close_inside;
  ch->second.arg = ch;
  start(x, NULL, "/echo", NULL, NULL, 0, 0, &ch->second);
  assert_int_equal(ch->second.calls, 0);
}

static void test_reentry(void **state) {
  fx *x = *state;
  chain ch;
  memset(&ch, 0, sizeof ch);
  ch.x = x;
  ch.first.then = start_inside;
  ch.first.arg = &ch;
  ch.victim_id = start(x, NULL, "/hang", NULL, NULL, 0, 0, &ch.victim);
  start(x, NULL, "/later", NULL, NULL, 0, 0, &ch.first);
  start(x, NULL, "/hang", NULL, NULL, 0, 0, &ch.last);
  assert_int_equal(run_until(x, &ch.second.calls, 1, 2000), 0);
  assert_null(x->f);
  run_for(x, 50);
  assert_int_equal(ch.first.calls, 1);
  assert_int_equal(ch.second.calls, 1);
  assert_int_equal(ch.second.status, 200);
  assert_int_equal(ch.victim.calls, 0);
  assert_int_equal(ch.last.calls, 0);
  seen_free(&ch.first);
  seen_free(&ch.second);
}

static void test_bad_requests(void **state) {
  fx *x = *state;
  seen s = {.x = x};
  char ok[128];
  snprintf(ok, sizeof ok, "%s/echo", x->base);
  struct {
    moor_fetch_request req;
    const char *msg;
  } bad[] = {
      {{.url = NULL}, "url"},
      {{.url = "not a url"}, "bad url"},
      {{.url = "ftp://example.com/x"}, "scheme"},
      {{.url = "file:///etc/passwd"}, "scheme"},
      {{.url = ok, .method = "GE T"}, "method"},
      {{.url = ok, .method = ""}, "method"},
      {{.url = ok, .headers = (const char *const[]){"X-Key: sk-secret\r\nInjected: 1", NULL}}, "CR or LF"},
      {{.url = ok, .headers = (const char *const[]){"NoColon sk-secret", NULL}}, "Name: value"},
      {{.url = ok, .headers = (const char *const[]){": sk-secret", NULL}}, "Name: value"},
      {{.url = ok, .timeout_ms = -1}, "negative"},
      {{.url = ok, .body = NULL, .body_len = 3}, "body"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unsigned long long id = 7;
    assert_int_equal(moor_fetch_start(x->f, &bad[i].req, record, &s, &id), MOOR_EINVAL);
    assert_int_equal(id, 7);
    const char *m = moor_fetch_errmsg(x->f);
    if (!strstr(m, bad[i].msg)) fail_msg("case %zu: '%s' lacks '%s'", i, m, bad[i].msg);
    assert_null(strstr(m, "sk-secret")); /* header values never appear */
  }
  moor_fetch_request good = {.url = ok};
  assert_int_equal(moor_fetch_start(x->f, &good, NULL, &s, NULL), MOOR_EINVAL);
  assert_int_equal(moor_fetch_start(NULL, &good, record, &s, NULL), MOOR_EINVAL);
  assert_int_equal(moor_fetch_active(x->f), 0);
  run_for(x, 20);
  assert_int_equal(s.calls, 0);
  assert_int_equal(moor_fetch_open(NULL, NULL), MOOR_EINVAL);
  assert_int_equal(moor_fetch_active(NULL), 0);
  moor_fetch_close(NULL);
}

static void test_body_cap(void **state) {
  fx *x = *state;
  seen sized = {.x = x}, streamed = {.x = x};
  x->big = malloc(BIG);
  assert_non_null(x->big);
  memset(x->big, 'x', BIG);
  start(x, NULL, "/big", NULL, NULL, 0, 0, &sized);         /* refused on its Content-Length */
  start(x, NULL, "/bigstream", NULL, NULL, 0, 0, &streamed); /* refused at the 32 MiB byte */
  assert_int_equal(run_until(x, &sized.calls, 1, 3000), 0);
  assert_int_equal(run_until(x, &streamed.calls, 1, 3000), 0);
  assert_int_equal(sized.status, 0);
  assert_string_equal(sized.error, "response body larger than 32 MiB");
  assert_int_equal(streamed.status, 0);
  assert_string_equal(streamed.error, "response body larger than 32 MiB");
  assert_int_equal(streamed.body_len, 0);
  seen_free(&sized);
  seen_free(&streamed);
}

/* ------------------------------------------------------------ Lua */

static int l_done(lua_State *L) {
  fx *x = lua_touserdata(L, lua_upvalueindex(1));
  x->lua_done++;
  return 0;
}

static lua_State *lua_setup(fx *x) {
  lua_State *L = luaL_newstate();
  assert_non_null(L);
  luaL_openlibs(L);
  moor_fetch_lua_push(L, x->f);
  lua_setglobal(L, "fetch");
  lua_pushstring(L, x->base);
  lua_setglobal(L, "BASE");
  lua_pushlightuserdata(L, x);
  lua_pushcclosure(L, l_done, 1);
  lua_setglobal(L, "done");
  x->L = L;
  return L;
}

static void lua_ok(lua_State *L, const char *chunk) {
  if (luaL_dostring(L, chunk) != LUA_OK) fail_msg("Lua: %s", lua_tostring(L, -1));
  assert_int_equal(lua_gettop(L), 0);
}

static void test_lua_end_to_end(void **state) {
  fx *x = *state;
  lua_State *L = lua_setup(x);
  char refused[128];
  snprintf(refused, sizeof refused, "REFUSED = 'http://127.0.0.1:%d/'", closed_port());
  lua_ok(L, refused);
  lua_ok(L,
         "got = {}\n"
         "local id = fetch.start({ url = BASE .. '/echo?q=1', method = 'POST', body = 'hi\\0there',\n"
         "  headers = { ['X-Test'] = 'yes', ['X-Num'] = 42, ['X-Blank'] = '' }, timeout = 2000 },\n"
         "  function(resp, err, timedOut) got.echo = { resp, err, timedOut }; done() end)\n"
         "assert(math.type(id) == 'integer' and id > 0)\n"
         "assert(fetch.active() == 1)\n"
         "fetch.start({ url = BASE .. '/status?429' }, function(r) got.limited = r; done() end)\n"
         "fetch.start({ url = BASE .. '/status?500' }, function(r) got.failed = r; done() end)\n"
         "fetch.start({ url = REFUSED, connectTimeout = 1000 },\n"
         "  function(r, err, t) got.refused = { r, err, t }; done() end)\n"
         "fetch.start({ url = BASE .. '/slow', timeout = 100 },\n"
         "  function(r, err, t) got.slow = { r, err, t }; done() end)\n"
         "fetch.start({ url = BASE .. '/redirect', redirects = 0 }, function(r) got.redirect = r; done() end)\n"
         "assert(fetch.active() == 6)\n");
  assert_int_equal(run_until(x, &x->lua_done, 6, 3000), 0);
  lua_ok(L,
         "local r, err, t = table.unpack(got.echo, 1, 3)\n"
         "assert(err == nil and t == nil, tostring(err))\n"
         "assert(r.status == 200 and math.type(r.status) == 'integer')\n"
         "assert(r.timedOut == false)\n"
         "assert(r.headers['x-mixed-case'] == 'Yes', tostring(r.headers['x-mixed-case']))\n"
         "assert(r.headers['X-Mixed-CASE'] == nil)\n"
         "assert(r.headers['x-dup'] == 'a, b', tostring(r.headers['x-dup']))\n"
         "assert(r.headers['content-type'] == 'text/plain')\n"
         "assert(r.body:find('method=POST\\n', 1, true))\n"
         "assert(r.body:find('h:x-test=yes\\n', 1, true))\n"
         "assert(r.body:find('h:x-num=42\\n', 1, true))\n"
         "assert(r.body:find('h:x-blank=\\n', 1, true))\n"
         "assert(r.body:sub(-13) == 'body=hi\\0there')\n"
         "assert(got.limited.status == 429 and got.limited.headers['retry-after'] == '7')\n"
         "assert(got.limited.body == 'status')\n"
         "assert(got.failed.status == 500)\n"
         "assert(got.refused[1] == nil and type(got.refused[2]) == 'string' and got.refused[3] == false)\n"
         "assert(got.slow[1] == nil and got.slow[2]:find('timed out') and got.slow[3] == true)\n"
         "assert(got.redirect.status == 302 and got.redirect.headers.location == '/echo?moved')\n"
         "assert(fetch.active() == 0)\n");
}

static void test_lua_on_data(void **state) {
  fx *x = *state;
  lua_State *L = lua_setup(x);
  lua_ok(L,
         "pieces, missed, got = {}, {}, {}\n"
         "fetch.start({ url = BASE .. '/pieces', onData = function(p)\n"
         "    pieces[#pieces + 1] = p; seen_before_end = got.streamed == nil end },\n"
         "  function(r, err) got.streamed = { r, err }; done() end)\n"
         "fetch.start({ url = BASE .. '/nosuch', onData = function(p) missed[#missed + 1] = p end },\n"
         "  function(r) got.missing = r; done() end)\n"
         "local id\n"
         "id = fetch.start({ url = BASE .. '/pieces', onData = function()\n"
         "    cancelled = fetch.cancel(id) end }, function() got.cancelled = true; done() end)\n"
         "bad = pcall(fetch.start, { url = BASE .. '/echo', onData = 1 }, function() end)\n");
  assert_int_equal(run_until(x, &x->lua_done, 2, 3000), 0);
  run_for(x, 200);
  lua_ok(L,
         "local r, err = table.unpack(got.streamed, 1, 2)\n"
         "assert(err == nil, tostring(err))\n"
         "assert(r.status == 200 and r.body == '', r.body)\n"
         "assert(table.concat(pieces) == 'one\\ntwo\\nthree\\n', table.concat(pieces))\n"
         "assert(#pieces >= 2, 'one piece: not streamed')\n"
         "assert(seen_before_end)\n"
         "assert(got.missing.status == 404 and got.missing.body == 'no route' and #missed == 0)\n"
         "assert(cancelled == true and got.cancelled == nil)\n"
         "assert(bad == false)\n"
         "assert(fetch.active() == 0)\n");
}

static void test_lua_errors(void **state) {
  fx *x = *state;
  lua_State *L = lua_setup(x);
  lua_ok(L,
         "local function raises(req, cb, want)\n"
         "  local ok, err = pcall(fetch.start, req, cb)\n"
         "  assert(not ok, 'no error for ' .. want)\n"
         "  assert(err:find(want, 1, true), err .. ' lacks ' .. want)\n"
         "  assert(not err:find('sk-secret', 1, true), err)\n"
         "end\n"
         "local f = function() end\n"
         "raises({}, f, 'req.url must be a string')\n"
         "raises({ url = 42 }, f, 'req.url must be a string (got number)')\n"
         "raises('x', f, 'table expected')\n"
         "raises({ url = BASE }, nil, 'function expected')\n"
         "raises({ url = BASE, methd = 'GET' }, f, \"unknown request field 'methd'\")\n"
         "raises({ url = BASE, [1] = 'x' }, f, 'request fields must be named')\n"
         "raises({ url = 'nope' }, f, 'bad url')\n"
         "raises({ url = 'ftp://x/' }, f, 'scheme')\n"
         "raises({ url = BASE, method = 'GE T' }, f, 'bad method')\n"
         "raises({ url = BASE, headers = 'x' }, f, 'req.headers must be a table')\n"
         "raises({ url = BASE, headers = { 'x' } }, f, 'keys must be header names')\n"
         "raises({ url = BASE, headers = { ['A:B'] = 'x' } }, f, 'bad header name')\n"
         "raises({ url = BASE, headers = { A = 'sk-secret\\r\\nB: 1' } }, f, 'contains CR, LF or NUL')\n"
         "raises({ url = BASE, headers = { A = true } }, f, 'must be a string (got boolean)')\n"
         "raises({ url = BASE, timeout = 0 }, f, 'req.timeout must be a positive number')\n"
         "raises({ url = BASE, connectTimeout = 'soon' }, f, 'req.connectTimeout must be')\n"
         "raises({ url = BASE, redirects = -1 }, f, 'req.redirects must be')\n"
         "raises({ url = BASE, body = {} }, f, 'req.body must be a string')\n"
         "assert(fetch.active() == 0)\n");

  /* A callback that raises: printed, not fatal; the next one still runs. */
  fflush(stderr);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  int saved = dup(2);
  assert_true(saved >= 0);
  assert_int_equal(dup2(fileno(tmp), 2), 2);
  lua_ok(L,
         "fetch.start({ url = BASE .. '/echo' }, function() done(); error('boom in callback') end)\n"
         "fetch.start({ url = BASE .. '/echo' }, function() done(); error(setmetatable({}, {})) end)\n"
         "fetch.start({ url = BASE .. '/later' }, function(r) ok_after = r.status; done() end)\n");
  int rc = run_until(x, &x->lua_done, 3, 2000);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  assert_int_equal(rc, 0);
  char out[4096] = {0};
  rewind(tmp);
  size_t n = fread(out, 1, sizeof out - 1, tmp);
  fclose(tmp);
  out[n] = '\0';
  assert_non_null(strstr(out, "moor: fetch callback: "));
  assert_non_null(strstr(out, "boom in callback"));
  assert_non_null(strstr(out, "error object is a table value"));
  lua_ok(L, "assert(ok_after == 200)");
  assert_int_equal(lua_gettop(L), 0);
}

static void test_lua_cancel_and_close(void **state) {
  fx *x = *state;
  lua_State *L = lua_setup(x);
  lua_ok(L,
         "called = 0\n"
         "local a = fetch.start({ url = BASE .. '/hang' }, function() called = called + 1 end)\n"
         "local b = fetch.start({ url = BASE .. '/echo' }, function() called = called + 1; done() end)\n"
         "assert(fetch.cancel(a) == true)\n"
         "assert(fetch.cancel(a) == false)\n"
         "assert(fetch.cancel(123456) == false)\n"
         "assert(fetch.active() == 1)\n"
         "B = b\n");
  assert_int_equal(run_until(x, &x->lua_done, 1, 2000), 0);
  lua_ok(L, "assert(fetch.cancel(B) == false and called == 1 and fetch.active() == 0)");

  /* pushing again in the same state shares the binding */
  moor_fetch_lua_push(L, x->f);
  lua_setglobal(L, "fetch2");
  lua_ok(L,
         "fetch2.start({ url = BASE .. '/hang' }, function() called = called + 1 end)\n"
         "fetch.start({ url = BASE .. '/hang' }, function() called = called + 1 end)\n"
         "assert(fetch.active() == 2 and fetch2.active() == 2)\n");
  assert_int_equal(run_until(x, &x->requests, 3, 2000), 0);
  /* closing the client drops both requests and their refs without calls */
  moor_fetch_close(x->f);
  x->f = NULL;
  run_for(x, 30);
  lua_ok(L,
         "assert(called == 1)\n"
         "assert(fetch.active() == 0)\n"
         "assert(fetch.cancel(1) == false)\n"
         "local ok, err = pcall(fetch.start, { url = BASE }, function() end)\n"
         "assert(not ok and err:find('closed'), err)\n");
}

static int push_other(lua_State *L) {
  return moor_fetch_lua_push(L, lua_touserdata(L, 1));
}

static void test_lua_state_closes_first(void **state) {
  fx *x = *state;
  lua_State *L = lua_setup(x);
  lua_ok(L,
         "fetch.start({ url = BASE .. '/hang' }, function() done() end)\n"
         "fetch.start({ url = BASE .. '/slow' }, function() done() end)\n");
  /* a second state is refused while this one holds the client */
  lua_State *other = luaL_newstate();
  assert_non_null(other);
  lua_pushcfunction(other, push_other);
  lua_pushlightuserdata(other, x->f);
  assert_int_equal(lua_pcall(other, 1, 1, 0), LUA_ERRRUN);
  assert_non_null(strstr(lua_tostring(other, -1), "bound to another Lua state"));
  lua_close(other);

  assert_int_equal(run_until(x, &x->requests, 2, 2000), 0);
  lua_close(L); /* __gc cancels what the binding has in flight */
  x->L = NULL;
  assert_int_equal(moor_fetch_active(x->f), 0);
  run_for(x, 600);
  assert_int_equal(x->lua_done, 0);
  /* the client is free for a new state */
  L = lua_setup(x);
  lua_ok(L, "fetch.start({ url = BASE .. '/echo' }, function(r) assert(r.status == 200); done() end)");
  assert_int_equal(run_until(x, &x->lua_done, 1, 2000), 0);
}

int main(void) {
  /* curl honours proxy variables; the tests talk to 127.0.0.1 directly */
  static const char *const proxies[] = {"http_proxy", "https_proxy", "all_proxy", "HTTPS_PROXY", "ALL_PROXY", NULL};
  for (const char *const *p = proxies; *p; p++) unsetenv(*p);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_get_echo, setup, teardown),
      cmocka_unit_test_setup_teardown(test_post_bodies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_status_codes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_redirects, setup, teardown),
      cmocka_unit_test_setup_teardown(test_redirect_drops_headers_off_origin, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrency, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_close_in_flight, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reentry, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_body_cap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lua_end_to_end, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lua_on_data, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lua_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lua_cancel_and_close, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lua_state_closes_first, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
