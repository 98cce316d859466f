/* An HTTP client on libcurl's multi interface, driven by a libuv loop (see
 * fetch.h).
 *
 * The pattern is curl's own "multi_socket" one: curl asks us (CURLMOPT_SOCKETFUNCTION)
 * to watch a socket, we keep one uv_poll_t per socket and report its events
 * back with curl_multi_socket_action; curl asks for a wake-up
 * (CURLMOPT_TIMERFUNCTION), we keep one uv_timer_t. After every call into
 * curl, finished transfers are read with curl_multi_info_read and their
 * callbacks run. Callbacks run only from our uv callbacks, after curl has
 * returned, so they may start, cancel or close freely.
 *
 * Ownership: the client owns the multi handle (made at the first request,
 * so libcurl is loaded only then: curl_dl.h), the timer, one sock per
 * watched socket and one freq per request in flight. A freq owns its easy
 * handle, header list and response buffers, and is freed when it completes
 * (after its callback) or is cancelled. A sock is freed by its close
 * callback; the client when the timer and every sock have closed, so a
 * pointer to it stays valid until the loop runs close callbacks, even when a
 * callback closed it. */
#include "fetch.h"

#include <curl/curl.h>
#include "curl_dl.h" /* libcurl loaded at its first use */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "moor.h"
#include "moorconf.h"

/* Why a callback of ours made curl stop a transfer (curl only sees a write error). */
enum { FAIL_NONE, FAIL_BODY, FAIL_HEAD, FAIL_NOMEM, FAIL_REDIRECTS };

typedef struct sock sock;
typedef struct freq freq;

struct sock {
  uv_poll_t poll;
  moor_fetch *f;
  curl_socket_t fd;
  int events;          /* what curl last asked for, to re-arm after an error */
  int closing;
  sock *prev, *next;
};

struct freq {
  moor_fetch *f;
  CURL *easy;
  struct curl_slist *headers;
  unsigned long long id;
  moor_fetch_cb cb;
  void *ud;
  int fail;
  int in_body;         /* body bytes seen: later header lines are trailers */
  char *body;          /* response body, NUL-terminated once it has bytes */
  size_t body_len, body_cap;
  char *hbuf;          /* response headers: "name\0value\0" pairs */
  size_t hbuf_len, hbuf_cap;
  size_t *hoff;        /* offset of each name in hbuf */
  size_t nh, hoff_cap;
  char errbuf[CURL_ERROR_SIZE];
  struct curl_slist *own;  /* moor's own header lines: what is left after a cross-origin redirect */
  int redirects_left;      /* redirects still to follow (moor follows them itself, see follow()) */
  int follow;              /* redirects are followed at all */
  int is_head, is_post;    /* the method, for the method change of 301/302/303 */
  int stripped;            /* the author's headers were dropped (a redirect left the origin) */
  uint64_t deadline;       /* uv_now at which the whole request (every hop) times out */
  void (*on_data)(const char *, size_t, void *); /* streaming: 2xx body pieces go here (deliver_data) */
  void *data_ud;
  int streaming;           /* this hop's body streams: its status is 2xx (set at its first body bytes) */
  size_t streamed;         /* body bytes handed to on_data, for the cap */
  freq *prev, *next;
};

struct moor_fetch {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  freq *reqs;          /* in flight */
  size_t nreqs;
  sock *socks;         /* watched */
  unsigned long long next_id;
  unsigned open;       /* uv handles not yet closed: the timer and every sock */
  int closing;
  int cleaning;        /* inside curl_multi_cleanup */
  void (*hook)(void *);
  void *hook_ud;
  char err[256];
};

static const char *const NO_HEADERS[1] = {NULL};

static void set_err(moor_fetch *f, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->err, sizeof f->err, fmt, ap);
  va_end(ap);
}

