#include "lock.h"
#include "moor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

/* The holder writes "pid N, <command line>, since <time>" into the lock file
 * so a refused process can say exactly who holds the database. */
static void describe_self(char *buf, size_t len) {
  char cmd[256] = "";
  FILE *f = fopen("/proc/self/cmdline", "r");
  if (f) {
    size_t n = fread(cmd, 1, sizeof cmd - 1, f);
    fclose(f);
    for (size_t i = 0; i + 1 < n; i++)
      if (cmd[i] == 0) cmd[i] = ' ';
    cmd[n] = 0;
  }
  char when[32];
  time_t now = time(NULL);
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  snprintf(buf, len, "pid %ld (%s), since %s", (long)getpid(), cmd, when);
}

int moor_lock_acquire(const char *db_path, int *fd_out, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s.lock", db_path);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open lock file %s: %s", path, strerror(errno));
    return MOOR_EIO;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[512] = "";
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = 0;
    close(fd);
    snprintf(err, errlen,
             "database %s is in use by another moor process: %s. Stop that process "
             "(or use --db for another file) and try again",
             db_path, *holder ? holder : "unknown holder");
    return MOOR_ELOCKED;
  }
  char me[512];
  describe_self(me, sizeof me);
  if (ftruncate(fd, 0) == 0 && pwrite(fd, me, strlen(me), 0) < 0) { /* best effort */ }
  *fd_out = fd;
  return 0;
}

void moor_lock_release(int fd) {
  if (fd >= 0) close(fd); /* closing drops the flock */
}

void moor_lock_note_url(int fd, const char *url) {
  char line[1100];
  int n = snprintf(line, sizeof line, "\nurl=%s\n", url);
  off_t end = lseek(fd, 0, SEEK_END);
  if (end >= 0 && n > 0 && pwrite(fd, line, (size_t)n, end) < 0) { /* best effort */ }
}

int moor_lock_server_url(const char *db_path, char *url, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s.lock", db_path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return MOOR_ENOTFOUND;
  /* A lock we can take means nobody holds it: no live server. */
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    close(fd);
    return MOOR_ENOTFOUND;
  }
  char buf[2048];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
  char *u = strstr(buf, "\nurl=");
  if (!u) return MOOR_ENOTFOUND;
  u += 5;
  size_t k = strcspn(u, "\n");
  if (k == 0 || k >= len) return MOOR_ENOTFOUND;
  memcpy(url, u, k);
  url[k] = 0;
  return 0;
}
