/* store: the SQLite file behind an engine. Runs and an append-only event log
 * per run; WAL mode; schema versioned with PRAGMA user_version. */
#ifndef MOOR_STORE_H
#define MOOR_STORE_H

#include <sqlite3.h>
#include <stddef.h>

#include "moorconf.h"

/* One cached statement: its SQL text (a copy, the key) and when it was last
 * handed out (for eviction). */
typedef struct moor_store_stmt {
  sqlite3_stmt *st;
  char *sql;
  size_t len;
  unsigned hash;
  unsigned long used;
} moor_store_stmt;

typedef struct moor_store {
  sqlite3 *db;
  int in_tx;             /* a write transaction is open (group commit) */
  sqlite3_stmt *append;  /* INSERT INTO events */
  sqlite3_stmt *begin;
  sqlite3_stmt *commit;
  sqlite3_stmt *events;  /* SELECT ... FROM events WHERE run_id=? (a '' payload is in blobs) */
  sqlite3_stmt *blob;    /* INSERT INTO blobs: a large event payload */
  /* Statements by SQL text (moor_store_prepare): a set-associative table of
   * MOOR_STORE_STMT_SETS x MOOR_STORE_STMT_WAYS, least recently used out. */
  moor_store_stmt stmts[MOOR_STORE_STMT_SETS * MOOR_STORE_STMT_WAYS];
  unsigned long stmt_clock;
  long prepared;         /* statements prepared since open, cached or not */
  /* The checkpointer (store.c): NULL when SQLite's automatic checkpoint runs
   * inside commits instead (read-only, not WAL, or the thread did not start). */
  struct moor_store_ckpt *ckpt;
  int wal_frames;        /* frames in the WAL after the last commit */
  long ckpt_inline;      /* checkpoints a commit ran itself (MOOR_STORE_CHECKPOINT_MAX_FRAMES) */
  long ckpt_finish;      /* ... to copy what the thread left (MOOR_STORE_CHECKPOINT_FINISH_FRAMES) */
  long wal_restarts;     /* commits that wrote the WAL from its start */
  unsigned finish_gen;   /* the WAL generation (the thread's gen) of the last ckpt_finish ... */
  int finish_at;         /* ... and the frames in the WAL then */
  char err[512];
} moor_store;

/* What the checkpointer did (moor_store_stats; core.store_stats). */
typedef struct moor_store_ckpt_stats {
  int checkpointer;      /* 1: checkpoints run on their own thread */
  long checkpoints;      /* PASSIVE checkpoints the thread ran */
  long checkpoints_busy; /* ... of them SQLITE_BUSY (another was running: copied nothing) */
  int checkpointing;     /* the thread runs one, has been woken to, or will once the engine idles */
  long checkpoints_inline; /* checkpoints commits ran themselves (the WAL reached MOOR_STORE_CHECKPOINT_MAX_FRAMES) */
  long checkpoints_finish; /* ... copying the few frames the thread left (MOOR_STORE_CHECKPOINT_FINISH_FRAMES) */
  long wal_restarts;     /* commits that wrote the WAL from its start since open */
  int wal_frames;        /* frames in the WAL after the last commit */
} moor_store_ckpt_stats;

/* read_only: SQLITE_OPEN_READONLY, no migration, MOOR_ENOTFOUND for a file
 * with no moor tables. Otherwise the file must take a test write. */
int moor_store_open(moor_store *s, const char *path, int durability, int read_only);
/* Stops and joins the checkpointer, closes its connection, then the engine's. */
void moor_store_close(moor_store *s);
void moor_store_stats(moor_store *s, moor_store_ckpt_stats *out);
int moor_store_begin(moor_store *s);   /* no-op when already in a transaction */
/* No-op when none is open. On failure the transaction is rolled back (in_tx
 * cleared) and err says why: nothing of it was recorded. */
int moor_store_commit(moor_store *s);
void moor_store_rollback(moor_store *s); /* drop the open transaction, if any */
/* The statement for sql (len bytes), prepared once per database and kept
 * (SQLITE_PREPARE_PERSISTENT), reset and without bindings. *owned is 0 for a
 * kept one (give it back with moor_store_release) and 1 for SQL too long to
 * keep (MOOR_STORE_STMT_SQL_MAX: the caller finalizes it). On failure
 * MOOR_EIO, and sqlite3_errmsg(s->db) says why. */
int moor_store_prepare(moor_store *s, const char *sql, size_t len, sqlite3_stmt **st, int *owned);
/* Done with a statement from moor_store_prepare: reset (its read ends) or finalized. */
void moor_store_release(moor_store *s, sqlite3_stmt *st, int owned);
/* A payload over MOOR_BLOB_MIN bytes (moorconf.h) goes to the blobs table;
 * the view event_log reads every payload back, wherever it is kept. */
int moor_store_append(moor_store *s, const char *run_id, long long seq, long long op,
                      const char *kind, const char *name, const char *payload,
                      size_t payload_len, long long time_ms);

/* The VFS the store opens its read-write files with (host/store_vfs.c: the
 * default one with a transaction's WAL appends written at once), or NULL for
 * SQLite's default. */
const char *moor__store_vfs(void);
/* Since the process started: WAL writes SQLite asked the store's VFS for, and
 * the writes it made of them (core.store_stats: wal_appends, wal_writes). */
void moor__store_vfs_counts(long long *appends, long long *writes);
/* Reads of WAL files that went to the files, since the process started (a
 * recovery's frames are read ahead: tests/c/test_store.c). */
long long moor__store_vfs_wal_reads(void);

#endif