/* Grow *buf to hold at least need bytes (doubling, from first). */
static int grow(char **buf, size_t *cap, size_t need, size_t first) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : first;
  while (n < need) n *= 2;
  char *p = realloc(*buf, n);
  if (!p) return -1;
  *buf = p;
  *cap = n;
  return 0;
}

/* ------------------------------------------------------------ handles */

static void handle_closed(uv_handle_t *h) {
  moor_fetch *f;
  if (h->type == UV_POLL) {
    sock *s = h->data;
    f = s->f;
    free(s);
  } else {
    f = h->data;
  }
  if (--f->open == 0 && f->closing) free(f);
}

static void sock_close(sock *s) {
  moor_fetch *f = s->f;
  if (s->prev) s->prev->next = s->next;
  else f->socks = s->next;
  if (s->next) s->next->prev = s->prev;
  s->closing = 1;
  /* uv_close stops the poll at once, so curl may close the fd and a new
   * socket may reuse its number before the close callback runs. */
  uv_close((uv_handle_t *)&s->poll, handle_closed);
}

static void drain(moor_fetch *f);

static void on_poll(uv_poll_t *h, int status, int events) {
  sock *s = h->data;
  moor_fetch *f = s->f;
  int flags = 0, running;
  if (status < 0) {
    flags = CURL_CSELECT_ERR;
  } else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  curl_multi_socket_action(f->multi, s->fd, flags, &running);
  /* libuv stops a poll that reported an error; if curl keeps the socket
   * (it did not say REMOVE), watch it again or the transfer would stall. */
  if (!s->closing && !f->closing && !uv_is_active((uv_handle_t *)h) && s->events)
    uv_poll_start(h, s->events, on_poll);
  drain(f);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  (void)easy;
  moor_fetch *f = userp;
  sock *s = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (s) {
      if (!f->cleaning) curl_multi_assign(f->multi, fd, NULL);
      sock_close(s);
    }
    return 0;
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return -1; /* curl fails the transfers on this multi handle */
    if (uv_poll_init_socket(f->loop, &s->poll, fd) != 0) {
      free(s);
      return -1;
    }
    s->f = f;
    s->fd = fd;
    s->poll.data = s;
    s->next = f->socks;
    if (f->socks) f->socks->prev = s;
    f->socks = s;
    f->open++;
    curl_multi_assign(f->multi, fd, s);
  }
  s->events = 0;
  if (what & CURL_POLL_IN) s->events |= UV_READABLE;
  if (what & CURL_POLL_OUT) s->events |= UV_WRITABLE;
  return uv_poll_start(&s->poll, s->events, on_poll) == 0 ? 0 : -1;
}

