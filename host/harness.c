/* moor.core's parts for harness agents (issue 11): the agent's harness
 * process (core.spawn: its own process group, stdout read as lines, the
 * tail of stderr, the group killed as one) and the per-agent Unix-domain
 * socket the launcher moor-wfa (wfa.c) talks to (core.unix_listen: one
 * request line per connection, one response, bounded sizes, connections and
 * lifetimes). The protocol itself (what a request means, the answers) is
 * Lua: lua/moor/harness/host.lua.
 *
 * Ownership: every process and server is a C struct in a list on the engine
 * (m->procs, m->usrvs), so moor__harness_close can end them all before the
 * Lua state goes; the Lua userdata only points at it (a box), and either
 * side going first clears the other's pointer. A struct is freed when the
 * last of its libuv handles has closed. Callback refs are held by the struct
 * and dropped when it is done (a process reported, a server closed). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct ucred (SO_PEERCRED) */
#endif
#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

#define PROC_MT "moor.harness.proc"
#define USRV_MT "moor.harness.server"

/* libuv writes pipes and sockets with write(2): a reader that went away must
 * fail the write (EPIPE), not kill the host. As serve.c: unless the embedder
 * chose a disposition. (uv_spawn resets the child's signals.) */

/* The state callbacks run on: the main thread, never L itself, which may be
 * a coroutine (a step's) that is suspended or gone when the callback fires. */
static lua_State *main_thread(lua_State *L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(L, -1);
  lua_pop(L, 1);
  return main;
}

static void ignore_sigpipe(void) {
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

/* Call the function pushed before its nargs arguments; an error is printed
 * as core.after's are. */
static void call_lua(lua_State *L, int nargs, const char *what) {
  if (lua_pcall(L, nargs, 0, 0) != LUA_OK) {
    fprintf(stderr, "moor: %s callback: %s\n", what, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
}

static int signal_arg(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TNUMBER) return (int)luaL_checkinteger(L, idx);
  static const char *const names[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "STOP", "CONT", NULL};
  static const int nums[] = {SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGSTOP, SIGCONT};
  return nums[luaL_checkoption(L, idx, NULL, names)];
}

/* ------------------------------------------------------------------------- */
/* core.spawn                                                                */
/* ------------------------------------------------------------------------- */

typedef struct proc_box {
  struct moor__proc *p;
  int pid;                /* kept after the struct is gone */
} proc_box;

typedef struct moor__proc {
  moor *m;
  lua_State *L;
  uv_process_t proc;
  uv_pipe_t in, out, err;
  int handles;            /* handles initialised and not yet closed; freed at 0 */
  int pid;
  int exited, out_eof, reported, closing;
  int64_t status;
  int term_signal;
  int line_ref, exit_ref; /* on_line, on_exit (LUA_NOREF once dropped) */
  char *line;             /* the stdout line being read (MOOR_HARNESS_LINE_MAX + 1 bytes) */
  size_t line_len;
  int line_cut;           /* the current line went over the cap: drop up to its "\n" */
  char tail[MOOR_HARNESS_STDERR_TAIL]; /* ring of the last stderr bytes */
  size_t tail_pos, tail_len;
  char *stdin_buf;
  uv_write_t wreq;
  char rbuf[64 * 1024];
  proc_box *box;
  struct moor__proc *next, **prev;
} moor__proc;

static void proc_unlink(moor__proc *p) {
  if (!p->prev) return;
  *p->prev = p->next;
  if (p->next) p->next->prev = p->prev;
  p->prev = NULL;
  p->next = NULL;
}

static void proc_unref(moor__proc *p) {
  if (p->line_ref != LUA_NOREF) luaL_unref(p->L, LUA_REGISTRYINDEX, p->line_ref);
  if (p->exit_ref != LUA_NOREF) luaL_unref(p->L, LUA_REGISTRYINDEX, p->exit_ref);
  p->line_ref = p->exit_ref = LUA_NOREF;
}

static void proc_handle_closed(uv_handle_t *h) {
  moor__proc *p = h->data;
  if (--p->handles > 0) return;
  if (p->box) p->box->p = NULL;
  free(p->line);
  free(p->stdin_buf);
  free(p);
}

static void close_if_open(uv_handle_t *h) {
  if (h->data && !uv_is_closing(h)) uv_close(h, proc_handle_closed);
}

/* Close every handle: the struct goes when the last one has closed. */
static void proc_close(moor__proc *p) {
  if (p->closing) return;
  p->closing = 1;
  proc_unlink(p);
  close_if_open((uv_handle_t *)&p->proc);
  close_if_open((uv_handle_t *)&p->in);
  close_if_open((uv_handle_t *)&p->out);
  close_if_open((uv_handle_t *)&p->err);
}

static void tail_add(moor__proc *p, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p->tail[p->tail_pos] = s[i];
    p->tail_pos = (p->tail_pos + 1) % sizeof p->tail;
  }
  p->tail_len = p->tail_len + n > sizeof p->tail ? sizeof p->tail : p->tail_len + n;
}

/* What stderr holds now without waiting (a grandchild may keep it open). */
static void drain_stderr(moor__proc *p) {
  uv_os_fd_t fd;
  if (!p->err.data || uv_is_closing((uv_handle_t *)&p->err) || uv_fileno((uv_handle_t *)&p->err, &fd)) return;
  for (int i = 0; i < 64; i++) {
    ssize_t n = read(fd, p->rbuf, sizeof p->rbuf);
    if (n <= 0) break;
    tail_add(p, p->rbuf, (size_t)n);
  }
}

/* After exit and stdout's EOF: on_exit(status, signal, err_tail), once. */
static void proc_maybe_report(moor__proc *p) {
  if (!p->exited || !p->out_eof || p->reported || p->closing) return;
  p->reported = 1;
  drain_stderr(p);
  lua_State *L = p->L;
  int ref = p->exit_ref;
  p->exit_ref = LUA_NOREF;
  proc_unref(p);
  proc_close(p);
  if (ref == LUA_NOREF) return;
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  luaL_unref(L, LUA_REGISTRYINDEX, ref);
  lua_pushinteger(L, (lua_Integer)p->status);
  lua_pushinteger(L, p->term_signal);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t start = (p->tail_pos + sizeof p->tail - p->tail_len) % sizeof p->tail;
  for (size_t i = 0; i < p->tail_len; i++) luaL_addchar(&b, p->tail[(start + i) % sizeof p->tail]);
  luaL_pushresult(&b);
  call_lua(L, 3, "process exit");
}

static void on_proc_exit(uv_process_t *h, int64_t status, int term_signal) {
  moor__proc *p = h->data;
  p->exited = 1;
  p->status = status;
  p->term_signal = term_signal;
  proc_maybe_report(p);
}

static void emit_line(moor__proc *p) {
  if (p->line_ref == LUA_NOREF) return;
  lua_rawgeti(p->L, LUA_REGISTRYINDEX, p->line_ref);
  lua_pushlstring(p->L, p->line, p->line_len);
  call_lua(p->L, 1, "process line");
}

static void proc_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  moor__proc *p = h->data;
  *buf = uv_buf_init(p->rbuf, sizeof p->rbuf);
}

