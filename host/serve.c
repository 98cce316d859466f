/* Serving the HTTP API (moor_listen, moor_serve, moor_stop): the server
 * (http.c) hands each request to the Lua router (lua/moor/http.lua) and
 * writes its answer; the engine is ticked after every loop iteration; while
 * commits fail the round is retried with a backoff. And moor_find_server:
 * where another process serves this database. */
#include "host.h"
#include "lock.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* http://HOST[:PORT][/...] where HOST is 127.x.x.x, localhost or [::1].
 * Nothing else may follow the host but a port and a path: in
 * "http://127.0.0.1:1@host/" the loopback part is user info. */
static int is_loopback_url(const char *url) {
  if (strncmp(url, "http://", 7)) return 0;
  const char *h = url + 7;
  size_t n = strcspn(h, ":/");
  if (*h == '[') {
    n = strcspn(h, "]");
    if (h[n] != ']') return 0;
    n++;
  }
  const char *p = h + n;
  if (*p == ':')
    for (p++; *p >= '0' && *p <= '9'; p++) {}
  if (*p && *p != '/') return 0;
  if (n == 9 && !strncmp(h, "localhost", 9)) return 1;
  if (n == 5 && !strncmp(h, "[::1]", 5)) return 1;
  if (strncmp(h, "127.", 4)) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(h[i] == '.' || (h[i] >= '0' && h[i] <= '9'))) return 0;
  return 1;
}

int moor_find_server(const char *db_path, char *url, size_t url_size) {
  db_path = moor__db_path(db_path);
  unsigned owner = 0;
  int rc = moor_lock_server_url(db_path, url, url_size, &owner);
  if (rc) return rc;
  /* The lock file says where to send $MOOR_API_TOKEN: believe it only when
   * this user wrote it and it names this machine's loopback. */
  if (owner != (unsigned)geteuid() || !is_loopback_url(url)) return MOOR_EINVAL;
  return 0;
}

/* The router's headers: a string of "Name: value\r\n" lines, or a list of
 * single lines joined here, each checked on its own so a CR or LF inside a
 * value cannot become a header of its own. *out is NULL for none, else
 * malloc'd; MOOR_EINVAL for a line that is not one header. */
static int router_headers(lua_State *L, int idx, char **out) {
  *out = NULL;
  if (lua_type(L, idx) == LUA_TSTRING) return (*out = strdup(lua_tostring(L, idx))) ? 0 : MOOR_ENOMEM;
  if (!lua_istable(L, idx)) return 0;
  size_t n = (size_t)lua_rawlen(L, idx), total = 1;
  for (size_t i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, idx, (lua_Integer)i);
    const char *line = lua_tolstring(L, -1, &len);
    int ok = line && strlen(line) == len && moor_http_header_ok(line, len) == 0;
    lua_pop(L, 1);
    if (!ok) return MOOR_EINVAL;
    total += len + 2;
  }
  char *buf = malloc(total), *p = buf;
  if (!buf) return MOOR_ENOMEM;
  for (size_t i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, idx, (lua_Integer)i);
    const char *line = lua_tolstring(L, -1, &len);
    memcpy(p, line, len);
    memcpy(p + len, "\r\n", 2);
    p += len + 2;
    lua_pop(L, 1);
  }
  *p = 0;
  *out = buf;
  return 0;
}

/* HTTP requests go to the Lua router (lua/moor/http.lua), which answers
 * (status, content_type, headers (a string or a list of lines), body), or "stream" after starting an SSE
 * stream itself, or "later". */