static void on_timeout(uv_timer_t *t) {
  moor_fetch *f = t->data;
  int running;
  curl_multi_socket_action(f->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  drain(f);
}

/* curl wants to be called after ms (0: as soon as possible, from the loop:
 * curl must not be re-entered from its own callback). -1: no timeout. */
static int on_timer(CURLM *multi, long ms, void *userp) {
  (void)multi;
  moor_fetch *f = userp;
  if (f->closing) return 0;
  if (ms < 0) return uv_timer_stop(&f->timer) == 0 ? 0 : -1;
  return uv_timer_start(&f->timer, on_timeout, (uint64_t)ms, 0) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ requests */

static void req_unlink(freq *r) {
  moor_fetch *f = r->f;
  if (r->prev) r->prev->next = r->next;
  else f->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  f->nreqs--;
}

static void req_free(freq *r) {
  if (r->easy) curl_easy_cleanup(r->easy);
  curl_slist_free_all(r->headers);
  curl_slist_free_all(r->own);
  free(r->body);
  free(r->hbuf);
  free(r->hoff);
  free(r);
}

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
  freq *r = ud;
  size_t len = size * n;
  if (!r->in_body && r->on_data) {
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    r->streaming = status >= 200 && status < 300;
  }
  r->in_body = 1;
  if (len > MOOR_FETCH_BODY_MAX - r->streamed - r->body_len) {
    r->fail = FAIL_BODY;
    return 0; /* a short count makes curl stop with CURLE_WRITE_ERROR */
  }
  if (grow(&r->body, &r->body_cap, r->body_len + len + 1, MOOR_FETCH_BODY_FIRST) != 0) {
    r->fail = FAIL_NOMEM;
    return 0;
  }
  memcpy(r->body + r->body_len, p, len);
  r->body_len += len;
  r->body[r->body_len] = '\0';
  return len;
}

static int is_space(char c) { return c == ' ' || c == '\t'; }

/* curl hands us every header line of every response (1xx, redirects, a
 * proxy's CONNECT answer, trailers). Keep those of the final response: a
 * status line starts over, lines after the body are trailers. */
static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  freq *r = ud;
  size_t len = size * n;
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
    r->hbuf_len = 0;
    r->nh = 0;
    r->body_len = 0; /* a redirect's body, if curl passed one on */
    r->in_body = 0;
    r->streaming = 0;
    return len;
  }
  if (r->in_body) return len;
  size_t end = len;
  while (end > 0 && (p[end - 1] == '\r' || p[end - 1] == '\n')) end--;
  const char *colon = memchr(p, ':', end);
  if (!colon || colon == p) return len; /* the blank line, or not a header */
  size_t nlen = (size_t)(colon - p);
  while (nlen > 0 && is_space(p[nlen - 1])) nlen--;
  size_t v = (size_t)(colon - p) + 1;
  while (v < end && is_space(p[v])) v++;
  while (end > v && is_space(p[end - 1])) end--;
  size_t vlen = end - v;
  if (r->hbuf_len + nlen + vlen + 2 > MOOR_FETCH_HEAD_MAX) {
    r->fail = FAIL_HEAD;
    return 0;
  }
  if (grow(&r->hbuf, &r->hbuf_cap, r->hbuf_len + nlen + vlen + 2, 1024) != 0) {
    r->fail = FAIL_NOMEM;
    return 0;
  }
  if (r->nh == r->hoff_cap) {
    size_t cap = r->hoff_cap ? 2 * r->hoff_cap : 16;
    size_t *o = realloc(r->hoff, cap * sizeof *o);
    if (!o) {
      r->fail = FAIL_NOMEM;
      return 0;
    }
    r->hoff = o;
    r->hoff_cap = cap;
  }
  char *d = r->hbuf + r->hbuf_len;
  for (size_t i = 0; i < nlen; i++) d[i] = (p[i] >= 'A' && p[i] <= 'Z') ? (char)(p[i] + 32) : p[i];
  d[nlen] = '\0';
  memcpy(d + nlen + 1, p + v, vlen);
  d[nlen + 1 + vlen] = '\0';
  r->hoff[r->nh++] = r->hbuf_len;
  r->hbuf_len += nlen + vlen + 2;
  return len;
}

static void finish(freq *r, CURLcode rc) {
  moor_fetch_response resp;
  memset(&resp, 0, sizeof resp);
  resp.header_names = NO_HEADERS;
  resp.header_values = NO_HEADERS;
  resp.body = "";
  const char **arr = NULL;
  if (r->fail == FAIL_BODY || rc == CURLE_FILESIZE_EXCEEDED) {
    resp.error = "response body larger than 32 MiB";
  } else if (r->fail == FAIL_HEAD) {
    resp.error = "response headers larger than 1 MiB";
  } else if (r->fail == FAIL_NOMEM) {
    resp.error = "out of memory";
  } else if (r->fail == FAIL_REDIRECTS) {
    resp.error = r->errbuf;
  } else if (rc != CURLE_OK) {
    resp.error = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
    resp.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
  } else {
    if (r->nh > 0) {
      arr = malloc(2 * r->nh * sizeof *arr);
      if (!arr) resp.error = "out of memory";
    }
    if (!resp.error) {
      for (size_t i = 0; i < r->nh; i++) {
        const char *name = r->hbuf + r->hoff[i];
        arr[i] = name;
        arr[r->nh + i] = name + strlen(name) + 1;
      }
      if (arr) {
        resp.header_names = arr;
        resp.header_values = arr + r->nh;
        resp.nheaders = r->nh;
      }
      curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &resp.status);
      if (r->body) {
        resp.body = r->body;
        resp.body_len = r->body_len;
      }
    }
  }
  r->cb(&resp, r->ud);
  free(arr);
}

