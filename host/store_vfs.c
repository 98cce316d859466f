/* store_vfs: the store's SQLite VFS, the default one with the WAL's writes
 * gathered. SQLite appends each WAL frame as two writes (its 24-byte header,
 * then the page), so a commit of n pages made 2n pwrite calls; here the
 * appends of a transaction collect in a buffer and go to the file as one
 * write when the commit frame's page arrives (a frame header whose "database
 * size after commit" field is not zero marks it: the WAL format's own rule).
 *
 * Nothing about durability moves: the commit frame is written before SQLite
 * goes on to publish the transaction in the WAL-index (which is what makes it
 * visible to other connections and processes) and before the commit returns;
 * a write that fails fails the commit, as before. Any other use of the WAL
 * file (a read, a sync, its size, a truncate, a write elsewhere, its close)
 * writes what is gathered first. Belt and braces: the database file's
 * xShmBarrier and xShmLock, which SQLite calls as it publishes a commit and
 * ends the transaction, write its WAL's gathered appends too, should a
 * commit ever end without a commit frame being recognised.
 *
 * Everything else goes to the default VFS unchanged. One connection uses a
 * file at a time (SQLite's rule), so a file's buffer needs no lock; the list
 * that pairs a database with its WAL has one. MOOR_STORE_WAL_BUFFER
 * (moorconf.h) is the buffer's size; 0 leaves the default VFS in place. */
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stddef.h>
#include <string.h>

#include "moorconf.h"
#include "store.h"

typedef struct vfs_file vfs_file;
struct vfs_file {
  sqlite3_file base;
  sqlite3_file *real;   /* the default VFS's file, in the memory after this one */
  const char *name;     /* the name SQLite opened it by (a database: its WAL is found by it) */
  int is_db, is_wal;
  vfs_file *wal;        /* a database: its WAL file, while both are open */
  vfs_file *db;         /* a WAL file: its database file */
  vfs_file *next;       /* the list of open database files */
  char *buf;            /* a WAL file: appends gathered, [off, off + len) of the file */
  size_t len;
  sqlite3_int64 off;
  int commit_next;      /* the last write was a commit frame's header: its page ends it */
  /* A WAL file while its connection recovers the WAL-index (see x_read). */
  int recovering;
  char *ra;             /* read ahead: [ra_off, ra_off + ra_len) of the file */
  int ra_len;
  sqlite3_int64 ra_off;
};

/* Read ahead while recovering: an open that finds no live WAL-index (the
 * first after a kill -9) rebuilds it from the WAL, reading every frame since
 * the WAL last started over with one read each (4 KiB and a header); the
 * recovering connection holds the WAL's write and recovery locks meanwhile,
 * so nothing can change it, and those reads are served from reads of
 * MOOR_STORE_WAL_READ_AHEAD bytes (moorconf.h; 1,300 pread calls of a
 * restart after 1,000 steps become 21). */
#define WAL_RECOVER_SLOT 2 /* (SQLite's WAL_RECOVER_LOCK: held exclusively only while recovering) */

static sqlite3_vfs *real_vfs;
static long long n_appends, n_writes; /* WAL writes SQLite asked for; writes that went to the files */
static atomic_llong n_wal_reads;      /* reads of a WAL file that went to the file (both threads) */
static sqlite3_vfs moor_vfs;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t dbs_lock = PTHREAD_MUTEX_INITIALIZER;
static vfs_file *dbs;

#define REAL(f) (((vfs_file *)(f))->real)
#define RM(f) (REAL(f)->pMethods)

/* Write what is gathered. On failure it is dropped: the transaction it
 * belongs to fails (SQLite rolls it back; frames past the last commit are
 * never read). */
static int flush(vfs_file *f) {
  size_t len = f->len, done = 0;
  f->len = 0;
  while (done < len) {
    /* (in writes of at most MOOR_STORE_WAL_WRITE: the unix VFS takes no
     * more than 128 KiB at once, as SQLite itself never asks) */
    size_t n = len - done < MOOR_STORE_WAL_WRITE ? len - done : MOOR_STORE_WAL_WRITE;
    n_writes++;
    int rc = RM(f)->xWrite(f->real, f->buf + done, (int)n, f->off + (sqlite3_int64)done);
    if (rc != SQLITE_OK) return rc;
    done += n;
  }
  return SQLITE_OK;
}

