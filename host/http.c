/* An embeddable HTTP/1.1 server on libuv and http-parser (see http.h).
 *
 * Ownership: the server owns its listener and every connection; a connection
 * owns its two handles (the socket and one timer), its buffers and nothing
 * else. Connections are freed when both handles' close callbacks have run,
 * the server when its listener and every connection are gone, so a pointer
 * stays valid until the loop runs close callbacks, even after a handler
 * stopped the server from inside a parse.
 *
 * Connection states:
 *   IDLE      between requests (idle timer armed)
 *   READING   a request has started (request timer armed)
 *   WAITING   a complete request is with the handler; the parser is paused and
 *             bytes that follow are kept unparsed in c->in
 *   STREAMING a streamed response is open
 *   LINGER    closing gracefully: flush writes, send FIN, discard input until
 *             the peer's FIN or a timer, so a final response is not lost to
 *             a TCP reset
 *   CLOSED    uv_close called
 *
 * Memory per request: none in the steady state. Reads land in one
 * server-wide buffer and are parsed in place; only bytes left unparsed while
 * a request waits are copied into the connection. Request strings go into
 * per-connection buffers that are reused. Small writes come from a pool. */
#include "http.h"

#include <http_parser.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "moor.h"
#include "moorconf.h"

#define HEAD_FIXED 256                      /* status line, fixed headers, numbers */

enum { C_IDLE, C_READING, C_WAITING, C_STREAMING, C_LINGER, C_CLOSED };
enum { H_NONE, H_NAME, H_VALUE }; /* where the header callbacks are */

typedef struct conn conn;

/* One uv_write: the request and a copy of the bytes in one block. */
typedef struct wreq {
  uv_write_t req;
  conn *c;
  struct wreq *next; /* pool link */
  size_t cap, len;
  char data[];
} wreq;

typedef struct hdr {
  size_t name, value; /* offsets into c->rb */
} hdr;

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_shutdown_t shut;
  moor_http *srv;
  http_parser parser;
  unsigned long long id;
  uint32_t slot;
  int state;
  int open;             /* handles not yet closed */
  unsigned char feeding;    /* inside conn_feed: answers must not re-enter the parser */
  unsigned char reading;    /* uv_read_start is in effect */
  unsigned char shutting;   /* uv_shutdown pending */
  unsigned char eof;        /* the peer sent FIN */
  unsigned char keep_alive; /* of the current request */
  unsigned char http11, head, chunked, upgrade, url_done, hstate;
  int err_status;           /* set by a parser callback that fails on purpose */
  const char *err_code;
  char err_msg[96];
  size_t hbytes;            /* request line + header bytes so far */
  char *in;                 /* unparsed input */
  size_t in_len, in_cap;
  char *rb;                 /* url and header strings, each NUL-terminated */
  size_t rb_len, rb_cap, url_len;
  hdr *hdrs;
  size_t nhdrs, hcap;
  const char **ptrs;        /* names then values, for the handler */
  size_t pcap;
  char *body;
  size_t body_len, body_cap;
  unsigned char peer[17];   /* family byte + address: what the per-peer cap counts */
  unsigned char counted;    /* in nconns and its peer's count */
  conn *idle_prev, *idle_next; /* in srv's idle list (state C_IDLE), oldest first */
  unsigned char in_idle;
};

typedef struct peer {
  unsigned char key[17];
  uint32_t n;
} peer;

struct moor_http {
  uv_loop_t *loop;
  uv_tcp_t listener;
  moor_http_handler on_request;
  moor_http_closed on_closed;
  void *ud;
  size_t body_limit;
  unsigned timeout_ms, idle_ms;
  int port;
  int stopping;
  size_t nopen;          /* the listener + connections not yet freed */
  conn **slots;          /* connection by id: the low 32 bits are the slot */
  uint32_t *free_slots;
  uint32_t nslots, nfree, slots_cap;
  uint32_t seq;          /* the high 32 bits of an id */
  wreq *pool;
  size_t npool;
  char *rbuf;            /* every read lands here unless a connection holds unparsed bytes */
  char *token;           /* bearer token for /v1/ paths, checked at headers-complete; or NULL */
  size_t token_len;
  unsigned first_byte_ms;
  uint32_t max_conns, max_per_peer, nconns;
  peer *peers;           /* peers with open connections (a short list: linear search) */
  uint32_t npeers, peers_cap;
  conn *idle_head, *idle_tail;
};

static void conn_close(conn *c, int notify);
static int is_tchar(unsigned char ch);
static void conn_finish(conn *c);
static void conn_resume(conn *c);
static void on_timer(uv_timer_t *t);

/* ------------------------------------------------------------------ utils */

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!err || !errlen) return;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Grow *buf to hold need bytes; doubles so appends are amortised O(1). */
static int reserve(char **buf, size_t *cap, size_t need) {
  size_t n;
  char *p;
  if (need <= *cap) return 0;
  n = *cap ? *cap : 256;
  while (n < need) {
    if (n > SIZE_MAX / 2) return MOOR_ENOMEM;
    n *= 2;
  }
  p = realloc(*buf, n);
  if (!p) return MOOR_ENOMEM;
  *buf = p;
  *cap = n;
  return 0;
}

static const char *reason(int status) {
  switch (status) {
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 413: return "Payload Too Large";
  case 415: return "Unsupported Media Type";
  case 422: return "Unprocessable Entity";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 503: return "Service Unavailable";
  case 505: return "HTTP Version Not Supported";
  default: {
    const char *s = http_status_str((enum http_status)status);
    return s[0] == '<' ? "Unknown" : s; /* "<unknown>" */
  }
  }
}

static char *put(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}

#define PUTS(p, lit) put((p), (lit), sizeof(lit) - 1)

static char *put_uint(char *p, size_t v, int base) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % (size_t)base];
    v /= (size_t)base;
  } while (v);
  while (n) *p++ = tmp[--n];
  return p;
}