static void on_stdout(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  moor__proc *p = s->data;
  if (n < 0) {
    if (p->line_len > 0 && !p->closing) emit_line(p); /* the last line, without "\n" */
    p->line_len = 0;
    uv_read_stop(s);
    p->out_eof = 1;
    proc_maybe_report(p);
    return;
  }
  for (ssize_t i = 0; i < n && !p->closing; i++) {
    char c = buf->base[i];
    if (c == '\n') {
      if (!p->line_cut) emit_line(p);
      p->line_len = 0;
      p->line_cut = 0;
    } else if (!p->line_cut) {
      p->line[p->line_len++] = c;
      if (p->line_len == MOOR_HARNESS_LINE_MAX) { /* over the cap: this much is the line */
        emit_line(p);
        p->line_len = 0;
        p->line_cut = 1;
      }
    }
  }
}

static void on_stderr(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  moor__proc *p = s->data;
  if (n < 0) {
    uv_read_stop(s);
    return;
  }
  tail_add(p, buf->base, (size_t)n);
}

static void on_stdin_written(uv_write_t *w, int status) {
  moor__proc *p = w->data;
  free(p->stdin_buf);
  p->stdin_buf = NULL;
  close_if_open((uv_handle_t *)&p->in); /* the child reads EOF */
}

/* Strings handed to uv_spawn, freed after it (it copies what the child needs). */
typedef struct {
  char **v;
  size_t n, cap;
} strv;