static void on_http_request(moor_http *srv, const moor_http_request *req, void *ud) {
  moor *m = ud;
  lua_State *L = m->L;
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, (lua_Integer)req->conn);
  lua_setfield(L, -2, "conn");
  lua_pushstring(L, req->method);
  lua_setfield(L, -2, "method");
  lua_pushstring(L, req->path);
  lua_setfield(L, -2, "path");
  if (req->query) {
    lua_pushstring(L, req->query);
    lua_setfield(L, -2, "query");
  }
  lua_createtable(L, 0, (int)req->nheaders);
  for (size_t i = 0; i < req->nheaders; i++) {
    lua_pushstring(L, req->values[i]);
    lua_setfield(L, -2, req->names[i]);
  }
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, req->body, req->body_len);
  lua_setfield(L, -2, "body");
  if (moor__call_engine(m, "http_request", 1, 4)) {
    static const char fail[] = "{\"error\":{\"code\":\"internal\",\"message\":\"the engine failed; see the server log\"}}";
    fprintf(stderr, "moor: %s\n", m->err);
    moor_http_respond(srv, req->conn, 500, "application/json", NULL, fail, sizeof fail - 1);
    return;
  }
  if (lua_isinteger(L, -4)) {
    size_t len = 0;
    const char *body = lua_tolstring(L, -1, &len);
    char *headers = NULL;
    int rc = router_headers(L, lua_gettop(L) - 1, &headers);
    if (rc == 0)
      rc = moor_http_respond(srv, req->conn, (int)lua_tointeger(L, -4),
                             lua_type(L, -3) == LUA_TSTRING ? lua_tostring(L, -3) : NULL, headers,
                             body ? body : "", len);
    free(headers);
    if (rc == MOOR_EINVAL || rc == MOOR_ENOMEM) {
      /* The answer cannot be written as given (a CR/LF in a header, a bad
       * status): the client still gets one, and the header is not sent. */
      static const char bad[] = "{\"error\":{\"code\":\"bad_response\",\"message\":\"the response could not be "
                                "written (a header with CR, LF or a control byte, a bad header name or status); "
                                "see the server log\"}}";
      fprintf(stderr, "moor: the answer to %s %s was refused (status %d: a header with CR, LF or a control "
              "byte, a header name that is not a token, or a bad status); answered 500\n",
              req->method, req->path, (int)lua_tointeger(L, -4));
      moor_http_respond(srv, req->conn, 500, "application/json", NULL, bad, sizeof bad - 1);
    }
  }
  lua_pop(L, 4);
}

static void on_http_closed(moor_http *srv, unsigned long long conn, void *ud) {
  (void)srv;
  moor *m = ud;
  lua_pushinteger(m->L, (lua_Integer)conn);
  if (moor__call_engine(m, "http_closed", 1, 0)) fprintf(stderr, "moor: %s\n", m->err);
}

/* A positive whole number from the environment, at most max; 0 (the
 * default) when unset, zero, negative or not a number: "-1" must not read as
 * "no limit" (strtoul wraps it). */
static unsigned long long env_number(const char *name, unsigned long long max) {
  const char *env = getenv(name);
  char *end;
  if (!env || !*env || *env == '-') return 0;
  errno = 0;
  unsigned long long v = strtoull(env, &end, 10);
  if (errno || end == env || *end || v > max) return 0;
  return v;
}