static int gather_flush(sqlite3_file *file) {
  vfs_file *f = (vfs_file *)file;
  return f->is_wal ? flush(f) : SQLITE_OK;
}

static void drop_read_ahead(vfs_file *f) {
  sqlite3_free(f->ra);
  f->ra = NULL;
  f->ra_len = 0;
}

static int x_close(sqlite3_file *file) {
  vfs_file *f = (vfs_file *)file;
  int rc = f->is_wal ? flush(f) : SQLITE_OK;
  pthread_mutex_lock(&dbs_lock);
  if (f->is_db) {
    for (vfs_file **p = &dbs; *p; p = &(*p)->next)
      if (*p == f) {
        *p = f->next;
        break;
      }
    if (f->wal) f->wal->db = NULL;
  }
  if (f->is_wal && f->db) f->db->wal = NULL;
  pthread_mutex_unlock(&dbs_lock);
  sqlite3_free(f->buf);
  f->buf = NULL;
  drop_read_ahead(f);
  int crc = RM(f)->xClose(f->real);
  return rc != SQLITE_OK ? rc : crc;
}

static int x_read(sqlite3_file *file, void *p, int n, sqlite3_int64 off) {
  vfs_file *f = (vfs_file *)file;
  int rc = gather_flush(file);
  if (rc != SQLITE_OK) return rc;
  if (f->recovering && n > 0 && n <= MOOR_STORE_WAL_READ_AHEAD && off >= 0) {
    if (off < f->ra_off || off + n > f->ra_off + f->ra_len) {
      sqlite3_int64 size = 0;
      f->ra_len = 0;
      if (!f->ra) f->ra = sqlite3_malloc(MOOR_STORE_WAL_READ_AHEAD);
      if (f->ra && RM(f)->xFileSize(f->real, &size) == SQLITE_OK && size - off >= n) {
        int want = size - off < MOOR_STORE_WAL_READ_AHEAD ? (int)(size - off) : MOOR_STORE_WAL_READ_AHEAD;
        atomic_fetch_add_explicit(&n_wal_reads, 1, memory_order_relaxed);
        if (RM(f)->xRead(f->real, f->ra, want, off) == SQLITE_OK) {
          f->ra_off = off;
          f->ra_len = want;
        }
      }
    }
    if (off >= f->ra_off && off + n <= f->ra_off + f->ra_len) {
      memcpy(p, f->ra + (off - f->ra_off), (size_t)n);
      return SQLITE_OK;
    }
  }
  if (f->is_wal) atomic_fetch_add_explicit(&n_wal_reads, 1, memory_order_relaxed);
  return RM(file)->xRead(REAL(file), p, n, off);
}

static int x_write(sqlite3_file *file, const void *p, int n, sqlite3_int64 off) {
  vfs_file *f = (vfs_file *)file;
  f->ra_len = 0; /* (what was read ahead is stale) */
  if (!f->is_wal || !f->buf) return RM(f)->xWrite(f->real, p, n, off);
  n_appends++;
  int rc;
  if (f->len && (off != f->off + (sqlite3_int64)f->len || f->len + (size_t)n > MOOR_STORE_WAL_BUFFER)) {
    if ((rc = flush(f)) != SQLITE_OK) return rc;
  }
  if ((size_t)n > MOOR_STORE_WAL_WRITE) {
    n_writes++;
    return RM(f)->xWrite(f->real, p, n, off);
  }
  if (!f->len) f->off = off;
  memcpy(f->buf + f->len, p, (size_t)n);
  f->len += (size_t)n;
  if (n == 24 && off >= 32) { /* a frame header (the WAL's own header is 32 bytes at 0) */
    const unsigned char *h = p;
    f->commit_next = (h[4] | h[5] | h[6] | h[7]) != 0;
  } else if (f->commit_next) {
    f->commit_next = 0;
    return flush(f); /* the commit frame's page: the transaction's frames, in one write */
  }
  return SQLITE_OK;
}

static int x_truncate(sqlite3_file *file, sqlite3_int64 size) {
  ((vfs_file *)file)->ra_len = 0;
  int rc = gather_flush(file);
  return rc != SQLITE_OK ? rc : RM(file)->xTruncate(REAL(file), size);
}

static int x_sync(sqlite3_file *file, int flags) {
  int rc = gather_flush(file);
  return rc != SQLITE_OK ? rc : RM(file)->xSync(REAL(file), flags);
}

