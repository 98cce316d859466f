/* `moor mcp`: the Model Context Protocol over standard input and output
 * (moor_mcp_stdio). Lines read from stdin on the uv loop go to the Lua server
 * (lua/moor/mcp/stdio.lua, through moor.host's mcp_* functions); what it
 * sends is written, one JSON-RPC message per line, to out_fd: the real
 * stdout, which the caller saved before pointing fd 1 at stderr, so nothing a
 * tool prints can reach the protocol. The engine is driven by moor_serve. */
#include "host.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MCP_MAX_LINE (64u << 20) /* a message longer than this is dropped, with an error */

typedef struct mcp_stdio {
  moor *m;
  union {
    uv_pipe_t pipe;
    uv_tty_t tty;
  } in;
  char *buf;
  size_t len, cap;
  int overlong; /* the line being read is over MCP_MAX_LINE: skip to its end */
} mcp_stdio;

/* Lua: write(line): the line and a newline, whole, on the saved stdout. */
static int write_line(lua_State *L) {
  int fd = (int)lua_tointeger(L, lua_upvalueindex(1));
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *parts[2] = {s, "\n"};
  size_t lens[2] = {len, 1};
  for (int i = 0; i < 2; i++) {
    size_t off = 0;
    while (off < lens[i]) {
      ssize_t n = write(fd, parts[i] + off, lens[i] - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        lua_pushboolean(L, 0);
        return 1; /* the client is gone (EPIPE): nothing to tell it */
      }
      off += (size_t)n;
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  static char chunk[65536];
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void line(mcp_stdio *s, const char *p, size_t n) {
  if (n && p[n - 1] == '\r') n--;
  if (!n) return;
  lua_pushlstring(s->m->L, p, n);
  if (moor__call_engine(s->m, "mcp_line", 1, 0)) fprintf(stderr, "moor: %s\n", s->m->err);
}

static void on_closed(uv_handle_t *h) { (void)h; }

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  mcp_stdio *s = st->data;
  if (nread < 0) {
    /* stdin closed: the client is done; the runs stay in the database. */
    if (s->len && !s->overlong) line(s, s->buf, s->len);
    s->len = 0;
    uv_read_stop(st);
    if (moor__call_engine(s->m, "mcp_closed", 0, 0)) fprintf(stderr, "moor: %s\n", s->m->err);
    moor_stop(s->m);
    return;
  }
  for (ssize_t i = 0; i < nread; i++) {
    char c = buf->base[i];
    if (c == '\n') {
      if (s->overlong) {
        lua_pushstring(s->m->L, "");
        lua_pushboolean(s->m->L, 1);
        if (moor__call_engine(s->m, "mcp_line", 2, 0)) fprintf(stderr, "moor: %s\n", s->m->err);
      } else {
        line(s, s->buf, s->len);
      }
      s->len = 0;
      s->overlong = 0;
      continue;
    }
    if (s->overlong) continue;
    if (s->len + 1 > s->cap) {
      size_t cap = s->cap ? s->cap * 2 : 4096;
      if (cap > MCP_MAX_LINE) {
        s->overlong = 1;
        s->len = 0;
        continue;
      }
      char *nb = realloc(s->buf, cap);
      if (!nb) {
        s->overlong = 1;
        s->len = 0;
        continue;
      }
      s->buf = nb;
      s->cap = cap;
    }
    s->buf[s->len++] = c;
  }
}

int moor_mcp_stdio(moor *m, int out_fd) {
  mcp_stdio s;
  memset(&s, 0, sizeof s);
  s.m = m;
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  /* A pipe, a socket or a terminal: what an MCP client hands its server. A
   * file (or /dev/null) cannot be waited on by the loop. */
  uv_handle_type kind = uv_guess_handle(0);
  if (kind != UV_NAMED_PIPE && kind != UV_TTY && kind != UV_TCP)
    return moor__set_err(m, MOOR_EINVAL, "moor mcp reads JSON-RPC messages from a pipe, a socket or a terminal on "
                         "stdin, %s; start it from an MCP client (claude mcp add, the MCP Inspector)",
                         kind == UV_FILE ? "not a file" : "not what it was given");
  int rc = kind == UV_TTY ? uv_tty_init(&m->loop, &s.in.tty, 0, 1) : uv_pipe_init(&m->loop, &s.in.pipe, 0);
  if (!rc && kind != UV_TTY) rc = uv_pipe_open(&s.in.pipe, 0);
  if (rc) {
    uv_close((uv_handle_t *)&s.in, on_closed);
    uv_run(&m->loop, UV_RUN_NOWAIT);
    return moor__set_err(m, MOOR_EINVAL, "moor mcp cannot read stdin: %s", uv_strerror(rc));
  }
  s.in.pipe.data = &s;
  lua_pushinteger(m->L, out_fd);
  lua_pushcclosure(m->L, write_line, 1);
  if ((rc = moor__call_engine(m, "mcp_start", 1, 0))) {
    uv_close((uv_handle_t *)&s.in, on_closed);
    uv_run(&m->loop, UV_RUN_NOWAIT);
    return rc;
  }
  uv_read_start((uv_stream_t *)&s.in, alloc_cb, on_read);
  rc = moor_serve(m);
  if (!uv_is_closing((uv_handle_t *)&s.in)) uv_close((uv_handle_t *)&s.in, on_closed);
  uv_run(&m->loop, UV_RUN_NOWAIT);
  free(s.buf);
  return rc;
}