/* scheme, host and port of an absolute URL are the same (port by default of
 * the scheme when absent). */
static int same_origin(const char *a, const char *b) {
  CURLU *ua = curl_url(), *ub = curl_url();
  int same = 0;
  if (ua && ub && curl_url_set(ua, CURLUPART_URL, a, 0) == CURLUE_OK &&
      curl_url_set(ub, CURLUPART_URL, b, 0) == CURLUE_OK) {
    static const CURLUPart parts[] = {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT};
    same = 1;
    for (size_t i = 0; same && i < sizeof parts / sizeof *parts; i++) {
      char *pa = NULL, *pb = NULL;
      unsigned flags = parts[i] == CURLUPART_PORT ? CURLU_DEFAULT_PORT : 0;
      if (curl_url_get(ua, parts[i], &pa, flags) != CURLUE_OK || curl_url_get(ub, parts[i], &pb, flags) != CURLUE_OK ||
          strcasecmp(pa, pb) != 0)
        same = 0;
      curl_free(pa);
      curl_free(pb);
    }
  }
  curl_url_cleanup(ua);
  curl_url_cleanup(ub);
  return same;
}

/* A finished transfer that is a redirect to follow: moor follows redirects
 * itself (curl's FOLLOWLOCATION would send the author's headers, an x-api-key,
 * to whatever host the Location names). Once a redirect leaves the origin
 * (scheme, host, port) of the hop before it, the author's headers are dropped
 * for the rest of the chain; 303, and 301/302 after a POST, turn into GET.
 * 1 when the transfer was restarted, 0 to finish with this response. */
static int follow(freq *r) {
  long status = 0;
  char *loc = NULL, *eff = NULL;
  moor_fetch *f = r->f;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  if (!r->follow || (status != 301 && status != 302 && status != 303 && status != 307 && status != 308)) return 0;
  if (curl_easy_getinfo(r->easy, CURLINFO_REDIRECT_URL, &loc) != CURLE_OK || !loc) return 0;
  if (strncasecmp(loc, "http://", 7) != 0 && strncasecmp(loc, "https://", 8) != 0)
    return 0; /* not http(s): the 3xx is the answer */
  if (r->redirects_left <= 0) {
    r->fail = FAIL_REDIRECTS;
    snprintf(r->errbuf, sizeof r->errbuf, "too many redirects (more than %d)", r->follow);
    return 0;
  }
  char *next = strdup(loc); /* loc belongs to the handle */
  if (!next) return 0;
  curl_easy_getinfo(r->easy, CURLINFO_EFFECTIVE_URL, &eff); /* valid until CURLOPT_URL changes */
  int cross = !r->stripped && (!eff || !same_origin(eff, next));
  CURLcode cc = curl_easy_setopt(r->easy, CURLOPT_URL, next);
  if (cc == CURLE_OK && cross) {
    r->stripped = 1;
    cc = curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->own);
    if (cc == CURLE_OK) cc = curl_easy_setopt(r->easy, CURLOPT_USERAGENT, "moor/" MOOR_VERSION);
  }
  free(next);
  if (cc == CURLE_OK && ((status == 303 && !r->is_head) || ((status == 301 || status == 302) && r->is_post))) {
    cc = curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, NULL);
    if (cc == CURLE_OK) cc = curl_easy_setopt(r->easy, CURLOPT_HTTPGET, 1L);
    r->is_post = 0;
  }
  uint64_t now = uv_now(f->loop);
  if (cc == CURLE_OK)
    cc = curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, r->deadline > now ? (long)(r->deadline - now) : 1L);
  if (cc != CURLE_OK) return 0;
  r->redirects_left--;
  r->hbuf_len = r->nh = r->body_len = 0;
  r->in_body = 0;
  return curl_multi_add_handle(f->multi, r->easy) == CURLM_OK;
}