static int x_file_size(sqlite3_file *file, sqlite3_int64 *size) {
  int rc = gather_flush(file);
  return rc != SQLITE_OK ? rc : RM(file)->xFileSize(REAL(file), size);
}

static int x_lock(sqlite3_file *file, int lock) { return RM(file)->xLock(REAL(file), lock); }
static int x_unlock(sqlite3_file *file, int lock) { return RM(file)->xUnlock(REAL(file), lock); }
static int x_check_reserved(sqlite3_file *file, int *out) { return RM(file)->xCheckReservedLock(REAL(file), out); }

static int x_file_control(sqlite3_file *file, int op, void *arg) {
  int rc = gather_flush(file);
  return rc != SQLITE_OK ? rc : RM(file)->xFileControl(REAL(file), op, arg);
}

static int x_sector_size(sqlite3_file *file) { return RM(file)->xSectorSize(REAL(file)); }
static int x_device(sqlite3_file *file) { return RM(file)->xDeviceCharacteristics(REAL(file)); }

/* A database file's shared-memory calls: its WAL's gathered appends go out
 * first (see the top). */
static void flush_wal_of(sqlite3_file *file) {
  vfs_file *f = (vfs_file *)file;
  if (f->is_db && f->wal && f->wal->len) flush(f->wal);
}

static int x_shm_map(sqlite3_file *file, int region, int size, int extend, void volatile **pp) {
  if (RM(file)->iVersion < 2) return SQLITE_IOERR_SHMMAP;
  return RM(file)->xShmMap(REAL(file), region, size, extend, pp);
}

static int x_shm_lock(sqlite3_file *file, int offset, int n, int flags) {
  if (RM(file)->iVersion < 2) return SQLITE_IOERR_SHMLOCK;
  flush_wal_of(file);
  int rc = RM(file)->xShmLock(REAL(file), offset, n, flags);
  /* (the recovery lock, exclusive: this connection rebuilds the WAL-index
   * from its WAL, which x_read then reads ahead; its release ends that) */
  vfs_file *f = (vfs_file *)file;
  if (f->is_db && f->wal && (flags & SQLITE_SHM_EXCLUSIVE) && offset <= WAL_RECOVER_SLOT &&
      WAL_RECOVER_SLOT < offset + n) {
    if ((flags & SQLITE_SHM_LOCK) && rc == SQLITE_OK) {
      f->wal->recovering = 1;
    } else if (flags & SQLITE_SHM_UNLOCK) {
      f->wal->recovering = 0;
      drop_read_ahead(f->wal);
    }
  }
  return rc;
}

static void x_shm_barrier(sqlite3_file *file) {
  if (RM(file)->iVersion < 2) return;
  flush_wal_of(file);
  RM(file)->xShmBarrier(REAL(file));
}

static int x_shm_unmap(sqlite3_file *file, int del) {
  if (RM(file)->iVersion < 2) return SQLITE_OK;
  return RM(file)->xShmUnmap(REAL(file), del);
}

static int x_fetch(sqlite3_file *file, sqlite3_int64 off, int n, void **pp) {
  *pp = NULL;
  if (RM(file)->iVersion < 3) return SQLITE_OK;
  int rc = gather_flush(file);
  return rc != SQLITE_OK ? rc : RM(file)->xFetch(REAL(file), off, n, pp);
}

static int x_unfetch(sqlite3_file *file, sqlite3_int64 off, void *p) {
  if (RM(file)->iVersion < 3) return SQLITE_OK;
  return RM(file)->xUnfetch(REAL(file), off, p);
}

static const sqlite3_io_methods methods = {
  3, x_close, x_read, x_write, x_truncate, x_sync, x_file_size, x_lock, x_unlock, x_check_reserved,
  x_file_control, x_sector_size, x_device, x_shm_map, x_shm_lock, x_shm_barrier, x_shm_unmap, x_fetch,
  x_unfetch};

/* The default VFS's file follows ours, aligned as any file may need. */
#define HEAD_SIZE ((sizeof(vfs_file) + 15) & ~(size_t)15)