/* -------------------------------------------------------------- ids, pool */

static conn *conn_find(moor_http *srv, unsigned long long id) {
  uint32_t slot = (uint32_t)(id & 0xffffffffu);
  conn *c;
  if (!srv || slot >= srv->nslots) return NULL;
  c = srv->slots[slot];
  if (!c || c->id != id || c->state >= C_LINGER) return NULL;
  return c;
}

static int slot_take(moor_http *srv, conn *c) {
  uint32_t slot;
  if (srv->nfree) {
    slot = srv->free_slots[--srv->nfree];
  } else {
    if (srv->nslots == srv->slots_cap) {
      uint32_t n = srv->slots_cap ? srv->slots_cap * 2 : 64;
      conn **s;
      uint32_t *f;
      if (n <= srv->slots_cap) return MOOR_ENOMEM;
      s = realloc(srv->slots, n * sizeof *s);
      if (!s) return MOOR_ENOMEM;
      srv->slots = s;
      f = realloc(srv->free_slots, n * sizeof *f);
      if (!f) return MOOR_ENOMEM;
      srv->free_slots = f;
      srv->slots_cap = n;
    }
    slot = srv->nslots++;
  }
  srv->slots[slot] = c;
  c->slot = slot;
  if (++srv->seq == 0) srv->seq = 1;
  c->id = ((unsigned long long)srv->seq << 32) | slot;
  return 0;
}

static wreq *wreq_get(moor_http *srv, size_t len) {
  wreq *w;
  if (len <= MOOR_HTTP_POOL_DATA && srv->pool) {
    w = srv->pool;
    srv->pool = w->next;
    srv->npool--;
  } else {
    size_t cap = len <= MOOR_HTTP_POOL_DATA ? MOOR_HTTP_POOL_DATA : len;
    if (cap > SIZE_MAX - sizeof *w) return NULL;
    w = malloc(sizeof *w + cap);
    if (!w) return NULL;
    w->cap = cap;
  }
  w->len = 0;
  return w;
}

static void wreq_put(moor_http *srv, wreq *w) {
  if (w->cap == MOOR_HTTP_POOL_DATA && srv->npool < MOOR_HTTP_POOL_MAX && !srv->stopping) {
    w->next = srv->pool;
    srv->pool = w;
    srv->npool++;
  } else {
    free(w);
  }
}

/* ------------------------------------------------ idle list, peer counts */

/* Connections in C_IDLE (between requests, or new and silent), oldest first:
 * the first to go when a cap is reached. */
static void idle_add(conn *c) {
  moor_http *srv = c->srv;
  if (c->in_idle) return;
  c->in_idle = 1;
  c->idle_next = NULL;
  c->idle_prev = srv->idle_tail;
  if (srv->idle_tail) srv->idle_tail->idle_next = c;
  else srv->idle_head = c;
  srv->idle_tail = c;
}

static void idle_del(conn *c) {
  moor_http *srv = c->srv;
  if (!c->in_idle) return;
  c->in_idle = 0;
  if (c->idle_prev) c->idle_prev->idle_next = c->idle_next;
  else srv->idle_head = c->idle_next;
  if (c->idle_next) c->idle_next->idle_prev = c->idle_prev;
  else srv->idle_tail = c->idle_prev;
  c->idle_prev = c->idle_next = NULL;
}

static peer *peer_find(moor_http *srv, const unsigned char *key) {
  for (uint32_t i = 0; i < srv->npeers; i++)
    if (memcmp(srv->peers[i].key, key, sizeof srv->peers[i].key) == 0) return &srv->peers[i];
  return NULL;
}

static int peer_add(moor_http *srv, const unsigned char *key) {
  peer *p = peer_find(srv, key);
  if (!p) {
    if (srv->npeers == srv->peers_cap) {
      uint32_t n = srv->peers_cap ? srv->peers_cap * 2 : 16;
      peer *np = realloc(srv->peers, n * sizeof *np);
      if (!np) return MOOR_ENOMEM;
      srv->peers = np;
      srv->peers_cap = n;
    }
    p = &srv->peers[srv->npeers++];
    memcpy(p->key, key, sizeof p->key);
    p->n = 0;
  }
  p->n++;
  return 0;
}

static void peer_del(moor_http *srv, const unsigned char *key) {
  peer *p = peer_find(srv, key);
  if (!p) return;
  if (--p->n == 0) *p = srv->peers[--srv->npeers]; /* swap with the last */
}

/* The address a connection comes from, as a per-peer key (the port is left
 * out: one host is one peer). */
static void peer_key(uv_tcp_t *tcp, unsigned char *key) {
  struct sockaddr_storage a;
  int len = sizeof a;
  memset(key, 0, 17);
  if (uv_tcp_getpeername(tcp, (struct sockaddr *)&a, &len) != 0) return;
  if (a.ss_family == AF_INET) {
    key[0] = 4;
    memcpy(key + 1, &((struct sockaddr_in *)&a)->sin_addr, 4);
  } else if (a.ss_family == AF_INET6) {
    const unsigned char *b = (const unsigned char *)&((struct sockaddr_in6 *)&a)->sin6_addr;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(b, mapped, 12) == 0) { /* ::ffff:a.b.c.d is the IPv4 peer */
      key[0] = 4;
      memcpy(key + 1, b + 12, 4);
    } else {
      key[0] = 6;
      memcpy(key + 1, b, 16);
    }
  }
}

/* Compare a presented Authorization value with "Bearer <token>" in time that
 * depends only on the presented length: no early exit, length included. */
static int bearer_ok(const moor_http *srv, const char *given) {
  static const char pre[] = "Bearer ";
  size_t glen = given ? strlen(given) : 0, want = sizeof pre - 1 + srv->token_len;
  unsigned char diff = (unsigned char)(glen != want);
  for (size_t i = 0; i < glen; i++) {
    size_t j = i % want;
    unsigned char e = (unsigned char)(j < sizeof pre - 1 ? pre[j] : srv->token[j - (sizeof pre - 1)]);
    diff |= (unsigned char)((unsigned char)given[i] ^ e);
  }
  return given && diff == 0;
}