/* Hand streaming requests the body bytes that came since the last call,
 * outside curl (on_data may cancel or close). Each piece leaves its request
 * before the call, so a cancel inside it frees nothing in use here. */
static void deliver_data(moor_fetch *f) {
  for (;;) {
    freq *r = f->reqs;
    while (r && !(r->streaming && r->body_len > 0)) r = r->next;
    if (!r || f->closing) return;
    char *piece = r->body;
    size_t len = r->body_len;
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    r->streamed += len;
    r->on_data(piece, len, r->data_ud);
    free(piece);
  }
}

/* Run the callbacks of finished transfers. A callback may close the client:
 * then the rest are dropped with everything else. */
static void drain(moor_fetch *f) {
  CURLMsg *m;
  int left;
  deliver_data(f); /* a stream's last pieces come before its end */
  while (!f->closing && (m = curl_multi_info_read(f->multi, &left)) != NULL) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL *easy = m->easy_handle;
    CURLcode rc = m->data.result; /* m is gone after remove_handle */
    char *priv = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    freq *r = (freq *)(void *)priv;
    curl_multi_remove_handle(f->multi, easy);
    if (rc == CURLE_OK && r->fail == FAIL_NONE && follow(r)) continue; /* the next hop is under way */
    req_unlink(r); /* the callback's own cancel now gets MOOR_ENOTFOUND */
    finish(r, rc);
    req_free(r);
  }
}

/* ------------------------------------------------------------ validation */

static int is_tchar(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
  return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int has_crlf(const char *s) { return strpbrk(s, "\r\n") != NULL; }

/* "Name: value", or curl's "Name;" for a header with an empty value. The
 * message names the header, never its value (it may be a key). */
static int check_header(moor_fetch *f, const char *h) {
  size_t n = 0;
  while (is_tchar((unsigned char)h[n])) n++;
  if (n == 0 || (h[n] != ':' && !(h[n] == ';' && h[n + 1] == '\0'))) {
    set_err(f, "bad request header: expected \"Name: value\" with a token name (header %.*s)",
            (int)(n > 64 ? 64 : n), h);
    return MOOR_EINVAL;
  }
  if (has_crlf(h)) {
    set_err(f, "bad request header %.*s: the value contains CR or LF", (int)(n > 64 ? 64 : n), h);
    return MOOR_EINVAL;
  }
  return 0;
}

static int header_named(const char *h, const char *name) {
  size_t n = strlen(name);
  return strncasecmp(h, name, n) == 0 && (h[n] == ':' || h[n] == ';');
}

static int check_url(moor_fetch *f, const char *url) {
  CURLU *u = curl_url();
  if (!u) {
    set_err(f, "out of memory");
    return MOOR_ENOMEM;
  }
  char *scheme = NULL;
  CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, 0);
  if (uc == CURLUE_OK) uc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
  int rc = 0;
  if (uc == CURLUE_OUT_OF_MEMORY) {
    set_err(f, "out of memory");
    rc = MOOR_ENOMEM;
  } else if (uc != CURLUE_OK) {
    set_err(f, "bad url: %s", curl_url_strerror(uc));
    rc = MOOR_EINVAL;
  } else if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
    set_err(f, "bad url: scheme %s is not http or https", scheme);
    rc = MOOR_EINVAL;
  }
  curl_free(scheme);
  curl_url_cleanup(u);
  return rc;
}

/* ------------------------------------------------------ close-on-exec */

/* curl opens its sockets (and the multi handle's wake-up socketpair) without
 * FD_CLOEXEC, so a step's child process would inherit them. */