static int strv_push(strv *a, char *s) {
  if (!s) return -1;
  if (a->n + 2 > a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    char **v = realloc(a->v, cap * sizeof *v);
    if (!v) {
      free(s);
      return -1;
    }
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = s;
  a->v[a->n] = NULL;
  return 0;
}

static void strv_free(strv *a) {
  for (size_t i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

/* env's names and values are checked before anything is allocated (Lua may raise). */
static void check_env(lua_State *L, int env_idx) {
  lua_pushnil(L);
  while (lua_next(L, env_idx)) {
    size_t kl;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "spawn: env keys must be names");
    const char *k = lua_tolstring(L, -2, &kl);
    if (kl == 0 || strchr(k, '=')) luaL_error(L, "spawn: env name '%s' is not a name", k);
    if (lua_type(L, -1) != LUA_TSTRING && !(lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
      luaL_error(L, "spawn: env.%s must be a string or false", k);
    lua_pop(L, 1);
  }
}

/* The environment: the host's, minus the names env sets or removes, plus env's strings. */
static int build_env(lua_State *L, int env_idx, strv *out) {
  for (char **e = environ; *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    lua_pushlstring(L, *e, (size_t)(eq - *e));
    int t = lua_rawget(L, env_idx);
    lua_pop(L, 1);
    if (t != LUA_TNIL) continue;
    if (strv_push(out, strdup(*e))) return -1;
  }
  lua_pushnil(L);
  while (lua_next(L, env_idx)) {
    if (lua_type(L, -1) == LUA_TSTRING) {
      size_t kl, vl;
      const char *k = lua_tolstring(L, -2, &kl);
      const char *v = lua_tolstring(L, -1, &vl);
      char *str = malloc(kl + vl + 2);
      if (str) {
        memcpy(str, k, kl);
        str[kl] = '=';
        memcpy(str + kl + 1, v, vl + 1);
      }
      if (strv_push(out, str)) {
        lua_pop(L, 2);
        return -1;
      }
    }
    lua_pop(L, 1);
  }
  return 0;
}

/* A ref to tbl[name] (checked to be a function or nil), or LUA_NOREF. */
static int opt_ref(lua_State *L, int idx, const char *name) {
  if (lua_getfield(L, idx, name) == LUA_TNIL) {
    lua_pop(L, 1);
    return LUA_NOREF;
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* spawn{ argv, cwd?, env?, stdin?, shim?, on_line, on_exit } -> proc | nil, err */
static int l_spawn(lua_State *L) {
  moor *m = moor__self(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  strv args = {0}, env = {0};
  int have_env = 0;
  char pidbuf[32];
  const char *msg = "out of memory";
  if (lua_getfield(L, 1, "argv") != LUA_TTABLE) return luaL_error(L, "spawn: argv must be a list of strings");
  int argv_idx = lua_gettop(L);
  lua_Integer argc = (lua_Integer)lua_rawlen(L, argv_idx);
  if (argc < 1) return luaL_error(L, "spawn: argv must name a program");
  for (lua_Integer i = 1; i <= argc; i++) {
    if (lua_rawgeti(L, argv_idx, i) != LUA_TSTRING)
      return luaL_error(L, "spawn: argv[%d] must be a string", (int)i);
    lua_pop(L, 1);
  }
  const char *cwd = NULL;
  if (lua_getfield(L, 1, "cwd") != LUA_TNIL) cwd = luaL_checkstring(L, -1);
  const char *shim = NULL;
  if (lua_getfield(L, 1, "shim") != LUA_TNIL) shim = luaL_checkstring(L, -1);
  size_t stdin_len = 0;
  const char *stdin_s = NULL;
  if (lua_getfield(L, 1, "stdin") != LUA_TNIL) stdin_s = luaL_checklstring(L, -1, &stdin_len);
  int env_type = lua_getfield(L, 1, "env");
  int env_idx = lua_gettop(L);
  if (env_type != LUA_TNIL && env_type != LUA_TTABLE) return luaL_error(L, "spawn: env must be a table");
  if (env_type == LUA_TTABLE) check_env(L, env_idx);
  if (lua_getfield(L, 1, "on_line") != LUA_TNIL && !lua_isfunction(L, -1))
    return luaL_error(L, "spawn: on_line must be a function");
  if (lua_getfield(L, 1, "on_exit") != LUA_TNIL && !lua_isfunction(L, -1))
    return luaL_error(L, "spawn: on_exit must be a function");
  proc_box *box = lua_newuserdatauv(L, sizeof *box, 0); /* before the process: this may raise */
  box->p = NULL;
  box->pid = 0;
  luaL_setmetatable(L, PROC_MT);
  int box_idx = lua_gettop(L);

  /* Everything Lua can raise on is done: from here on allocations are freed on every path. */
  if (shim) {
    snprintf(pidbuf, sizeof pidbuf, "%d", (int)getpid());
    if (strv_push(&args, strdup(shim)) || strv_push(&args, strdup("--exec")) ||
        strv_push(&args, strdup(pidbuf)) || strv_push(&args, strdup("--")))
      goto fail;
  }
  for (lua_Integer i = 1; i <= argc; i++) {
    lua_rawgeti(L, argv_idx, i);
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    int rc = strv_push(&args, dup_n(s, n));
    lua_pop(L, 1);
    if (rc) goto fail;
  }
  if (env_type == LUA_TTABLE) {
    if (build_env(L, env_idx, &env)) goto fail;
    have_env = 1;
  }

  moor__proc *p = calloc(1, sizeof *p);
  if (!p) goto fail;
  p->line = malloc(MOOR_HARNESS_LINE_MAX + 1);
  if (!p->line || (stdin_s && !(p->stdin_buf = dup_n(stdin_s, stdin_len)))) {
    free(p->line);
    free(p);
    goto fail;
  }
  p->m = m;
  p->L = main_thread(L);
  p->line_ref = p->exit_ref = LUA_NOREF;

  ignore_sigpipe();
  uv_stdio_container_t stdio[3];
  if (stdin_s) {
    uv_pipe_init(&m->loop, &p->in, 0);
    p->in.data = p;
    p->handles++;
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&p->in;
  } else {
    stdio[0].flags = UV_IGNORE; /* /dev/null */
  }
  uv_pipe_init(&m->loop, &p->out, 0);
  p->out.data = p;
  uv_pipe_init(&m->loop, &p->err, 0);
  p->err.data = p;
  p->handles += 2;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&p->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&p->err;

  uv_process_options_t opt = {0};
  opt.exit_cb = on_proc_exit;
  opt.file = args.v[0];
  opt.args = args.v;
  opt.env = have_env ? env.v : NULL;
  opt.cwd = cwd;
  opt.flags = UV_PROCESS_DETACHED; /* setsid(): the child leads its own group */
  opt.stdio_count = 3;
  opt.stdio = stdio;
  p->proc.data = p;
  int rc = uv_spawn(&m->loop, &p->proc, &opt);
  p->handles++; /* the process handle is initialised even when the spawn failed */
  strv_free(&args);
  strv_free(&env);
  args = (strv){0};
  env = (strv){0};
  if (rc) {
    proc_close(p);
    lua_pushnil(L);
    lua_rawgeti(L, argv_idx, 1);
    lua_pushfstring(L, "cannot run %s: %s", lua_tostring(L, -1), uv_strerror(rc));
    lua_remove(L, -2);
    return 2;
  }
  p->pid = p->proc.pid;
  p->line_ref = opt_ref(L, 1, "on_line");
  p->exit_ref = opt_ref(L, 1, "on_exit");
  p->next = m->procs;
  if (p->next) p->next->prev = &p->next;
  p->prev = &m->procs;
  m->procs = p;
  uv_read_start((uv_stream_t *)&p->out, proc_alloc, on_stdout);
  uv_read_start((uv_stream_t *)&p->err, proc_alloc, on_stderr);
  if (stdin_s) {
    uv_buf_t b = uv_buf_init(p->stdin_buf, (unsigned)stdin_len);
    p->wreq.data = p;
    if (uv_write(&p->wreq, (uv_stream_t *)&p->in, &b, 1, on_stdin_written)) {
      close_if_open((uv_handle_t *)&p->in);
    }
  }
  box->p = p;
  box->pid = p->pid;
  p->box = box;
  lua_pushvalue(L, box_idx);
  return 1;

fail:
  strv_free(&args);
  strv_free(&env);
  lua_pushnil(L);
  lua_pushstring(L, msg);
  return 2;
}

static proc_box *check_proc(lua_State *L) { return luaL_checkudata(L, 1, PROC_MT); }

static int proc_pid(lua_State *L) {
  proc_box *b = check_proc(L);
  lua_pushinteger(L, b->pid);
  return 1;
}

static int proc_running(lua_State *L) {
  proc_box *b = check_proc(L);
  lua_pushboolean(L, b->p && !b->p->exited && !b->p->closing);
  return 1;
}

/* Signal the group pgid; the leader itself too while it has not been reaped
 * (after that its pid may be another process's). */
static int kill_pg(int pid, int sig, int leader_alive) {
  int ok = kill(-pid, sig) == 0;
  int e = errno;
  if (leader_alive && kill(pid, sig) == 0) ok = 1;
  else if (!ok) errno = e;
  return ok;
}

static int proc_kill(lua_State *L) {
  proc_box *b = check_proc(L);
  int sig = lua_isnoneornil(L, 2) ? SIGTERM : signal_arg(L, 2);
  moor__proc *p = b->p;
  if (!p || p->pid <= 0) {
    lua_pushnil(L);
    lua_pushliteral(L, "the process was reported and is gone");
    return 2;
  }
  if (!kill_pg(p->pid, sig, !p->exited)) {
    lua_pushnil(L);
    lua_pushfstring(L, "kill %d: %s", p->pid, strerror(errno));
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int proc_gc(lua_State *L) {
  proc_box *b = check_proc(L);
  if (b->p) b->p->box = NULL; /* the process goes on; its struct is still owned by m->procs */
  b->p = NULL;
  return 0;
}

/* pid_start(pid) -> field 22 (starttime) of /proc/<pid>/stat | nil */
static int l_pid_start(lua_State *L) {
  lua_Integer pid = luaL_checkinteger(L, 1);
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  int fd = pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0) {
    lua_pushnil(L);
    return 1;
  }
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) {
    lua_pushnil(L);
    return 1;
  }
  buf[n] = '\0';
  char *s = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
  if (!s) {
    lua_pushnil(L);
    return 1;
  }
  s++;
  for (int field = 3; field <= 22; field++) { /* fields after comm: 3 (state) ... */
    while (*s == ' ') s++;
    char *end = s;
    while (*end && *end != ' ') end++;
    if (end == s) break;
    if (field == 22) {
      lua_pushlstring(L, s, (size_t)(end - s));
      return 1;
    }
    s = end;
  }
  lua_pushnil(L);
  return 1;
}

/* kill_group(pid, sig) -> bool: kill(-pid, sig), then kill(pid, sig) */
static int l_kill_group(lua_State *L) {
  lua_Integer pid = luaL_checkinteger(L, 1);
  int sig = lua_isnoneornil(L, 2) ? SIGTERM : signal_arg(L, 2);
  if (pid <= 1 || pid > INT_MAX) {
    lua_pushboolean(L, 0);
    return 1;
  }
  lua_pushboolean(L, kill_pg((int)pid, sig, 1));
  return 1;
}

/* ------------------------------------------------------------------------- */
/* core.unix_listen                                                          */
/* ------------------------------------------------------------------------- */

typedef struct usrv_box {
  struct moor__usrv *s;
} usrv_box;

typedef struct uconn uconn;

typedef struct moor__usrv {
  moor *m;
  lua_State *L;
  uv_pipe_t pipe;
  char *path;
  int request_ref, bad_ref;
  char *full;             /* full_response .. "\n" */
  size_t full_len;
  size_t max_request;
  lua_Integer max_connections;
  uint64_t lifetime_ms;
  lua_Integer count;      /* connections that count toward the limit */
  uconn *conns;
  int closed;
  usrv_box *box;
  struct moor__usrv *next, **prev;
} moor__usrv;

enum { C_READING, C_WAITING, C_REPLYING, C_CLOSING };

struct uconn {
  moor__usrv *s;          /* NULL once the server has let it go */
  uv_pipe_t pipe;
  uv_timer_t timer;
  int handles;
  lua_Integer id;
  int state;
  int counted;
  int discard;            /* over max_request: read (and drop) to the end, then answer */
  const char *bad;        /* else answered bad-request for this reason (another user) */
  char *buf;
  size_t len, cap;
  char *wbuf;
  uv_write_t wreq;
  uconn *next, **prev;
};

static lua_Integer next_conn_id = 0;

static void conn_closed(uv_handle_t *h) {
  uconn *c = h->data;
  if (--c->handles > 0) return;
  free(c->buf);
  free(c->wbuf);
  free(c);
}

static void conn_close(uconn *c) {
  if (c->state == C_CLOSING) return;
  c->state = C_CLOSING;
  if (c->prev) {
    *c->prev = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = NULL;
  }
  if (c->s && c->counted) c->s->count--;
  c->s = NULL;
  uv_close((uv_handle_t *)&c->pipe, conn_closed);
  uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void on_written(uv_write_t *w, int status) {
  uconn *c = w->data;
  free(c->wbuf);
  c->wbuf = NULL;
  conn_close(c);
}

/* Write text (plus "\n" unless it ends with one), then close. 0, or the
 * write's error (the peer is gone: closed here). */
static int conn_answer(uconn *c, const char *text, size_t len) {
  int nl = len == 0 || text[len - 1] != '\n';
  char *w = malloc(len + 1);
  if (!w) {
    conn_close(c);
    return UV_ENOMEM;
  }
  memcpy(w, text, len);
  if (nl) w[len++] = '\n';
  uv_read_stop((uv_stream_t *)&c->pipe);
  c->state = C_REPLYING;
  uv_buf_t b = uv_buf_init(w, (unsigned)len);
  int n = uv_try_write((uv_stream_t *)&c->pipe, &b, 1);
  if (n < 0 && n != UV_EAGAIN) {
    free(w);
    conn_close(c);
    return n;
  }
  if (n == (int)len) {
    free(w);
    conn_close(c);
    return 0;
  }
  size_t done = n > 0 ? (size_t)n : 0;
  c->wbuf = w;
  b = uv_buf_init(w + done, (unsigned)(len - done));
  c->wreq.data = c;
  int rc = uv_write(&c->wreq, (uv_stream_t *)&c->pipe, &b, 1, on_written);
  if (rc) {
    free(c->wbuf);
    c->wbuf = NULL;
    conn_close(c);
  }
  return rc;
}

/* The bad-request answer for reason: bad_response(reason) when given, else the default line. */
static void conn_bad(uconn *c, const char *reason) {
  moor__usrv *s = c->s;
  lua_State *L = s->L;
  if (s->bad_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->bad_ref);
    lua_pushstring(L, reason);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING && c->state != C_CLOSING) {
      size_t n;
      const char *t = lua_tolstring(L, -1, &n);
      conn_answer(c, t, n);
      lua_pop(L, 1);
      return;
    }
    if (lua_type(L, -1) == LUA_TSTRING) fprintf(stderr, "moor: bad_response callback: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    if (c->state == C_CLOSING) return;
  }
  char line[512];
  int n = snprintf(line, sizeof line,
                   "{\"v\":1,\"code\":\"bad-request\",\"exit\":8,\"stderr\":\"bad-request: %s\\n\"}", reason);
  conn_answer(c, line, (size_t)n);
}

/* The request is in (up to its "\n", or to EOF). */
static void conn_request(uconn *c, size_t len) {
  moor__usrv *s = c->s;
  uv_read_stop((uv_stream_t *)&c->pipe);
  c->state = C_WAITING;
  if (c->bad) {
    conn_bad(c, c->bad);
    return;
  }
  if (c->discard) {
    char reason[96];
    snprintf(reason, sizeof reason, "the request is over %zu bytes", s->max_request);
    conn_bad(c, reason);
    return;
  }
  if (len == 0) {
    conn_bad(c, "empty request");
    return;
  }
  lua_State *L = s->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->request_ref);
  lua_pushinteger(L, c->id);
  lua_pushlstring(L, c->buf, len);
  free(c->buf); /* the request is Lua's now */
  c->buf = NULL;
  c->len = c->cap = 0;
  call_lua(L, 2, "unix request");
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  uconn *c = h->data;
  size_t want = 64 * 1024;
  if (c->discard) c->len = 0;
  if (c->cap - c->len < want) {
    size_t cap = c->cap ? c->cap : want;
    while (cap - c->len < want) cap *= 2;
    char *b = realloc(c->buf, cap);
    if (!b) {
      *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
      return;
    }
    c->buf = b;
    c->cap = cap;
  }
  *buf = uv_buf_init(c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void conn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  uconn *c = st->data;
  if (c->state != C_READING || !c->s) return;
  if (n == UV_EOF) {
    conn_request(c, c->len);
    return;
  }
  if (n < 0) { /* reset, or no memory: nothing to answer */
    conn_close(c);
    return;
  }
  char *nl = memchr(c->buf + c->len, '\n', (size_t)n);
  if (nl) {
    size_t len = (size_t)(nl - c->buf);
    if (len > c->s->max_request) c->discard = 1;
    conn_request(c, c->discard ? 0 : len);
    return;
  }
  c->len += (size_t)n;
  if (!c->discard && c->len > c->s->max_request) c->discard = 1;
}

static void conn_expired(uv_timer_t *t) { conn_close(t->data); }

static void on_connection(uv_stream_t *server, int status) {
  moor__usrv *s = server->data;
  if (status < 0 || s->closed) return;
  uconn *c = calloc(1, sizeof *c);
  if (!c) return; /* left in the backlog; the next accept may do */
  uv_pipe_init(&s->m->loop, &c->pipe, 0);
  c->pipe.data = c;
  uv_timer_init(&s->m->loop, &c->timer);
  c->timer.data = c;
  c->handles = 2;
  c->s = s;
  c->id = ++next_conn_id;
  if (uv_accept(server, (uv_stream_t *)&c->pipe)) {
    c->state = C_CLOSING;
    uv_close((uv_handle_t *)&c->pipe, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
    return;
  }
  c->next = s->conns;
  if (c->next) c->next->prev = &c->next;
  c->prev = &s->conns;
  s->conns = c;
  if (s->count >= s->max_connections) {
    /* Answered now, never dropped, and not kept: a connection over the
     * limit holds nothing while its client sends or idles. (The client reads
     * the answer before the error a close over its unread request gives.) */
    conn_answer(c, s->full, s->full_len);
    return;
  }
  c->counted = 1;
  s->count++;
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) || cred.uid != geteuid())
    c->bad = "the connection is not from this workflow's user";
  uv_timer_start(&c->timer, conn_expired, s->lifetime_ms, 0);
  uv_read_start((uv_stream_t *)&c->pipe, conn_alloc, conn_read);
}

static void usrv_closed(uv_handle_t *h) {
  moor__usrv *s = h->data;
  if (s->box) s->box->s = NULL;
  free(s->path);
  free(s->full);
  free(s);
}

static void usrv_close(moor__usrv *s) {
  if (s->closed) return;
  s->closed = 1;
  while (s->conns) conn_close(s->conns);
  if (s->prev) {
    *s->prev = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = NULL;
  }
  if (s->request_ref != LUA_NOREF) luaL_unref(s->L, LUA_REGISTRYINDEX, s->request_ref);
  if (s->bad_ref != LUA_NOREF) luaL_unref(s->L, LUA_REGISTRYINDEX, s->bad_ref);
  s->request_ref = s->bad_ref = LUA_NOREF;
  if (s->path) unlink(s->path);
  uv_close((uv_handle_t *)&s->pipe, usrv_closed);
}

static lua_Integer opt_int(lua_State *L, int idx, const char *name, lua_Integer dflt, lua_Integer min) {
  lua_getfield(L, idx, name);
  lua_Integer v = luaL_optinteger(L, -1, dflt);
  lua_pop(L, 1);
  if (v < min) luaL_error(L, "unix_listen: %s must be at least %d", name, (int)min);
  return v;
}

/* unix_listen{ path, on_request, max_connections?, max_request?, lifetime_ms?,
 *              full_response, bad_response? } -> server | nil, err */
static int l_unix_listen(lua_State *L) {
  moor *m = moor__self(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "path");
  const char *path = luaL_checkstring(L, -1);
  lua_getfield(L, 1, "full_response");
  size_t full_len;
  const char *full = luaL_checklstring(L, -1, &full_len);
  lua_Integer max_conn = opt_int(L, 1, "max_connections", MOOR_HARNESS_MAX_CONNECTIONS, 1);
  lua_Integer max_req = opt_int(L, 1, "max_request", (lua_Integer)MOOR_HARNESS_MAX_REQUEST, 1);
  lua_Integer life = opt_int(L, 1, "lifetime_ms", MOOR_HARNESS_LIFETIME_MS, 1);
  if (lua_getfield(L, 1, "on_request") != LUA_TFUNCTION)
    return luaL_error(L, "unix_listen: on_request must be a function");
  int request_idx = lua_gettop(L);
  int t = lua_getfield(L, 1, "bad_response");
  int bad_idx = lua_gettop(L);
  if (t != LUA_TNIL && t != LUA_TFUNCTION) return luaL_error(L, "unix_listen: bad_response must be a function");
  struct sockaddr_un sun;
  if (strlen(path) >= sizeof sun.sun_path) {
    lua_pushnil(L);
    lua_pushfstring(L, "unix_listen: the socket path %s is over %d bytes", path, (int)sizeof sun.sun_path - 1);
    return 2;
  }

  usrv_box *box = lua_newuserdatauv(L, sizeof *box, 0); /* before the socket: this may raise */
  box->s = NULL;
  luaL_setmetatable(L, USRV_MT);
  int box_idx = lua_gettop(L);
  moor__usrv *s = calloc(1, sizeof *s);
  if (s) {
    s->path = strdup(path);
    s->full = malloc(full_len + 2);
  }
  if (!s || !s->path || !s->full) {
    if (s) {
      free(s->path);
      free(s->full);
    }
    free(s);
    lua_pushnil(L);
    lua_pushliteral(L, "out of memory");
    return 2;
  }
  memcpy(s->full, full, full_len);
  if (full_len == 0 || full[full_len - 1] != '\n') s->full[full_len++] = '\n';
  s->full[full_len] = '\0';
  s->full_len = full_len;
  s->m = m;
  s->L = main_thread(L);
  s->max_connections = max_conn;
  s->max_request = (size_t)max_req;
  s->lifetime_ms = (uint64_t)life;
  s->request_ref = s->bad_ref = LUA_NOREF;
  ignore_sigpipe();
  uv_pipe_init(&m->loop, &s->pipe, 0);
  s->pipe.data = s;
  if (unlink(path) != 0 && errno != ENOENT) {
    lua_pushnil(L);
    lua_pushfstring(L, "unix_listen: cannot remove %s: %s", path, strerror(errno));
    goto fail;
  }
  int rc = uv_pipe_bind(&s->pipe, path);
  if (rc == 0 && chmod(path, 0600) != 0) rc = uv_translate_sys_error(errno);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->pipe, 128, on_connection);
  if (rc) {
    unlink(path);
    lua_pushnil(L);
    lua_pushfstring(L, "unix_listen: %s: %s", path, uv_strerror(rc));
    goto fail;
  }
  if (t == LUA_TFUNCTION) {
    lua_pushvalue(L, bad_idx);
    s->bad_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_pushvalue(L, request_idx);
  s->request_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  s->next = m->usrvs;
  if (s->next) s->next->prev = &s->next;
  s->prev = &m->usrvs;
  m->usrvs = s;
  box->s = s;
  s->box = box;
  lua_pushvalue(L, box_idx);
  return 1;

fail:
  free(s->path);
  s->path = NULL;
  s->closed = 1;
  uv_close((uv_handle_t *)&s->pipe, usrv_closed);
  return 2;
}

static usrv_box *check_usrv(lua_State *L) { return luaL_checkudata(L, 1, USRV_MT); }

static int usrv_close_l(lua_State *L) {
  usrv_box *b = check_usrv(L);
  if (b->s) usrv_close(b->s);
  return 0;
}

static int usrv_count(lua_State *L) {
  usrv_box *b = check_usrv(L);
  lua_Integer n = 0;
  if (b->s && !b->s->closed)
    for (uconn *c = b->s->conns; c; c = c->next) n++;
  lua_pushinteger(L, n);
  return 1;
}

static int usrv_gc(lua_State *L) {
  usrv_box *b = check_usrv(L);
  if (b->s) {
    usrv_close(b->s);
    b->s->box = NULL;
  }
  b->s = NULL;
  return 0;
}

/* The connection id of an open connection whose request is in, or NULL. */
static uconn *find_conn(moor *m, lua_Integer id) {
  for (moor__usrv *s = m->usrvs; s; s = s->next)
    for (uconn *c = s->conns; c; c = c->next)
      if (c->id == id) return c;
  return NULL;
}

/* unix_reply(conn_id, text) -> true | false */
static int l_unix_reply(lua_State *L) {
  moor *m = moor__self(L);
  lua_Integer id = luaL_checkinteger(L, 1);
  size_t n;
  const char *text = luaL_checklstring(L, 2, &n);
  uconn *c = find_conn(m, id);
  if (!c || (c->state != C_WAITING && c->state != C_READING)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  char *w = malloc(n + 1);
  if (!w) return luaL_error(L, "out of memory");
  memcpy(w, text, n);
  w[n] = '\n'; /* always: text .. "\n" */
  int rc = conn_answer(c, w, n + 1);
  free(w);
  lua_pushboolean(L, rc == 0);
  return 1;
}

/* unix_hold(conn_id, ms) -> true | false: the connection lives ms more from now */
static int l_unix_hold(lua_State *L) {
  moor *m = moor__self(L);
  lua_Integer id = luaL_checkinteger(L, 1);
  lua_Integer ms = luaL_checkinteger(L, 2);
  uconn *c = find_conn(m, id);
  if (!c || c->state == C_CLOSING) {
    lua_pushboolean(L, 0);
    return 1;
  }
  uv_update_time(&m->loop);
  uv_timer_start(&c->timer, conn_expired, (uint64_t)(ms < 0 ? 0 : ms), 0);
  lua_pushboolean(L, 1);
  return 1;
}

/* wfa_path() -> path | nil, err: $MOOR_WFA, else moor-wfa beside the running
 * program or in its install prefix, else the build tree's (paths.c). */
static int l_wfa_path(lua_State *L) {
  char path[PATH_MAX];
  if (moor__wfa_path(path, sizeof path) == 0) {
    lua_pushstring(L, path);
    return 1;
  }
  lua_pushnil(L);
  lua_pushliteral(L, "the launcher moor-wfa was not found: set MOOR_WFA to its path, or install it beside moor");
  return 2;
}

void moor__harness_close(moor *m) {
  while (m->procs) {
    moor__proc *p = m->procs;
    if (p->pid > 0) kill_pg(p->pid, SIGKILL, !p->exited);
    proc_unref(p);
    proc_close(p); /* unlinks it */
  }
  while (m->usrvs) usrv_close(m->usrvs);
}

/* The metatables, made on first use of the table (each engine's state once). */
static void ensure_metatables(lua_State *L) {
  static const luaL_Reg proc_m[] = {{"pid", proc_pid}, {"kill", proc_kill}, {"running", proc_running}, {NULL, NULL}};
  static const luaL_Reg usrv_m[] = {{"close", usrv_close_l}, {"count", usrv_count}, {NULL, NULL}};
  if (luaL_newmetatable(L, PROC_MT)) {
    luaL_newlib(L, proc_m);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, proc_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, USRV_MT)) {
    luaL_newlib(L, usrv_m);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, usrv_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
}

static int l_spawn_entry(lua_State *L) {
  ensure_metatables(L);
  return l_spawn(L);
}

static int l_unix_listen_entry(lua_State *L) {
  ensure_metatables(L);
  return l_unix_listen(L);
}

const luaL_Reg moor__core_harness_fns[] = {
  {"spawn", l_spawn_entry},         {"pid_start", l_pid_start}, {"kill_group", l_kill_group},
  {"unix_listen", l_unix_listen_entry}, {"unix_reply", l_unix_reply}, {"unix_hold", l_unix_hold},
  {"wfa_path", l_wfa_path},         {NULL, NULL}};