/* ---------------------------------------------------------------- server */

static void srv_free(moor_http *srv) {
  while (srv->pool) {
    wreq *w = srv->pool;
    srv->pool = w->next;
    free(w);
  }
  free(srv->slots);
  free(srv->free_slots);
  free(srv->rbuf);
  free(srv->peers);
  if (srv->token) {
    memset(srv->token, 0, srv->token_len);
    free(srv->token);
  }
  free(srv);
}

static void srv_release(moor_http *srv) {
  if (--srv->nopen == 0) srv_free(srv);
}

static void on_listener_closed(uv_handle_t *h) {
  srv_release(h->data);
}

/* --------------------------------------------------------------- writing */

static void on_write(uv_write_t *r, int status) {
  wreq *w = (wreq *)r;
  conn *c = w->c;
  wreq_put(c->srv, w);
  /* UV_ECANCELED: we closed the socket ourselves */
  if (status < 0 && status != UV_ECANCELED) conn_close(c, 1);
}

/* Queue w (always consumed). On failure the connection is closed without
 * on_closed: the caller learns it from MOOR_EIO. */
static int conn_write(conn *c, wreq *w) {
  uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
  w->c = c;
  /* The check is on what is already queued, so one big response still goes. */
  if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > MOOR_HTTP_QUEUE_MAX ||
      uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
    wreq_put(c->srv, w);
    conn_close(c, 0);
    return MOOR_EIO;
  }
  return 0;
}

/* Write the status line and headers into p (room for HEAD_FIXED + strings).
 * length < 0: no Content-Length. */
static char *put_head(char *p, const conn *c, int status, const char *ctype, size_t clen,
                      const char *headers, size_t hlen, long long length, int chunked) {
  const char *r = reason(status);
  p = PUTS(p, "HTTP/1.1 ");
  p = put_uint(p, (size_t)status, 10);
  *p++ = ' ';
  p = put(p, r, strlen(r));
  p = PUTS(p, "\r\n");
  if (ctype) {
    p = PUTS(p, "Content-Type: ");
    p = put(p, ctype, clen);
    p = PUTS(p, "\r\n");
  }
  if (length >= 0) {
    p = PUTS(p, "Content-Length: ");
    p = put_uint(p, (size_t)length, 10);
    p = PUTS(p, "\r\n");
  }
  if (chunked) p = PUTS(p, "Transfer-Encoding: chunked\r\n");
  p = c->keep_alive ? PUTS(p, "Connection: keep-alive\r\n") : PUTS(p, "Connection: close\r\n");
  if (hlen) {
    p = put(p, headers, hlen);
    if (hlen < 2 || headers[hlen - 2] != '\r' || headers[hlen - 1] != '\n') p = PUTS(p, "\r\n");
  }
  return PUTS(p, "\r\n");
}

/* The request is answered: take the next one, or close. */
static void resp_done(conn *c) {
  if (!c->keep_alive) {
    conn_finish(c);
    return;
  }
  c->state = C_IDLE;
  idle_add(c);
  uv_timer_start(&c->timer, on_timer, c->srv->idle_ms, 0);
  if (!c->feeding) conn_resume(c); /* else conn_feed's loop goes on by itself */
}

/* Answer with a JSON error and close. Used only before a request reaches the
 * handler, so nothing is waiting to be answered ahead of it. */
static void send_error(conn *c, int status, const char *code, const char *msg) {
  char body[256];
  int n = snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}", code, msg);
  size_t len = n < 0 ? 0 : (size_t)n >= sizeof body ? sizeof body - 1 : (size_t)n;
  wreq *w = wreq_get(c->srv, HEAD_FIXED + 32 + len);
  char *p;
  if (!w) {
    conn_close(c, 0);
    return;
  }
  c->keep_alive = 0;
  p = status == 401 ? put_head(w->data, c, status, "application/json", 16, "WWW-Authenticate: Bearer\r\n", 26,
                               (long long)len, 0)
                    : put_head(w->data, c, status, "application/json", 16, NULL, 0, (long long)len, 0);
  p = put(p, body, len);
  w->len = (size_t)(p - w->data);
  if (conn_write(c, w) == 0) conn_finish(c);
}

/* -------------------------------------------------------------- closing */

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  moor_http *srv = c->srv;
  if (--c->open) return;
  if (c->slot != UINT32_MAX) {
    srv->slots[c->slot] = NULL;
    srv->free_slots[srv->nfree++] = c->slot;
  }
  free(c->in);
  free(c->rb);
  free(c->hdrs);
  free(c->ptrs);
  free(c->body);
  free(c);
  srv_release(srv);
}

/* Close now (pending writes are cancelled). notify: tell the owner if a
 * request was waiting for an answer or a stream was open. */
static void conn_close(conn *c, int notify) {
  moor_http *srv = c->srv;
  int waiting = c->state == C_WAITING || c->state == C_STREAMING;
  if (c->state == C_CLOSED) return;
  c->state = C_CLOSED;
  idle_del(c);
  if (c->counted) { /* counted off now, so a connection waiting for room can have it */
    c->counted = 0;
    srv->nconns--;
    peer_del(srv, c->peer);
  }
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  if (notify && waiting && !srv->stopping && srv->on_closed) srv->on_closed(srv, c->id, srv->ud);
}

