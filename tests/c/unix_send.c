/* unix_send <socket> [--vanish]: a raw client of a core.unix_listen socket
 * for tests/lua/harness_core_spec.lua, sending what moor-wfa never would.
 * Sends standard input as it is (maybe empty, maybe without "\n"), then
 * half-closes and copies the response to standard output. With --vanish it
 * exits right after sending, without reading: a client gone before its
 * answer. Exit 0, or 2 when it cannot connect. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: unix_send <socket> [--vanish]\n");
    return 2;
  }
  int vanish = argc > 2 && strcmp(argv[2], "--vanish") == 0;
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  if (strlen(argv[1]) >= sizeof sun.sun_path) return 2;
  strcpy(sun.sun_path, argv[1]);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof sun) != 0) {
    fprintf(stderr, "unix_send: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  char buf[65536];
  ssize_t n;
  while ((n = read(0, buf, sizeof buf)) > 0) {
    for (ssize_t off = 0; off < n;) {
      ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
      if (w <= 0) goto sent; /* answered and closed early: read the answer */
      off += w;
    }
  }
sent:
  if (vanish) return 0;
  shutdown(fd, SHUT_WR);
  while ((n = read(fd, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)n, stdout);
  return 0;
}