static void set_cloexec(int fd) {
  int fl = fcntl(fd, F_GETFD);
  if (fl >= 0 && !(fl & FD_CLOEXEC)) (void)fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
}

static int on_sockopt(void *ud, curl_socket_t fd, curlsocktype purpose) {
  (void)ud;
  (void)purpose;
  set_cloexec((int)fd);
  return CURL_SOCKOPT_OK;
}

#define FD_SNAP 4096 /* descriptors tracked around curl_multi_init; higher ones are left alone */

/* Mark (or, with mark = 0, record in seen) the open descriptors below FD_SNAP;
 * with mark = 1 only those not seen before are made close-on-exec. */
static void fd_snapshot(unsigned char *seen, int mark) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *de;
  int self;
  if (!d) return;
  self = dirfd(d);
  while ((de = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(de->d_name, &end, 10);
    if (*end || end == de->d_name || fd < 0 || fd >= FD_SNAP || fd == self) continue;
    if (!mark) seen[fd / 8] |= (unsigned char)(1u << (fd % 8));
    else if (!(seen[fd / 8] & (1u << (fd % 8)))) set_cloexec((int)fd);
  }
  closedir(d);
}

/* ------------------------------------------------------------ public */

/* The multi handle, made at the first request (so a process that makes
 * none never loads libcurl: curl_dl.h). 0, or MOOR_EIO / MOOR_ENOMEM with
 * f->err set. */
