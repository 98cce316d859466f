/* Internal: an HTTP client on libcurl's multi interface, driven by a libuv
 * loop. It never blocks the loop: curl tells us which sockets to watch and
 * when to wake it, and the loop tells curl what happened.
 *
 * One loop thread. Requests run concurrently; each ends with exactly one call
 * of its callback from the loop, unless it is cancelled first.
 *
 * Behaviour:
 * - http and https only (redirects included); a malformed URL or another
 *   scheme is refused by moor_fetch_start with MOOR_EINVAL.
 * - Redirects are followed, at most 5 by default (max_redirects; more is an
 *   error "too many redirects"). moor follows them itself, not curl: once a
 *   redirect leaves the origin (scheme, host, port) of the hop before it, none
 *   of the request's own headers are sent again (an x-api-key, Authorization,
 *   any other), for the rest of the chain. 303, and 301/302 after a POST,
 *   turn into GET; 307/308 resend the method and body. max_redirects < 0
 *   follows none (the 3xx is the response): model providers use that.
 * - A 4xx or 5xx status is a response, not an error; error is set only when
 *   no complete response arrived (refused, DNS, TLS, timeout, body cap).
 * - Response bodies are capped at 32 MiB (headers at 1 MiB); a bigger one
 *   fails the request. Compressed bodies (gzip, br, zstd) are decoded; the
 *   cap applies to the decoded bytes.
 * - Proxies come from the usual environment variables (https_proxy, ...).
 * - Request headers are never logged: they carry API keys.
 *
 * Every function returns 0 or a negative MOOR_E* code (host/moor.h); the
 * message for the last failure is kept (moor_fetch_errmsg). */
#ifndef MOOR_FETCH_H
#define MOOR_FETCH_H

#include <stddef.h>
#include <uv.h>

typedef struct moor_fetch moor_fetch;          /* one per engine: a CURLM on the loop */

typedef struct moor_fetch_request {
  const char *method;                          /* "GET", "POST", ...; NULL = GET; upper-cased */
  const char *url;
  const char *const *headers;                  /* "Name: value" strings, NULL-terminated; may be NULL */
  const char *body; size_t body_len;           /* may be NULL/0 */
  long timeout_ms;                             /* whole request; 0 = 60000 */
  long connect_timeout_ms;                     /* 0 = 10000 */
  int max_redirects;                           /* 0 = 5; negative = follow none */
  /* Streaming (may be NULL): the body of a 2xx final response is handed to on_data(data, len, data_ud) in
   * pieces as they arrive, from the loop, before cb (whose body is then ""); a 3xx, 4xx or 5xx body is
   * kept and comes whole to cb as usual. on_data may cancel the request or close the client; the 32 MiB
   * cap counts every piece. */
  void (*on_data)(const char *data, size_t len, void *data_ud);
  void *data_ud;
} moor_fetch_request;

typedef struct moor_fetch_response {
  long status;                                 /* HTTP status, 0 on a transport error */
  const char *const *header_names;             /* lower-cased, of the final response only */
  const char *const *header_values;
  size_t nheaders;
  const char *body; size_t body_len;           /* NUL-terminated, never NULL */
  const char *error;                           /* NULL, or curl's message for a transport error */
  int timed_out;                               /* 1 when the timeout ended it */
} moor_fetch_response;                         /* valid only during the callback */

typedef void (*moor_fetch_cb)(const moor_fetch_response *resp, void *ud);

int moor_fetch_open(uv_loop_t *loop, moor_fetch **out);

/* Start a request; cb runs exactly once from the loop (never from inside moor_fetch_start), unless the
 * request is cancelled first. id_out (may be NULL) identifies it. Request data is copied.
 * MOOR_EINVAL for a bad request (URL, method, a header with CR/LF or without ':', negative
 * timeouts) or a closed client; MOOR_ENOMEM. The callback may start, cancel or close. */
int moor_fetch_start(moor_fetch *f, const moor_fetch_request *req, moor_fetch_cb cb, void *ud,
                     unsigned long long *id_out);
int moor_fetch_cancel(moor_fetch *f, unsigned long long id);   /* cb is not called; MOOR_ENOTFOUND if done */
size_t moor_fetch_active(const moor_fetch *f);                  /* requests in flight */

/* Cancel everything (no callbacks) and release; memory is freed once libuv closed its handles, so the
 * caller keeps running the loop (uv_run) afterwards. Safe from inside a callback. NULL is a no-op. */
void moor_fetch_close(moor_fetch *f);

/* The message for the last failure of a call on f ("" when none). */
const char *moor_fetch_errmsg(const moor_fetch *f);

/* For a binding that keeps state per request (the Lua binding): hook(ud) runs once at the start
 * of moor_fetch_close, before requests are dropped without callbacks, so the binding can release
 * what it holds for them; it must not call into f. One hook per client: MOOR_ECONFLICT when
 * another is set; NULL clears. */
int moor_fetch_on_close(moor_fetch *f, void (*hook)(void *ud), void *ud);

/* The Lua binding (fetch_lua.c). Push a table { start = f, cancel = f, active = f } bound to f.
 * Callbacks run on the state's main thread, so one lua_State per client: pushing f again in the
 * same state reuses its binding, pushing it into another state raises. Release order is free:
 * moor_fetch_close drops the binding's requests and registry refs (its close hook), and lua_close
 * cancels the requests the binding still has in flight. Returns 1 (values pushed); raises on
 * error. See fetch_lua.c for the Lua API. */
struct lua_State;
int moor_fetch_lua_push(struct lua_State *L, moor_fetch *f);

#endif