static int is_loopback(const char *host) {
  return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

int moor_listen(moor *m, const char *addr, char *url, size_t url_size) {
  char host[256] = MOOR_DEFAULT_HOST;
  int port = MOOR_DEFAULT_PORT;
  if (addr && *addr) {
    const char *colon = strrchr(addr, ':');
    const char *h = addr, *hend = colon ? colon : addr + strlen(addr);
    if (*h == '[') { /* [::1]:port */
      h++;
      if (hend > h && hend[-1] == ']') hend--;
    }
    if (hend - h >= (long)sizeof host) return moor__set_err(m, MOOR_EINVAL, "address too long: %s", addr);
    if (hend > h) {
      memcpy(host, h, (size_t)(hend - h));
      host[hend - h] = 0;
    }
    if (colon) {
      char *end;
      long p = strtol(colon + 1, &end, 10);
      if (*end || p < 0 || p > 65535) return moor__set_err(m, MOOR_EINVAL, "bad port in --listen %s", addr);
      port = (int)p;
    }
  }
  if (!strcmp(host, "localhost")) strcpy(host, "127.0.0.1");
  const char *token = getenv("MOOR_API_TOKEN");
  if (!is_loopback(host) && (!token || !*token))
    return moor__set_err(m, MOOR_EINVAL,
                   "refusing to listen on %s without MOOR_API_TOKEN: set it to a long random secret "
                   "(every /v1 request must then send 'Authorization: Bearer <token>'), or listen on 127.0.0.1",
                   host);
  /* A token a remote peer can guess in reasonable time is no guard. */
  if (!is_loopback(host) && strlen(token) < MOOR_MIN_TOKEN) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "refusing to listen on %s: MOOR_API_TOKEN has %zu characters and needs at least %d "
             "(use a long random secret, e.g. the output of `openssl rand -hex 32`)",
             host, strlen(token), MOOR_MIN_TOKEN);
    return moor__set_err(m, MOOR_EINVAL, "%s", msg);
  }
  size_t limit = m->cfg.body_limit ? m->cfg.body_limit : (size_t)env_number("MOOR_BODY_LIMIT", SIZE_MAX);
  unsigned timeout = m->cfg.http_timeout_ms ? m->cfg.http_timeout_ms : (unsigned)env_number("MOOR_HTTP_TIMEOUT_MS", UINT_MAX);
  /* libuv writes sockets with write(2): a peer that hung up would raise
   * SIGPIPE and kill the process. Ignore it unless the embedder chose. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  /* Connection caps and the silent-client timeout (0 or unset: moorconf.h's defaults). */
  moor_http_config hc = {host, port, limit, timeout, 0, token, (unsigned)env_number("MOOR_HTTP_FIRST_BYTE_MS", UINT_MAX),
                         (unsigned)env_number("MOOR_MAX_CONNECTIONS", UINT_MAX),
                         (unsigned)env_number("MOOR_MAX_CONNECTIONS_PER_PEER", UINT_MAX)};
  char err[256] = "";
  int rc = moor_http_start(&m->loop, &hc, on_http_request, on_http_closed, m, &m->http, err, sizeof err);
  if (rc) return moor__set_err(m, rc, "cannot listen: %s", err);
  char u[600];
  snprintf(u, sizeof u, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, moor_http_port(m->http));
  if (url && url_size) snprintf(url, url_size, "%s", u);
  if (m->lock_fd >= 0) {
    /* A wildcard address also answers on loopback: note that URL, the one
     * the CLI will send the token to. */
    char note[600];
    if (!strcmp(host, "0.0.0.0"))
      snprintf(note, sizeof note, "http://127.0.0.1:%d", moor_http_port(m->http));
    else if (!strcmp(host, "::"))
      snprintf(note, sizeof note, "http://[::1]:%d", moor_http_port(m->http));
    else
      snprintf(note, sizeof note, "%s", u);
    moor_lock_note_url(m->lock_fd, note);
  }
  lua_pushstring(m->L, u);
  lua_pushboolean(m->L, !is_loopback(host));
  if ((rc = moor__call_engine(m, "serving", 2, 1))) return rc;
  if (lua_isstring(m->L, -1)) rc = moor__set_err(m, MOOR_EINVAL, "%s", lua_tostring(m->L, -1));
  lua_pop(m->L, 1);
  return rc;
}

static void on_serve_due(uv_timer_t *t);

/* While commits fail (a full disk, an immutable WAL) moor dev keeps serving:
 * reads work, writes answer 503, and the engine's round is retried with a
 * backoff (MOOR_STORE_BACKOFF_MIN_MS doubling to MOOR_STORE_BACKOFF_MAX_MS)
 * until the database takes writes again. */

