#include "lock.h"
#include "moor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The holder writes "pid=N\nstarted=<time>\n" (and later "url=<url>\n")
 * into the lock file, so a refused process can say who holds the database
 * and the CLI can find a running server. Nothing else: the command line
 * (which can carry a tool's input, secrets included) is never written. The
 * file is 0600, like the database. */
static void describe_self(char *buf, size_t len) {
  char when[32];
  time_t now = time(NULL);
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  snprintf(buf, len, "pid=%ld\nstarted=%s\n", (long)getpid(), when);
}

/* The value of "key=" at the start of a line of buf, into out ("" if none). */
static void note_field(const char *buf, const char *key, char *out, size_t len) {
  size_t klen = strlen(key);
  out[0] = 0;
  for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, key, klen) || p[klen] != '=') continue;
    p += klen + 1;
    size_t n = strcspn(p, "\r\n");
    if (n >= len) n = len - 1;
    /* Only printable ASCII reaches a message. */
    for (size_t i = 0; i < n; i++) out[i] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
    out[n] = 0;
    return;
  }
}

int moor_lock_acquire(const char *db_path, int *fd_out, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s.lock", db_path);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open lock file %s: %s", path, strerror(errno));
    return MOOR_EIO;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[2048] = "", pid[32], started[64], url[1100], who[1300];
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = 0;
    close(fd);
    note_field(holder, "pid", pid, sizeof pid);
    note_field(holder, "started", started, sizeof started);
    note_field(holder, "url", url, sizeof url);
    if (!pid[0]) snprintf(who, sizeof who, "unknown holder");
    else snprintf(who, sizeof who, "pid %s%s%s%s%s", pid, started[0] ? ", started " : "", started,
                  url[0] ? ", serving " : "", url);
    snprintf(err, errlen,
             "database %s is in use by another moor process: %s. Stop that process "
             "(or use --db for another file) and try again",
             db_path, who);
    return MOOR_ELOCKED;
  }
  /* An older moor created it 0644: tighten it (we hold it, so we may). */
  if (fchmod(fd, 0600) != 0) { /* not ours to change: still usable */ }
  char me[128];
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
  int n = snprintf(line, sizeof line, "url=%s\n", url);
  off_t end = lseek(fd, 0, SEEK_END);
  if (end >= 0 && n > 0 && n < (int)sizeof line && pwrite(fd, line, (size_t)n, end) < 0) { /* best effort */ }
}

int moor_lock_server_url(const char *db_path, char *url, size_t len, unsigned *owner) {
  char path[4096];
  snprintf(path, sizeof path, "%s.lock", db_path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return MOOR_ENOTFOUND;
  /* A lock we can take means nobody holds it: no live server. */
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    close(fd);
    return MOOR_ENOTFOUND;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return MOOR_ENOTFOUND;
  }
  if (owner) *owner = (unsigned)st.st_uid;
  char buf[2048];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
  char u[1100];
  note_field(buf, "url", u, sizeof u);
  size_t k = strlen(u);
  if (k == 0 || k >= len) return MOOR_ENOTFOUND;
  memcpy(url, u, k + 1);
  return 0;
}