static int x_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
  (void)vfs;
  vfs_file *f = (vfs_file *)file;
  memset(f, 0, sizeof *f);
  f->real = (sqlite3_file *)((char *)file + HEAD_SIZE);
  int rc = real_vfs->xOpen(real_vfs, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK || !f->real->pMethods) {
    f->base.pMethods = NULL; /* (SQLite then never calls xClose) */
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  f->base.pMethods = &methods;
  f->name = name;
  if (flags & SQLITE_OPEN_MAIN_DB) {
    f->is_db = 1;
    pthread_mutex_lock(&dbs_lock);
    f->next = dbs;
    dbs = f;
    pthread_mutex_unlock(&dbs_lock);
  } else if ((flags & SQLITE_OPEN_WAL) && name) {
    f->is_wal = 1;
    f->buf = sqlite3_malloc64(MOOR_STORE_WAL_BUFFER); /* (none: every write goes straight through) */
    const char *db_name = sqlite3_filename_database(name);
    pthread_mutex_lock(&dbs_lock);
    for (vfs_file *d = dbs; d; d = d->next)
      if (d->name == db_name && !d->wal) {
        d->wal = f;
        f->db = d;
        break;
      }
    pthread_mutex_unlock(&dbs_lock);
  }
  return SQLITE_OK;
}

/* The rest of the VFS is the default's. */
static int x_delete(sqlite3_vfs *v, const char *n, int s) { (void)v; return real_vfs->xDelete(real_vfs, n, s); }
static int x_access(sqlite3_vfs *v, const char *n, int f, int *o) { (void)v; return real_vfs->xAccess(real_vfs, n, f, o); }
static int x_full(sqlite3_vfs *v, const char *n, int sz, char *o) {
  (void)v;
  return real_vfs->xFullPathname(real_vfs, n, sz, o);
}
static void *x_dlopen(sqlite3_vfs *v, const char *n) { (void)v; return real_vfs->xDlOpen(real_vfs, n); }
static void x_dlerror(sqlite3_vfs *v, int n, char *m) { (void)v; real_vfs->xDlError(real_vfs, n, m); }
static void (*x_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) {
  (void)v;
  return real_vfs->xDlSym(real_vfs, h, s);
}
static void x_dlclose(sqlite3_vfs *v, void *h) { (void)v; real_vfs->xDlClose(real_vfs, h); }
static int x_random(sqlite3_vfs *v, int n, char *o) { (void)v; return real_vfs->xRandomness(real_vfs, n, o); }
static int x_sleep(sqlite3_vfs *v, int us) { (void)v; return real_vfs->xSleep(real_vfs, us); }
static int x_time(sqlite3_vfs *v, double *t) { (void)v; return real_vfs->xCurrentTime(real_vfs, t); }
static int x_last_error(sqlite3_vfs *v, int n, char *m) {
  (void)v;
  return real_vfs->xGetLastError ? real_vfs->xGetLastError(real_vfs, n, m) : 0;
}
static int x_time64(sqlite3_vfs *v, sqlite3_int64 *t) { (void)v; return real_vfs->xCurrentTimeInt64(real_vfs, t); }

static void register_vfs(void) {
  sqlite3_vfs *d = sqlite3_vfs_find(NULL);
  if (!d || d->iVersion < 2 || !d->xCurrentTimeInt64) return;
  real_vfs = d;
  moor_vfs = (sqlite3_vfs){.iVersion = 2,
                           .szOsFile = (int)(HEAD_SIZE + (size_t)d->szOsFile),
                           .mxPathname = d->mxPathname,
                           .zName = "moor",
                           .xOpen = x_open,
                           .xDelete = x_delete,
                           .xAccess = x_access,
                           .xFullPathname = x_full,
                           .xDlOpen = x_dlopen,
                           .xDlError = x_dlerror,
                           .xDlSym = x_dlsym,
                           .xDlClose = x_dlclose,
                           .xRandomness = x_random,
                           .xSleep = x_sleep,
                           .xCurrentTime = x_time,
                           .xGetLastError = x_last_error,
                           .xCurrentTimeInt64 = x_time64};
  if (sqlite3_vfs_register(&moor_vfs, 0) != SQLITE_OK) real_vfs = NULL;
}

void moor__store_vfs_counts(long long *appends, long long *writes) {
  *appends = n_appends;
  *writes = n_writes;
}

long long moor__store_vfs_wal_reads(void) { return atomic_load_explicit(&n_wal_reads, memory_order_relaxed); }

const char *moor__store_vfs(void) {
  if (MOOR_STORE_WAL_BUFFER == 0) return NULL;
  pthread_once(&once, register_vfs);
  return real_vfs ? moor_vfs.zName : NULL;
}