static void on_check(uv_check_t *h) {
  moor *m = h->data;
  long long due;
  if (m->store_failing && uv_now(&m->loop) < m->store_retry_at) {
    if (!uv_is_active((uv_handle_t *)&m->timer))
      uv_timer_start(&m->timer, on_serve_due, m->store_retry_at - uv_now(&m->loop), 0);
    return;
  }
  int rc = moor__engine_tick(m, &due);
  if (rc == MOOR_EIO) {
    unsigned b = m->store_backoff_ms;
    b = b ? b * 2 : MOOR_STORE_BACKOFF_MIN_MS;
    if (b > MOOR_STORE_BACKOFF_MAX_MS) b = MOOR_STORE_BACKOFF_MAX_MS;
    if (!m->store_failing || b != m->store_backoff_ms)
      fprintf(stderr, "moor: %s; nothing of it was recorded. Retrying in %.1f s; reads are served and "
              "writes answer 503 until the database takes writes again\n", m->err, b / 1000.0);
    m->store_failing = 1;
    m->store_backoff_ms = b;
    m->store_retry_at = uv_now(&m->loop) + b;
    uv_timer_stop(&m->timer);
    uv_timer_start(&m->timer, on_serve_due, b, 0);
    return;
  }
  if (rc) {
    /* A fatal engine error: stop, and moor_serve reports it (non-zero). */
    fprintf(stderr, "moor: %s\n", m->err);
    m->serve_rc = rc;
    moor_stop(m);
    return;
  }
  if (m->store_failing && m->store_ok) { /* a commit went through (not a round that wrote nothing) */
    fprintf(stderr, "moor: the database takes writes again\n");
    m->store_failing = 0;
    m->store_backoff_ms = 0;
  }
  uv_timer_stop(&m->timer);
  if (due >= 0) uv_timer_start(&m->timer, on_serve_due, (uint64_t)due, 0);
}

/* While serving, the engine's timer runs a tick itself: a loop iteration
 * whose only event is this timer must still run what fell due. */
static void on_serve_due(uv_timer_t *t) {
  moor *m = t->data;
  on_check(&m->check);
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  moor_stop(h->data);
}

void moor_stop(moor *m) {
  if (!m->serving) return;
  m->serving = 0;
  uv_stop(&m->loop);
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

int moor_serve(moor *m) {
  int busy = moor__busy(m, "moor_serve");
  if (busy) return busy;
  m->serving = 1;
  m->serve_rc = 0;
  uv_check_init(&m->loop, &m->check);
  m->check.data = m;
  m->timer.data = m;
  uv_check_start(&m->check, on_check);
  uv_signal_init(&m->loop, &m->sigint);
  uv_signal_init(&m->loop, &m->sigterm);
  m->sigint.data = m->sigterm.data = m;
  uv_signal_start(&m->sigint, on_signal, SIGINT);
  uv_signal_start(&m->sigterm, on_signal, SIGTERM);
  on_check(&m->check); /* a first round before waiting */
  if (m->serving) uv_run(&m->loop, UV_RUN_DEFAULT);
  m->serving = 0;
  /* Shut down: no new requests, the engine's last writes committed. */
  if (m->http) {
    moor_http_stop(m->http);
    m->http = NULL;
  }
  uv_close((uv_handle_t *)&m->check, on_handle_closed);
  uv_close((uv_handle_t *)&m->sigint, on_handle_closed);
  uv_close((uv_handle_t *)&m->sigterm, on_handle_closed);
  uv_timer_stop(&m->timer);
  uv_run(&m->loop, UV_RUN_NOWAIT);
  char cause[2048];
  snprintf(cause, sizeof cause, "%.2000s", m->err);
  int rc = moor__call_engine(m, "shutdown", 0, 0);
  if (rc) return rc; /* the last writes could not be committed: m->err says why */
  if (m->serve_rc) {
    snprintf(m->err, sizeof m->err, "stopped on an engine error: %s", cause);
    return m->serve_rc;
  }
  if (m->store_failing) {
    snprintf(m->err, sizeof m->err, "stopped while the database could not be written (%s); what was "
             "answered is recorded, and the runs continue from their logs on the next start", cause);
    return MOOR_EIO;
  }
  return 0;
}
