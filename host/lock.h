/* lock: one process drives a database at a time (flock on <db>.lock, which
 * the kernel releases when the holder dies, even by kill -9). The lock file
 * (0600) holds "pid=", "started=" and, while serving, "url=" lines. */
#ifndef MOOR_LOCK_H
#define MOOR_LOCK_H
#include <stddef.h>
int moor_lock_acquire(const char *db_path, int *fd_out, char *err, size_t errlen);
void moor_lock_release(int fd);
/* Add "url=..." to the holder's note, so other commands find the server. */
void moor_lock_note_url(int fd, const char *url);
/* The url= a live holder noted, and the lock file's owner uid (owner may be
 * NULL); MOOR_ENOTFOUND when unlocked or none. */
int moor_lock_server_url(const char *db_path, char *url, size_t len, unsigned *owner);
#endif