static void on_shutdown(uv_shutdown_t *r, int status) {
  conn *c = r->data;
  c->shutting = 0;
  if (c->state != C_LINGER) return; /* closed meanwhile (status is UV_ECANCELED) */
  if (status < 0 || c->eof) {
    conn_close(c, 0);
    return;
  }
  /* Everything is sent; give the peer a moment to read it and hang up. */
  uv_timer_start(&c->timer, on_timer, MOOR_HTTP_LINGER_MS, 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void conn_finish(conn *c) {
  if (c->state >= C_LINGER) return;
  c->state = C_LINGER;
  idle_del(c);
  c->shut.data = c;
  if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
    conn_close(c, 0);
    return;
  }
  c->shutting = 1;
  /* Bound the flush too: a peer that never reads must not pin us. */
  uv_timer_start(&c->timer, on_timer, c->srv->idle_ms, 0);
  if (!c->reading && !c->eof) {
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = 1;
  }
}

static void on_timer(uv_timer_t *t) {
  conn *c = t->data;
  char msg[64];
  switch (c->state) {
  case C_READING:
    snprintf(msg, sizeof msg, "the request was not complete within %u ms", c->srv->timeout_ms);
    send_error(c, 408, "request_timeout", msg);
    break;
  case C_IDLE:
  case C_LINGER:
    conn_close(c, 0);
    break;
  default:
    break;
  }
}

/* --------------------------------------------------------------- parsing */

/* Make a parser callback fail with our own answer. */
static int fail(conn *c, int status, const char *code, const char *msg) {
  c->err_status = status;
  c->err_code = code;
  snprintf(c->err_msg, sizeof c->err_msg, "%s", msg);
  return -1;
}

static int oom(conn *c) {
  return fail(c, 500, "out_of_memory", "the server is out of memory");
}

static int rb_put(conn *c, const char *at, size_t len, int lower) {
  char *p;
  if (reserve(&c->rb, &c->rb_cap, c->rb_len + len + 1)) return oom(c);
  p = c->rb + c->rb_len;
  if (lower) {
    for (size_t i = 0; i < len; i++) {
      unsigned char ch = (unsigned char)at[i];
      p[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
  } else {
    memcpy(p, at, len);
  }
  c->rb_len += len;
  return 0;
}

static int rb_nul(conn *c) {
  return rb_put(c, "", 1, 0);
}

static int count_head(conn *c, size_t len) {
  c->hbytes += len;
  if (c->hbytes > MOOR_HTTP_HEADER_MAX)
    return fail(c, 431, "headers_too_large", "the request line and headers are over the 65536-byte limit");
  return 0;
}

static int url_end(conn *c) {
  if (c->url_done) return 0;
  c->url_done = 1;
  c->url_len = c->rb_len;
  return rb_nul(c);
}

/* Close the header being read, if any. */
static int hdr_end(conn *c) {
  if (c->hstate == H_NAME) { /* a name with no value callback */
    if (rb_nul(c)) return -1;
    c->hdrs[c->nhdrs - 1].value = c->rb_len;
    c->hstate = H_VALUE;
  }
  if (c->hstate == H_VALUE && rb_nul(c)) return -1;
  c->hstate = H_NONE;
  return 0;
}

static int on_message_begin(http_parser *p) {
  conn *c = p->data;
  c->state = C_READING;
  idle_del(c);
  c->rb_len = c->url_len = c->nhdrs = c->body_len = c->hbytes = 0;
  c->url_done = 0;
  c->hstate = H_NONE;
  c->err_status = 0;
  if (c->body_cap > MOOR_HTTP_KEEP_BYTES) { /* one big upload must not pin its memory */
    free(c->body);
    c->body = NULL;
    c->body_cap = 0;
  }
  uv_timer_start(&c->timer, on_timer, c->srv->timeout_ms, 0);
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (count_head(c, len)) return -1;
  return rb_put(c, at, len, 0);
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (count_head(c, len) || url_end(c)) return -1;
  if (c->hstate != H_NAME) {
    if (hdr_end(c) || count_head(c, 4)) return -1; /* ": " and CRLF */
    if (c->nhdrs == c->hcap) {
      size_t n = c->hcap ? c->hcap * 2 : 16;
      hdr *h = realloc(c->hdrs, n * sizeof *h);
      if (!h) return oom(c);
      c->hdrs = h;
      c->hcap = n;
    }
    c->hdrs[c->nhdrs++].name = c->rb_len;
    c->hstate = H_NAME;
  }
  return rb_put(c, at, len, 1);
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (count_head(c, len)) return -1;
  if (c->hstate != H_VALUE) {
    if (rb_nul(c)) return -1;
    c->hdrs[c->nhdrs - 1].value = c->rb_len;
    c->hstate = H_VALUE;
  }
  return rb_put(c, at, len, 0);
}

static const char *header(const conn *c, const char *name) {
  for (size_t i = 0; i < c->nhdrs; i++)
    if (strcmp(c->rb + c->hdrs[i].name, name) == 0) return c->rb + c->hdrs[i].value;
  return NULL;
}

/* Whether the request path (raw, as the router matches it) is under /v1/
 * and needs the API token: all of it but the sign-in callback, which a
 * person's browser reaches from the provider (its `state` is the secret);
 * and /mcp, the MCP endpoint. */
static int is_api_path(const conn *c) {
  const char *u = c->rb;
  size_t n = c->url_len, off = 0, len = n;
  if (n && u[0] != '/') { /* absolute-form */
    struct http_parser_url pu;
    http_parser_url_init(&pu);
    if (http_parser_parse_url(u, n, 0, &pu) != 0 || !(pu.field_set & (1 << UF_PATH))) return 0;
    off = pu.field_data[UF_PATH].off;
    len = pu.field_data[UF_PATH].len;
  }
  static const char cb[] = "/v1/auth/callback";
  size_t cbn = sizeof cb - 1;
  if (len >= cbn && memcmp(u + off, cb, cbn) == 0 && (len == cbn || u[off + cbn] == '?')) return 0;
  if (len >= 4 && memcmp(u + off, "/mcp", 4) == 0) return 1; /* MCP's streamable HTTP endpoint */
  return len >= 4 && memcmp(u + off, "/v1/", 4) == 0;
}

static int on_headers_complete(http_parser *p) {
  conn *c = p->data;
  size_t limit = c->srv->body_limit;
  const char *expect;
  if (url_end(c) || hdr_end(c)) return -1;
  /* http-parser takes "GET /" as HTTP/0.9 and any digit pair as a version. */
  if (p->http_major == 0)
    return fail(c, 400, "bad_request", "malformed request: the request line has no HTTP version (send HTTP/1.1)");
  if (p->http_major != 1 || p->http_minor > 1)
    return fail(c, 505, "http_version_not_supported", "only HTTP/1.0 and HTTP/1.1 are served");
  /* Two Host lines name two servers: a proxy in front may go by the first
   * while the router reads the last (RFC 9112 3.2: 400). */
  size_t hosts = 0;
  for (size_t i = 0; i < c->nhdrs; i++) {
    const char *name = c->rb + c->hdrs[i].name;
    hosts += strcmp(name, "host") == 0;
    /* "Host : x" is no Host to us but may be one to a proxy (RFC 9112 5.1: 400) */
    for (const char *q = name; *q; q++)
      if (!is_tchar((unsigned char)*q))
        return fail(c, 400, "bad_request", "malformed request: a header name that is not a token (no "
                                           "space before its colon)");
  }
  if (hosts > 1) return fail(c, 400, "bad_request", "malformed request: more than one Host header");
  /* The API token is checked before any of the body is read. */
  if (c->srv->token && is_api_path(c) && !bearer_ok(c->srv, header(c, "authorization")))
    return fail(c, 401, "unauthorized", "this server needs 'Authorization: Bearer <MOOR_API_TOKEN>'");
  if ((p->flags & F_CONTENTLENGTH) && p->content_length != ULLONG_MAX) {
    if (p->content_length > limit) {
      char msg[80];
      snprintf(msg, sizeof msg, "request body is over the %zu-byte limit", limit);
      return fail(c, 413, "body_too_large", msg);
    }
    /* room for the whole body now: no realloc while it arrives */
    if (reserve(&c->body, &c->body_cap, (size_t)p->content_length + 1)) return oom(c);
  }
  /* curl and others wait a second for this before sending a body */
  expect = header(c, "expect");
  if (expect && strcasecmp(expect, "100-continue") == 0 && p->http_major == 1 && p->http_minor >= 1) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    wreq *w = wreq_get(c->srv, sizeof cont - 1);
    if (!w) return oom(c);
    w->len = (size_t)(put(w->data, cont, sizeof cont - 1) - w->data);
    if (conn_write(c, w)) return -1; /* the connection is closed; conn_feed stops */
  }
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (len > c->srv->body_limit - c->body_len) { /* chunked: no length known up front */
    char msg[80];
    snprintf(msg, sizeof msg, "request body is over the %zu-byte limit", c->srv->body_limit);
    return fail(c, 413, "body_too_large", msg);
  }
  if (reserve(&c->body, &c->body_cap, c->body_len + len + 1)) return oom(c);
  memcpy(c->body + c->body_len, at, len);
  c->body_len += len;
  return 0;
}

static int on_message_complete(http_parser *p) {
  conn *c = p->data;
  if (hdr_end(c)) return -1;
  /* An upgrade (or CONNECT) switches protocols: we answer and close. */
  c->upgrade = p->upgrade;
  c->keep_alive = http_should_keep_alive(p) && !p->upgrade;
  c->http11 = p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1);
  c->head = p->method == HTTP_HEAD;
  c->state = C_WAITING;
  uv_timer_stop(&c->timer); /* the handler may take as long as it likes */
  http_parser_pause(p, 1);  /* conn_feed hands the request over, outside the parser */
  return 0;
}

static const http_parser_settings settings = {
  .on_message_begin = on_message_begin,
  .on_url = on_url,
  .on_header_field = on_header_field,
  .on_header_value = on_header_value,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_message_complete = on_message_complete,
};

/* Split the URL in c->rb in place into a NUL-terminated path and query. */
static void split_url(conn *c, const char **path, const char **query) {
  char *u = c->rb;
  size_t n = c->url_len, poff = 0, plen = n, qoff = 0, qlen = 0;
  int hasq = 0;
  *path = u;
  *query = NULL;
  if (n && u[0] != '/' && u[0] != '*') {
    /* absolute-form "http://host/p?q" (authority-form of CONNECT stays whole) */
    struct http_parser_url pu;
    http_parser_url_init(&pu);
    if (c->parser.method == HTTP_CONNECT || http_parser_parse_url(u, n, 0, &pu) != 0) return;
    if (pu.field_set & (1 << UF_PATH)) {
      poff = pu.field_data[UF_PATH].off;
      plen = pu.field_data[UF_PATH].len;
    } else {
      poff = plen = 0;
    }
    if (pu.field_set & (1 << UF_QUERY)) {
      hasq = 1;
      qoff = pu.field_data[UF_QUERY].off;
      qlen = pu.field_data[UF_QUERY].len;
    }
  } else {
    for (plen = 0; plen < n && u[plen] != '?' && u[plen] != '#'; plen++) {}
    if (plen < n && u[plen] == '?') {
      hasq = 1;
      qoff = plen + 1;
      for (qlen = 0; qoff + qlen < n && u[qoff + qlen] != '#'; qlen++) {}
    }
  }
  if (hasq) {
    u[qoff + qlen] = '\0';
    *query = u + qoff;
  }
  u[poff + plen] = '\0';
  *path = plen ? u + poff : "/";
}

static void dispatch(conn *c) {
  moor_http *srv = c->srv;
  moor_http_request req;
  if (c->pcap < c->nhdrs * 2) {
    const char **p = realloc(c->ptrs, c->nhdrs * 2 * sizeof *p);
    if (!p) {
      c->state = C_READING; /* not answered yet: send_error may still speak */
      send_error(c, 500, "out_of_memory", "the server is out of memory");
      return;
    }
    c->ptrs = p;
    c->pcap = c->nhdrs * 2;
  }
  for (size_t i = 0; i < c->nhdrs; i++) {
    c->ptrs[i] = c->rb + c->hdrs[i].name;
    c->ptrs[c->nhdrs + i] = c->rb + c->hdrs[i].value;
  }
  /* on_body reserved the byte (or there is no body and no buffer yet) */
  if (c->body) c->body[c->body_len] = '\0';
  req.conn = c->id;
  req.method = http_method_str((enum http_method)c->parser.method);
  split_url(c, &req.path, &req.query);
  req.nheaders = c->nhdrs;
  req.names = c->ptrs;
  req.values = c->ptrs + c->nhdrs;
  req.body = c->body ? c->body : "";
  req.body_len = c->body_len;
  srv->on_request(srv, &req, srv->ud);
}

/* Parse what the state allows, handing each complete request to the handler.
 * Stops at a request left unanswered, at an error, or when the connection
 * closes. Returns the bytes consumed. */
static size_t conn_feed(conn *c, const char *data, size_t len) {
  size_t off = 0;
  c->feeding = 1;
  while (off < len && c->state <= C_READING && !c->upgrade) {
    size_t n = http_parser_execute(&c->parser, &settings, data + off, len - off);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    off += n;
    if (e == HPE_PAUSED) {
      http_parser_pause(&c->parser, 0);
      dispatch(c);
    } else if (e != HPE_OK) {
      if (c->state <= C_READING) {
        if (c->err_status) {
          send_error(c, c->err_status, c->err_code, c->err_msg);
        } else if (e == HPE_HEADER_OVERFLOW) { /* padding our count does not see */
          send_error(c, 431, "headers_too_large", "the request line and headers are over the 65536-byte limit");
        } else {
          char msg[160];
          snprintf(msg, sizeof msg, "malformed request: %s (%s)", http_errno_description(e),
                   http_errno_name(e));
          send_error(c, 400, "bad_request", msg);
        }
      }
      off = len;
    } else if (n == 0) {
      break; /* no progress and no error: never loop */
    }
  }
  c->feeding = 0;
  return off;
}

static int in_append(conn *c, const char *data, size_t len) {
  if (reserve(&c->in, &c->in_cap, c->in_len + len)) return MOOR_ENOMEM;
  memcpy(c->in + c->in_len, data, len);
  c->in_len += len;
  return 0;
}

/* Take the bytes held while a request waited, then read again. */
static void conn_resume(conn *c) {
  if (c->in_len) {
    size_t n = conn_feed(c, c->in, c->in_len);
    if (c->state >= C_LINGER) return;
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
    if (c->in_len == 0 && c->in_cap > MOOR_HTTP_KEEP_BYTES) { /* a pipelining burst must not pin memory */
      free(c->in);
      c->in = NULL;
      c->in_cap = 0;
    }
  }
  if (!c->reading && c->in_len <= MOOR_HTTP_PENDING_MAX) {
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
      conn_close(c, 1);
      return;
    }
    c->reading = 1;
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = h->data;
  (void)suggested;
  if (c->in_len == 0) {
    *buf = uv_buf_init(c->srv->rbuf, (unsigned)MOOR_HTTP_READ_SIZE);
  } else if (reserve(&c->in, &c->in_cap, c->in_len + MOOR_HTTP_READ_MIN) == 0) {
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
  } else {
    *buf = uv_buf_init(NULL, 0); /* on_read gets UV_ENOBUFS */
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn *c = s->data;
  int shared = buf->base == c->srv->rbuf;
  if (nread == 0) return;
  if (nread < 0) {
    if (nread == UV_EOF) {
      c->eof = 1;
      uv_read_stop(s);
      c->reading = 0;
      if (c->state == C_IDLE) { /* maybe a half-close: flush what we owe, then close */
        conn_finish(c);
        return;
      }
      if (c->state == C_LINGER) {
        if (!c->shutting) conn_close(c, 0); /* else on_shutdown closes once flushed */
        return;
      }
    }
    conn_close(c, 1); /* the peer left (or reset, or no buffer) */
    return;
  }
  if (c->state >= C_LINGER) return; /* discard: the response is final */
  if (c->state <= C_READING && shared) {
    size_t n = conn_feed(c, buf->base, (size_t)nread);
    if (c->state >= C_LINGER || n == (size_t)nread) return;
    if (in_append(c, buf->base + n, (size_t)nread - n)) {
      conn_close(c, 0);
      return;
    }
  } else if (shared) {
    if (in_append(c, buf->base, (size_t)nread)) {
      conn_close(c, 0);
      return;
    }
  } else {
    c->in_len += (size_t)nread;
    if (c->state <= C_READING) conn_resume(c);
    if (c->state >= C_LINGER) return;
  }
  /* A client pipelining faster than we answer: stop reading until we catch up. */
  if (c->in_len > MOOR_HTTP_PENDING_MAX && c->reading) {
    uv_read_stop(s);
    c->reading = 0;
  }
}

/* Room for one more connection from key under both caps: when a cap is
 * reached, the oldest idle connection (of that peer, for the per-peer cap)
 * is closed to make it. 0 when every counted connection is busy. */
static int make_room(moor_http *srv, const unsigned char *key) {
  peer *p = peer_find(srv, key);
  if (p && p->n >= srv->max_per_peer) {
    conn *v = srv->idle_head;
    while (v && memcmp(v->peer, key, sizeof v->peer) != 0) v = v->idle_next;
    if (!v) return 0;
    conn_close(v, 0);
  }
  if (srv->nconns >= srv->max_conns) {
    if (!srv->idle_head) return 0;
    conn_close(srv->idle_head, 0);
  }
  return 1;
}

static void on_connection(uv_stream_t *l, int status) {
  moor_http *srv = l->data;
  conn *c;
  if (status < 0 || srv->stopping) return;
  /* Out of memory here leaves the connection un-accepted; libuv then stops
   * polling the listener until the next accept, which is the best we can do. */
  c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = srv;
  c->slot = UINT32_MAX;
  c->tcp.data = c;
  c->timer.data = c;
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  if (uv_tcp_init(srv->loop, &c->tcp) < 0) {
    free(c);
    return;
  }
  uv_timer_init(srv->loop, &c->timer); /* cannot fail */
  c->open = 2;
  c->state = C_IDLE;
  srv->nopen++;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
    conn_close(c, 0);
    return;
  }
  peer_key(&c->tcp, c->peer);
  if (!make_room(srv, c->peer)) {
    /* Over a cap with no idle connection to give way: say so and close at
     * once (no linger: a flood of refusals must not hold descriptors). */
#define BUSY_BODY "{\"error\":{\"code\":\"too_many_connections\",\"message\":\"too many open connections; try again later\"}}"
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                               "Connection: close\r\nContent-Length: ";
    char msg[sizeof busy + 32 + sizeof BUSY_BODY];
    int n = snprintf(msg, sizeof msg, "%s%zu\r\n\r\n%s", busy, sizeof BUSY_BODY - 1, BUSY_BODY);
    uv_buf_t b = uv_buf_init(msg, (unsigned)(n > 0 ? n : 0));
    (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    conn_close(c, 0);
    return;
  }
  if (peer_add(srv, c->peer) < 0) {
    conn_close(c, 0);
    return;
  }
  c->counted = 1; /* from here conn_close counts it off again (peer included) */
  srv->nconns++;
  if (slot_take(srv, c) < 0 || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
    conn_close(c, 0);
    return;
  }
  c->reading = 1;
  idle_add(c);
  uv_tcp_nodelay(&c->tcp, 1); /* a response is one write; do not let Nagle hold SSE chunks */
  uv_timer_start(&c->timer, on_timer, srv->first_byte_ms, 0);
}

/* ------------------------------------------------------------ public API */

int moor_http_start(uv_loop_t *loop, const moor_http_config *cfg, moor_http_handler on_request,
                    moor_http_closed on_closed, void *ud, moor_http **out, char *err, size_t errlen) {
  moor_http *srv;
  const char *host = cfg && cfg->host ? cfg->host : MOOR_DEFAULT_HOST;
  int port = cfg ? cfg->port : 0;
  struct sockaddr_storage addr;
  int namelen = sizeof addr, rc;
  if (out) *out = NULL;
  if (err && errlen) err[0] = '\0';
  if (!loop || !on_request || !out || port < 0 || port > 65535) {
    set_err(err, errlen, "http: bad arguments to moor_http_start");
    return MOOR_EINVAL;
  }
  memset(&addr, 0, sizeof addr);
  if (strchr(host, ':') ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
                        : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr)) {
    set_err(err, errlen, "http: '%s' is not an IPv4 or IPv6 address", host);
    return MOOR_EINVAL;
  }
  srv = calloc(1, sizeof *srv);
  if (!srv || !(srv->rbuf = malloc(MOOR_HTTP_READ_SIZE))) {
    free(srv);
    set_err(err, errlen, "http: out of memory");
    return MOOR_ENOMEM;
  }
  srv->loop = loop;
  srv->on_request = on_request;
  srv->on_closed = on_closed;
  srv->ud = ud;
  srv->body_limit = cfg && cfg->body_limit ? cfg->body_limit : MOOR_HTTP_BODY_LIMIT;
  srv->timeout_ms = cfg && cfg->timeout_ms ? cfg->timeout_ms : MOOR_HTTP_TIMEOUT_MS;
  srv->idle_ms = cfg && cfg->idle_ms ? cfg->idle_ms : MOOR_HTTP_IDLE_MS;
  srv->first_byte_ms = cfg && cfg->first_byte_ms ? cfg->first_byte_ms : MOOR_HTTP_FIRST_BYTE_MS;
  srv->max_conns = cfg && cfg->max_connections ? cfg->max_connections : MOOR_HTTP_MAX_CONNECTIONS;
  srv->max_per_peer = cfg && cfg->max_per_peer ? cfg->max_per_peer : MOOR_HTTP_MAX_PER_PEER;
  if (cfg && cfg->api_token && *cfg->api_token) {
    srv->token_len = strlen(cfg->api_token);
    if (!(srv->token = strdup(cfg->api_token))) {
      srv_free(srv);
      set_err(err, errlen, "http: out of memory");
      return MOOR_ENOMEM;
    }
  }
  srv->listener.data = srv;
  if ((rc = uv_tcp_init(loop, &srv->listener)) < 0) {
    srv_free(srv);
    set_err(err, errlen, "http: %s", uv_strerror(rc));
    return MOOR_EIO;
  }
  srv->nopen = 1;
  if ((rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&addr, 0)) < 0 ||
      (rc = uv_listen((uv_stream_t *)&srv->listener, 511, on_connection)) < 0 ||
      (rc = uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&addr, &namelen)) < 0) {
    set_err(err, errlen, "http: cannot listen on %s port %d: %s", host, port, uv_strerror(rc));
    srv->stopping = 1;
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed); /* frees srv */
    return MOOR_EIO;
  }
  srv->port = addr.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&addr)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&addr)->sin_port);
  *out = srv;
  return 0;
}

