/* faultfs: an LD_PRELOAD shim for the storage-fault tests. While the file
 * named by $MOOR_FAULT_TRIGGER exists, every write to a file whose name ends
 * in "-wal" fails with ENOSPC, as on a full disk: a commit (or a start-up
 * write check) fails, and succeeds again once the trigger is removed.
 *
 * With AddressSanitizer the ASan runtime must come first in LD_PRELOAD
 * ("$ASAN_LIB:$SHIM"); its interceptors then call these through RTLD_NEXT. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int is_wal(int fd) {
  const char *trigger = getenv("MOOR_FAULT_TRIGGER");
  if (!trigger || !*trigger || access(trigger, F_OK) != 0) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n < 4) return 0;
  path[n] = 0;
  return strcmp(path + n - 4, "-wal") == 0;
}

ssize_t write(int fd, const void *buf, size_t len) {
  static ssize_t (*real)(int, const void *, size_t);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "write");
  if (is_wal(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, len);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
  static ssize_t (*real)(int, const void *, size_t, off_t);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "pwrite");
  if (is_wal(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, len, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off64_t off) {
  static ssize_t (*real)(int, const void *, size_t, off64_t);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "pwrite64");
  if (is_wal(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, len, off);
}