static int ensure_multi(moor_fetch *f) {
  static int curl_ready;
  if (f->multi) return 0;
  /* Once per process, and never undone: curl_global_cleanup would pull
   * OpenSSL from under any other client in the process. */
  if (!curl_ready) {
    CURLcode cc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (cc != CURLE_OK) {
      set_err(f, "cannot start libcurl: %s", curl_easy_strerror(cc));
      return MOOR_EIO;
    }
    curl_ready = 1;
  }
  unsigned char before[FD_SNAP / 8] = {0};
  fd_snapshot(before, 0);
  f->multi = curl_multi_init();
  fd_snapshot(before, 1); /* its wake-up socketpair */
  if (!f->multi) {
    set_err(f, "out of memory");
    return MOOR_ENOMEM;
  }
  curl_multi_setopt(f->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(f->multi, CURLMOPT_SOCKETDATA, f);
  curl_multi_setopt(f->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(f->multi, CURLMOPT_TIMERDATA, f);
  return 0;
}

int moor_fetch_open(uv_loop_t *loop, moor_fetch **out) {
  if (!out) return MOOR_EINVAL;
  *out = NULL;
  if (!loop) return MOOR_EINVAL;
  moor_fetch *f = calloc(1, sizeof *f);
  if (!f) return MOOR_ENOMEM;
  f->loop = loop;
  f->next_id = 1;
  if (uv_timer_init(loop, &f->timer) != 0) {
    free(f);
    return MOOR_EIO;
  }
  f->timer.data = f;
  f->open = 1;
  *out = f;
  return 0;
}

const char *moor_fetch_errmsg(const moor_fetch *f) { return f ? f->err : "no client"; }

int moor_fetch_on_close(moor_fetch *f, void (*hook)(void *ud), void *ud) {
  if (!f) return MOOR_EINVAL;
  if (hook && f->hook && (f->hook != hook || f->hook_ud != ud)) return MOOR_ECONFLICT;
  f->hook = hook;
  f->hook_ud = hook ? ud : NULL;
  return 0;
}

#define SETOPT(opt, val) \
  do { \
    if (cc == CURLE_OK) cc = curl_easy_setopt(e, opt, val); \
  } while (0)

int moor_fetch_start(moor_fetch *f, const moor_fetch_request *req, moor_fetch_cb cb, void *ud,
                     unsigned long long *id_out) {
  if (!f) return MOOR_EINVAL;
  f->err[0] = '\0';
  if (f->closing) {
    set_err(f, "the client is closed");
    return MOOR_EINVAL;
  }
  if (!req || !cb || !req->url) {
    set_err(f, "a request needs a url and a callback");
    return MOOR_EINVAL;
  }
  if (req->timeout_ms < 0 || req->connect_timeout_ms < 0) {
    set_err(f, "timeouts must not be negative");
    return MOOR_EINVAL;
  }
  if (!req->body && req->body_len > 0) {
    set_err(f, "body_len without a body");
    return MOOR_EINVAL;
  }
  char method[MOOR_FETCH_METHOD_MAX + 1] = "GET";
  if (req->method) {
    size_t n = strlen(req->method);
    if (n == 0 || n > MOOR_FETCH_METHOD_MAX) {
      set_err(f, "bad method: expected 1 to %d characters", MOOR_FETCH_METHOD_MAX);
      return MOOR_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)req->method[i];
      if (!is_tchar(c)) {
        set_err(f, "bad method: '%c' is not allowed", c < 32 || c > 126 ? '?' : c);
        return MOOR_EINVAL;
      }
      method[i] = (char)(c >= 'a' && c <= 'z' ? c - 32 : c);
    }
    method[n] = '\0';
  }
  int rc = check_url(f, req->url);
  if (rc) return rc;
  int has_expect = 0, has_agent = 0;
  if (req->headers) {
    for (const char *const *h = req->headers; *h; h++) {
      if ((rc = check_header(f, *h)) != 0) return rc;
      has_expect |= header_named(*h, "expect");
      has_agent |= header_named(*h, "user-agent");
    }
  }

  freq *r = calloc(1, sizeof *r);
  if (!r) goto nomem;
  r->f = f;
  r->cb = cb;
  r->ud = ud;
  if (req->headers) {
    for (const char *const *h = req->headers; *h; h++) {
      struct curl_slist *l = curl_slist_append(r->headers, *h);
      if (!l) goto nomem;
      r->headers = l;
    }
  }
  if (!has_expect) {
    /* curl sends "Expect: 100-continue" before a big body and then waits a
     * second for servers that ignore it (most APIs): send the body at once. */
    struct curl_slist *l = curl_slist_append(r->headers, "Expect:");
    if (!l) goto nomem;
    r->headers = l;
  }
  /* what is sent after a cross-origin redirect: none of the author's headers */
  if (!(r->own = curl_slist_append(NULL, "Expect:"))) goto nomem;
  r->on_data = req->on_data;
  r->data_ud = req->data_ud;
  r->follow = req->max_redirects < 0 ? 0 : req->max_redirects > 0 ? req->max_redirects : MOOR_FETCH_REDIRECTS;
  r->redirects_left = r->follow;
  r->deadline = uv_now(f->loop) + (uint64_t)(req->timeout_ms ? req->timeout_ms : MOOR_FETCH_TIMEOUT_MS);
  CURL *e = r->easy = curl_easy_init();
  if (!e) goto nomem;
  CURLcode cc = CURLE_OK;
  SETOPT(CURLOPT_PRIVATE, (char *)r);
  SETOPT(CURLOPT_URL, req->url);
  SETOPT(CURLOPT_NOSIGNAL, 1L);
  SETOPT(CURLOPT_SOCKOPTFUNCTION, on_sockopt); /* close-on-exec */
#if LIBCURL_VERSION_NUM >= 0x075500
  SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
  SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  SETOPT(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
  SETOPT(CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  SETOPT(CURLOPT_FOLLOWLOCATION, 0L); /* follow() does it, dropping the author's headers off-origin */
  SETOPT(CURLOPT_TIMEOUT_MS, req->timeout_ms ? req->timeout_ms : MOOR_FETCH_TIMEOUT_MS);
  SETOPT(CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms ? req->connect_timeout_ms : MOOR_FETCH_CONNECT_MS);
  SETOPT(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MOOR_FETCH_BODY_MAX); /* fail early on a Content-Length over the cap */
  SETOPT(CURLOPT_ACCEPT_ENCODING, "");                       /* every encoding curl can decode */
  SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);                         /* model responses can stream for minutes */
  SETOPT(CURLOPT_ERRORBUFFER, r->errbuf);
  SETOPT(CURLOPT_WRITEFUNCTION, on_body);
  SETOPT(CURLOPT_WRITEDATA, r);
  SETOPT(CURLOPT_HEADERFUNCTION, on_header);
  SETOPT(CURLOPT_HEADERDATA, r);
  SETOPT(CURLOPT_HTTPHEADER, r->headers);
  if (!has_agent) SETOPT(CURLOPT_USERAGENT, "moor/" MOOR_VERSION);
  int is_get = strcmp(method, "GET") == 0, is_post = strcmp(method, "POST") == 0;
  r->is_post = is_post;
  r->is_head = strcmp(method, "HEAD") == 0;
  if (r->is_head) {
    SETOPT(CURLOPT_NOBODY, 1L);
  } else if (!is_get || req->body) {
    /* POST fields carry any body; a custom verb only renames the request
     * line. Plain POST keeps curl's POST handling (303 turns into GET). */
    if (!is_post) SETOPT(CURLOPT_CUSTOMREQUEST, method);
    if (req->body || is_post || strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) {
      SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
      SETOPT(CURLOPT_COPYPOSTFIELDS, req->body ? req->body : "");
    }
  }
  if (cc == CURLE_OUT_OF_MEMORY) goto nomem;
  if (cc != CURLE_OK) {
    set_err(f, "curl refused an option: %s", curl_easy_strerror(cc));
    req_free(r);
    return MOOR_EINVAL;
  }
  int erc = ensure_multi(f);
  if (erc) {
    req_free(r);
    return erc;
  }
  CURLMcode mc = curl_multi_add_handle(f->multi, e);
  if (mc != CURLM_OK) {
    if (mc == CURLM_OUT_OF_MEMORY) goto nomem;
    set_err(f, "curl: %s", curl_multi_strerror(mc));
    req_free(r);
    return MOOR_EIO;
  }
  r->id = f->next_id++;
  r->next = f->reqs;
  if (f->reqs) f->reqs->prev = r;
  f->reqs = r;
  f->nreqs++;
  if (id_out) *id_out = r->id;
  return 0;

nomem:
  if (r) req_free(r);
  set_err(f, "out of memory");
  return MOOR_ENOMEM;
}

int moor_fetch_cancel(moor_fetch *f, unsigned long long id) {
  if (!f || f->closing) return MOOR_ENOTFOUND;
  /* A list: a client has tens of requests in flight, not thousands. */
  for (freq *r = f->reqs; r; r = r->next) {
    if (r->id != id) continue;
    /* Also drops a completion curl has queued for it but we have not read. */
    curl_multi_remove_handle(f->multi, r->easy);
    req_unlink(r);
    req_free(r);
    return 0;
  }
  return MOOR_ENOTFOUND;
}

size_t moor_fetch_active(const moor_fetch *f) { return f && !f->closing ? f->nreqs : 0; }

void moor_fetch_close(moor_fetch *f) {
  if (!f || f->closing) return;
  f->closing = 1;
  if (f->hook) {
    void (*hook)(void *) = f->hook;
    f->hook = NULL;
    hook(f->hook_ud);
  }
  while (f->reqs) {
    freq *r = f->reqs;
    curl_multi_remove_handle(f->multi, r->easy);
    req_unlink(r);
    req_free(r);
  }
  f->cleaning = 1;
  if (f->multi) curl_multi_cleanup(f->multi);
  f->multi = NULL;
  while (f->socks) sock_close(f->socks); /* any curl did not say REMOVE for */
  uv_close((uv_handle_t *)&f->timer, handle_closed);
}
