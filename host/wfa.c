/* moor-wfa: the launcher a harness agent runs from its shell (issue 11),
 * through the per-agent `wfa` file moor writes:
 *
 *   exec '/abs/moor-wfa' '/abs/<dir>/s' '<JSON-taught tools>' "$@"
 *
 *   moor-wfa <socket> <json-tools> [args...]
 *     One request line {"v":1,"argv":[args...],"stdin":"..."} to the
 *     workflow's Unix socket, half-close, one response line
 *     {"v":1,"code":...,"exit":n,"stdout"?,"stderr"?}: stdout and stderr
 *     written exactly, exit status `exit`. Standard input is read only for
 *     `tool <name>` with name among json-tools, and for `result` alone.
 *   moor-wfa --exec <pid> -- prog [args...]
 *     core.spawn's shim (harness.c): the harness dies with the host
 *     (PR_SET_PDEATHSIG), and does not start if the host is already gone.
 *
 * Its own small program (libc and jansson): its start-up is part of every
 * tool call's round trip. Exit codes are lua/moor/harness/teach.lua's. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "moorconf.h"

enum { EXIT_TIMED_OUT = 6, EXIT_TOO_MANY = 7, EXIT_BAD_REQUEST = 8, EXIT_UNREACHABLE = 9 };

static void write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
  write_all(2, msg, (size_t)n);
  return code;
}

/* --exec <pid> -- prog args...: exec prog, killed when the host dies. */
static int shim(int argc, char **argv) {
  if (argc < 5 || strcmp(argv[3], "--") != 0) return fail(127, "usage: moor-wfa --exec <pid> -- prog [args...]\n");
  pid_t host = (pid_t)strtol(argv[2], NULL, 10);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return fail(127, "moor-wfa: prctl: %s\n", strerror(errno));
  if (getppid() != host) return 127; /* the host went before the signal was armed */
  execvp(argv[4], argv + 4);
  return fail(127, "moor-wfa: cannot run %s: %s\n", argv[4], strerror(errno));
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Standard input, up to MOOR_WFA_STDIN_MAX within MOOR_WFA_STDIN_MS. 0 and
 * *out (malloc'd) or an exit code (the message written). */
static int read_stdin(char **out, size_t *out_len) {
  size_t cap = 64 * 1024, len = 0;
  char *buf = malloc(cap);
  if (!buf) return fail(EXIT_BAD_REQUEST, "bad-request: out of memory reading standard input; nothing was done\n");
  long long deadline = now_ms() + MOOR_WFA_STDIN_MS;
  for (;;) {
    long long left = deadline - now_ms();
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    int r = left > 0 ? poll(&pfd, 1, (int)left) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      free(buf);
      return fail(EXIT_BAD_REQUEST,
                  "bad-request: standard input took over %d s; nothing was done (end the heredoc, or pass "
                  "the value as an argument)\n",
                  MOOR_WFA_STDIN_MS / 1000);
    }
    if (len == cap) {
      char *b = realloc(buf, cap * 2);
      if (!b) {
        free(buf);
        return fail(EXIT_BAD_REQUEST, "bad-request: out of memory reading standard input; nothing was done\n");
      }
      buf = b;
      cap *= 2;
    }
    ssize_t n = read(0, buf + len, cap - len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      free(buf);
      return fail(EXIT_BAD_REQUEST, "bad-request: cannot read standard input: %s; nothing was done\n",
                  strerror(errno));
    }
    if (n == 0) break;
    len += (size_t)n;
    if (len > MOOR_WFA_STDIN_MAX) {
      free(buf);
      return fail(EXIT_BAD_REQUEST, "bad-request: standard input is over %zu MiB; nothing was done\n",
                  MOOR_WFA_STDIN_MAX >> 20);
    }
  }
  *out = buf;
  *out_len = len;
  return 0;
}

static int word_in(const char *word, const char *list) {
  size_t n = strlen(word);
  for (const char *p = list; *p;) {
    while (*p == ' ') p++;
    const char *e = p;
    while (*e && *e != ' ') e++;
    if ((size_t)(e - p) == n && n > 0 && memcmp(p, word, n) == 0) return 1;
    p = e;
  }
  return 0;
}

/* The request line (malloc'd, with its "\n"), or an exit code. */
static int build_request(int nargs, char **args, const char *in, size_t in_len, char **line) {
  json_t *req = json_object(), *argv = json_array();
  int rc = 0;
  if (!req || !argv) {
    json_decref(req);
    json_decref(argv);
    return fail(EXIT_BAD_REQUEST, "bad-request: out of memory; nothing was sent\n");
  }
  json_object_set_new(req, "v", json_integer(1));
  json_object_set_new(req, "argv", argv);
  for (int i = 0; i < nargs && !rc; i++) {
    json_t *s = json_stringn(args[i], strlen(args[i]));
    if (!s) rc = fail(EXIT_BAD_REQUEST, "bad-request: argument %d is not UTF-8; nothing was sent\n", i + 1);
    else json_array_append_new(argv, s);
  }
  if (!rc && in) {
    json_t *s = json_stringn(in, in_len);
    if (!s) rc = fail(EXIT_BAD_REQUEST, "bad-request: standard input is not UTF-8; nothing was sent\n");
    else json_object_set_new(req, "stdin", s);
  }
  if (!rc) {
    char *text = json_dumps(req, JSON_COMPACT);
    size_t n = text ? strlen(text) : 0;
    *line = text ? malloc(n + 2) : NULL;
    if (!*line) rc = fail(EXIT_BAD_REQUEST, "bad-request: out of memory; nothing was sent\n");
    else {
      memcpy(*line, text, n);
      (*line)[n] = '\n';
      (*line)[n + 1] = '\0';
    }
    free(text);
  }
  json_decref(req);
  return rc;
}

static int connect_socket(const char *path) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sun.sun_path)
    return -fail(EXIT_UNREACHABLE, "unreachable: the workflow's socket path %s is too long\n", path);
  strcpy(sun.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -fail(EXIT_UNREACHABLE, "unreachable: socket: %s\n", strerror(errno));
  /* A full backlog makes connect() wait this long, then fail with EAGAIN. */
  struct timeval tv = {.tv_sec = MOOR_WFA_CONNECT_MS / 1000, .tv_usec = (MOOR_WFA_CONNECT_MS % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int r;
  do r = connect(fd, (struct sockaddr *)&sun, sizeof sun);
  while (r != 0 && errno == EINTR);
  if (r == 0) {
    struct timeval zero = {0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof zero);
    return fd;
  }
  int e = errno;
  close(fd);
  char dir[sizeof sun.sun_path];
  strcpy(dir, path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) *slash = '\0';
  if (e == EPERM || e == EACCES)
    return -fail(EXIT_UNREACHABLE,
                 "unreachable: the connection to the workflow's socket %s was refused (%s): the harness's "
                 "sandbox blocks Unix sockets. For Codex set sandbox_workspace_write.network_access = true "
                 "(codex -c sandbox_workspace_write.network_access=true); for Claude Code add %s to "
                 "sandbox.network.allowUnixSockets.\n",
                 path, strerror(e), dir);
  if (e == ENOENT || e == ECONNREFUSED)
    return -fail(EXIT_UNREACHABLE,
                 "unreachable: the workflow's socket %s is not there: %s (the agent's turn may have ended)\n",
                 path, strerror(e));
  if (e == EAGAIN)
    return -fail(EXIT_TOO_MANY, "too-many-connections: the workflow has too many calls open; call again\n");
  return -fail(EXIT_UNREACHABLE, "unreachable: cannot connect to the workflow's socket %s: %s\n", path,
               strerror(e));
}

/* Write the response's stdout and stderr; its exit status, or an exit code. */
static int answer(const char *resp, size_t len) {
  json_error_t jerr;
  json_t *r = json_loadb(resp, len, JSON_ALLOW_NUL, &jerr);
  json_t *v = r ? json_object_get(r, "v") : NULL;
  json_t *ex = r ? json_object_get(r, "exit") : NULL;
  json_t *out = r ? json_object_get(r, "stdout") : NULL;
  json_t *err = r ? json_object_get(r, "stderr") : NULL;
  if (!json_is_object(r) || !json_is_integer(v) || json_integer_value(v) != 1 || !json_is_integer(ex) ||
      json_integer_value(ex) < 0 || json_integer_value(ex) > 255 || (out && !json_is_string(out)) ||
      (err && !json_is_string(err))) {
    json_decref(r);
    return fail(EXIT_BAD_REQUEST,
                "bad-request: the workflow's answer is not a version 1 response this launcher reads; the "
                "call may have run\n");
  }
  int code = (int)json_integer_value(ex);
  if (out) write_all(1, json_string_value(out), json_string_length(out));
  if (err) write_all(2, json_string_value(err), json_string_length(err));
  json_decref(r);
  return code;
}

static int client(int argc, char **argv) {
  if (argc < 3) return fail(EXIT_BAD_REQUEST, "usage: moor-wfa <socket> <json-tools> [args...]\n");
  const char *path = argv[1], *json_tools = argv[2];
  int nargs = argc - 3;
  char **args = argv + 3;
  int wants_stdin = (nargs == 2 && strcmp(args[0], "tool") == 0 && word_in(args[1], json_tools)) ||
                    (nargs == 1 && strcmp(args[0], "result") == 0);
  char *in = NULL, *line = NULL, *resp = NULL;
  size_t in_len = 0;
  int rc = 0;
  if (wants_stdin && !isatty(0) && fcntl(0, F_GETFD) != -1) rc = read_stdin(&in, &in_len);
  if (!rc) rc = build_request(nargs, args, in, in_len, &line);
  free(in);
  if (rc) return rc;
  int fd = connect_socket(path);
  if (fd < 0) {
    free(line);
    return -fd;
  }
  size_t n = strlen(line), off = 0;
  while (off < n) { /* a refusal may close before reading it all: read the answer anyway */
    ssize_t w = send(fd, line + off, n - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  free(line);
  shutdown(fd, SHUT_WR);
  size_t cap = 16 * 1024, len = 0;
  resp = malloc(cap);
  if (!resp) {
    close(fd);
    return fail(EXIT_BAD_REQUEST, "bad-request: out of memory; the call may have run\n");
  }
  for (;;) {
    if (len == cap) {
      if (cap > MOOR_WFA_RESPONSE_MAX) break;
      char *b = realloc(resp, cap * 2);
      if (!b) break;
      resp = b;
      cap *= 2;
    }
    ssize_t r = read(fd, resp + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd);
  if (len > MOOR_WFA_RESPONSE_MAX)
    rc = fail(EXIT_BAD_REQUEST, "bad-request: the workflow's answer is over %zu bytes; the call may have run\n",
              (size_t)MOOR_WFA_RESPONSE_MAX);
  else if (len == 0)
    rc = fail(EXIT_TIMED_OUT, "timed-out: the workflow did not answer in time; the call may have run\n");
  else
    rc = answer(resp, len);
  free(resp);
  return rc;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--exec") == 0) return shim(argc, argv);
  return client(argc, argv);
}
