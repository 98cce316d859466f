/* lock: one process drives a database at a time (flock on <db>.lock, which
 * the kernel releases when the holder dies, even by kill -9). */
#ifndef MOOR_LOCK_H
#define MOOR_LOCK_H
#include <stddef.h>
int moor_lock_acquire(const char *db_path, int *fd_out, char *err, size_t errlen);
void moor_lock_release(int fd);
#endif