int moor_http_port(const moor_http *srv) {
  return srv ? srv->port : 0;
}

/* RFC 9110 tchar: what a header name may hold. */
static int is_tchar(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* A header value: visible bytes, space and tab; no CR, LF, NUL or other
 * control byte, so nothing can end the line or the head early. */
static int field_value_ok(const char *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)v[i];
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return 0;
  }
  return 1;
}

int moor_http_header_ok(const char *line, size_t len) {
  size_t name = 0;
  if (!line) return MOOR_EINVAL;
  while (name < len && is_tchar((unsigned char)line[name])) name++;
  if (name == 0 || name == len || line[name] != ':' || !field_value_ok(line + name + 1, len - name - 1))
    return MOOR_EINVAL;
  return 0;
}

/* The headers that frame a message: moor writes them itself (Content-Length,
 * Transfer-Encoding for a stream, Connection); a second one from the caller
 * would make the client read the body or the connection differently. */
static int is_framing(const char *h, size_t name) {
  static const char *const names[] = {"content-length", "transfer-encoding", "connection"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (strlen(names[i]) == name && strncasecmp(h, names[i], name) == 0) return 1;
  return 0;
}

/* Extra header lines: each "Name: value" with a token name, ended by CRLF
 * (the last CRLF may be missing), none of the framing headers. A CR or LF
 * anywhere else is refused. */
static int headers_ok(const char *h) {
  while (*h) {
    const char *eol = strstr(h, "\r\n");
    size_t n = eol ? (size_t)(eol - h) : strlen(h);
    if (moor_http_header_ok(h, n)) return 0;
    if (is_framing(h, (size_t)(strchr(h, ':') - h))) return 0;
    h += n;
    if (eol) h += 2;
  }
  return 1;
}

/* The connection, if it has a request waiting for an answer. */
static int answerable(moor_http *srv, unsigned long long id, int status, const char *ctype,
                      const char *headers, conn **out) {
  conn *c = conn_find(srv, id);
  if (!c) return MOOR_ENOTFOUND;
  if (c->state != C_WAITING || status < 200 || status > 999) return MOOR_EINVAL;
  if (ctype && !field_value_ok(ctype, strlen(ctype))) return MOOR_EINVAL; /* no header injection */
  if (headers && !headers_ok(headers)) return MOOR_EINVAL;
  *out = c;
  return 0;
}

int moor_http_respond(moor_http *srv, unsigned long long id, int status, const char *content_type,
                      const char *headers, const char *body, size_t len) {
  conn *c;
  wreq *w;
  char *p;
  size_t clen, hlen;
  int nobody = status == 204 || status == 304, rc;
  if ((rc = answerable(srv, id, status, content_type, headers, &c))) return rc;
  if (!body && len) return MOOR_EINVAL;
  if (nobody) len = 0;
  clen = content_type ? strlen(content_type) : 0;
  hlen = headers ? strlen(headers) : 0;
  if (len > UINT_MAX / 2 || clen + hlen > UINT_MAX / 4) return MOOR_EINVAL; /* uv_buf_t is 32-bit */
  w = wreq_get(srv, HEAD_FIXED + clen + hlen + (c->head ? 0 : len));
  if (!w) return MOOR_ENOMEM;
  p = put_head(w->data, c, status, nobody ? NULL : content_type, clen, headers, hlen,
               nobody ? -1 : (long long)len, 0);
  if (!c->head && len) p = put(p, body, len);
  w->len = (size_t)(p - w->data);
  if ((rc = conn_write(c, w))) return rc;
  resp_done(c);
  return 0;
}

int moor_http_stream_start(moor_http *srv, unsigned long long id, int status, const char *content_type,
                           const char *headers) {
  conn *c;
  wreq *w;
  char *p;
  size_t clen, hlen;
  int rc;
  if ((rc = answerable(srv, id, status, content_type, headers, &c))) return rc;
  clen = content_type ? strlen(content_type) : 0;
  hlen = headers ? strlen(headers) : 0;
  if (clen + hlen > UINT_MAX / 4) return MOOR_EINVAL;
  w = wreq_get(srv, HEAD_FIXED + clen + hlen);
  if (!w) return MOOR_ENOMEM;
  c->chunked = c->http11;
  if (!c->http11) c->keep_alive = 0; /* HTTP/1.0: the body ends when the connection does */
  p = put_head(w->data, c, status, content_type, clen, headers, hlen, -1, c->chunked);
  w->len = (size_t)(p - w->data);
  if ((rc = conn_write(c, w))) return rc;
  c->state = C_STREAMING;
  return 0;
}

int moor_http_stream_write(moor_http *srv, unsigned long long id, const char *data, size_t len) {
  conn *c = conn_find(srv, id);
  wreq *w;
  char *p;
  if (!c) return MOOR_ENOTFOUND;
  if (c->state != C_STREAMING || (!data && len)) return MOOR_EINVAL;
  if (len == 0 || c->head) return 0; /* an empty chunk would end the body */
  if (len > UINT_MAX / 2) return MOOR_EINVAL;
  w = wreq_get(srv, len + 32);
  if (!w) return MOOR_ENOMEM;
  p = w->data;
  if (c->chunked) {
    p = put_uint(p, len, 16);
    p = PUTS(p, "\r\n");
  }
  p = put(p, data, len);
  if (c->chunked) p = PUTS(p, "\r\n");
  w->len = (size_t)(p - w->data);
  return conn_write(c, w);
}

int moor_http_stream_end(moor_http *srv, unsigned long long id) {
  conn *c = conn_find(srv, id);
  int rc;
  if (!c) return MOOR_ENOTFOUND;
  if (c->state != C_STREAMING) return MOOR_EINVAL;
  if (c->chunked && !c->head) {
    static const char last[] = "0\r\n\r\n";
    wreq *w = wreq_get(srv, sizeof last - 1);
    if (!w) return MOOR_ENOMEM;
    w->len = (size_t)(put(w->data, last, sizeof last - 1) - w->data);
    if ((rc = conn_write(c, w))) return rc;
  }
  resp_done(c);
  return 0;
}

void moor_http_stop(moor_http *srv) {
  if (!srv || srv->stopping) return;
  srv->stopping = 1;
  uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
  for (uint32_t i = 0; i < srv->nslots; i++)
    if (srv->slots[i]) conn_close(srv->slots[i], 0);
}
