/* Internal: an embeddable HTTP/1.1 server on libuv and http-parser.
 *
 * One loop thread. The server parses requests, hands each complete one to a
 * handler, and writes what the handler answers. A handler may answer at once
 * or later (from a timer, after the engine settles a run): the connection
 * waits, and pipelined requests behind it are held unparsed until it is
 * answered, so responses always go out in request order.
 *
 * The server answers some errors itself, with a JSON body
 * {"error":{"code":"...","message":"..."}} and then closes the connection:
 * 400 bad_request (malformed HTTP), 413 body_too_large, 431
 * headers_too_large (request line and headers over 64 KiB), 408
 * request_timeout (a request not complete within timeout_ms), 401
 * unauthorized (api_token set and a /v1/ request without it), 505
 * http_version_not_supported.
 *
 * Connection caps: when max_connections, or max_per_peer for the peer's
 * address, is reached, the oldest idle connection (between requests, or new
 * and silent; of that peer for the per-peer cap) is closed to make room; when
 * none is idle, the new connection gets a 503 too_many_connections and is
 * closed at once.
 *
 * Every function returns 0 or a negative MOOR_E* code. Calls naming a
 * connection that is gone (closed by the peer, timed out, stopped) return
 * MOOR_ENOTFOUND and do nothing. */
#ifndef MOOR_HTTP_H
#define MOOR_HTTP_H

#include <stddef.h>
#include <uv.h>

typedef struct moor_http moor_http;

/* A complete request. It and every string it points to are valid only during
 * the handler call: copy what you keep. */
typedef struct moor_http_request {
  unsigned long long conn;      /* id of the connection; answer with it */
  const char *method;           /* "GET", "POST", ... (any method http-parser knows) */
  const char *path;             /* the URL path, percent-decoding NOT applied, without the query */
  const char *query;            /* text after '?', or NULL */
  size_t nheaders;
  const char *const *names;     /* header names, lower-cased (trailers of a chunked body included) */
  const char *const *values;
  const char *body; size_t body_len;   /* whole body (Content-Length or chunked, de-chunked);
                                          NUL-terminated, never NULL */
} moor_http_request;

typedef struct moor_http_config {
  const char *host;             /* "127.0.0.1" default when NULL; IPv4 and IPv6 literals */
  int port;                     /* 0 = pick a free port */
  size_t body_limit;            /* bytes; 0 = 1 MiB default */
  unsigned timeout_ms;          /* a started request must complete within this; 0 = 10000 */
  unsigned idle_ms;             /* idle keep-alive connections close after this; 0 = 60000 */
  const char *api_token;        /* when set, a request under /v1/ without "Authorization: Bearer
                                   <api_token>" is answered 401 at headers-complete, before its
                                   body is read (constant-time compare, length included) */
  unsigned first_byte_ms;       /* a new connection that sends nothing is closed after this; 0 = 5000 */
  unsigned max_connections;     /* open connections in all; 0 = 1024 */
  unsigned max_per_peer;        /* open connections from one IP address; 0 = 256 */
} moor_http_config;

/* Called once per complete request. The handler must answer each request
 * exactly once, at once or later (after returning), with moor_http_respond or
 * moor_http_stream_start. */
typedef void (*moor_http_handler)(moor_http *srv, const moor_http_request *req, void *ud);

/* Called when the peer closes (or resets) a connection that has a stream open
 * or a request unanswered. Not called for connections closed by
 * moor_http_stop, nor when a respond/stream call itself fails with MOOR_EIO
 * (its return code says so). The id is already gone when this runs. */
typedef void (*moor_http_closed)(moor_http *srv, unsigned long long conn, void *ud);

/* Bind and listen. On failure *out is NULL, err (may be NULL) holds a message,
 * and the code is MOOR_EINVAL (bad config), MOOR_ENOMEM or MOOR_EIO (bind or
 * listen failed). A failed start may leave a handle closing on the loop: the
 * memory is released by the loop's next uv_run. on_closed may be NULL. */
int moor_http_start(uv_loop_t *loop, const moor_http_config *cfg, moor_http_handler on_request,
                    moor_http_closed on_closed, void *ud, moor_http **out, char *err, size_t errlen);

int moor_http_port(const moor_http *srv);          /* the bound port */

/* Answer a request: status 200..999. content_type may be NULL (no header)
 * and must hold no CR, LF or other control byte. headers: extra header lines
 * "Name: value\r\n..." or NULL (a missing final CRLF is added); each line must
 * pass moor_http_header_ok (a blank line, a bare CR or LF, a name that is not
 * a token are refused) and none may be Content-Length, Transfer-Encoding or
 * Connection (moor writes those). Content-Length and Connection are added; 204 and 304
 * get neither a body nor Content-Length/Content-Type; a HEAD request gets no
 * body. The data is copied. MOOR_EINVAL for bad arguments or when the
 * connection has no request waiting for an answer (answered already, or
 * streaming); MOOR_EIO when the write failed (the connection is then closed
 * and on_closed is not called). */
int moor_http_respond(moor_http *srv, unsigned long long conn, int status, const char *content_type,
                      const char *headers, const char *body, size_t len);

/* One header line "Name: value" (no CRLF) as moor writes it: a token name,
 * a colon, a value of visible bytes, spaces and tabs (no CR, LF, NUL or other
 * control byte). 0, or MOOR_EINVAL. For callers that build the headers
 * argument from separate names and values (a CRLF inside a value would
 * otherwise read as a second header). */
int moor_http_header_ok(const char *line, size_t len);

/* A streamed response (Server-Sent Events): status line and headers now, body
 * until stream_end. Sent with Transfer-Encoding: chunked on HTTP/1.1 so
 * keep-alive clients see the end; on HTTP/1.0 the body ends with the
 * connection. A write of 0 bytes does nothing. When more than 8 MiB is queued
 * for a client that does not read, the connection is closed and the write
 * returns MOOR_EIO. */
int moor_http_stream_start(moor_http *srv, unsigned long long conn, int status, const char *content_type,
                           const char *headers);
int moor_http_stream_write(moor_http *srv, unsigned long long conn, const char *data, size_t len);
int moor_http_stream_end(moor_http *srv, unsigned long long conn);

/* Stop listening and close every connection; srv is freed once libuv has
 * closed its handles, so the caller must keep running the loop (uv_run) until
 * it has no more handles of ours. Safe to call from a handler or on_closed;
 * srv must not be used after it (keep no timer that will answer later). */
void moor_http_stop(moor_http *srv);

#endif
