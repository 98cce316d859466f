/* store: the SQLite file behind an engine. Runs and an append-only event log
 * per run; WAL mode; schema versioned with PRAGMA user_version. */
#ifndef MOOR_STORE_H
#define MOOR_STORE_H

#include <sqlite3.h>
#include <stddef.h>

#include "moorconf.h"

typedef struct moor_store {
  sqlite3 *db;
  int in_tx;             /* a write transaction is open (group commit) */
  sqlite3_stmt *append;  /* INSERT INTO events */
  sqlite3_stmt *begin;
  sqlite3_stmt *commit;
  sqlite3_stmt *events;  /* SELECT ... FROM event_log WHERE run_id=? */
  sqlite3_stmt *blob;    /* INSERT INTO blobs: a large event payload */
  char err[512];
} moor_store;

/* read_only: SQLITE_OPEN_READONLY, no migration, MOOR_ENOTFOUND for a file
 * with no moor tables. Otherwise the file must take a test write. */
int moor_store_open(moor_store *s, const char *path, int durability, int read_only);
void moor_store_close(moor_store *s);
int moor_store_begin(moor_store *s);   /* no-op when already in a transaction */
/* No-op when none is open. On failure the transaction is rolled back (in_tx
 * cleared) and err says why: nothing of it was recorded. */
int moor_store_commit(moor_store *s);
void moor_store_rollback(moor_store *s); /* drop the open transaction, if any */
/* A payload over MOOR_BLOB_MIN bytes (moorconf.h) goes to the blobs table;
 * the view event_log reads every payload back, wherever it is kept. */
int moor_store_append(moor_store *s, const char *run_id, long long seq, long long op,
                      const char *kind, const char *name, const char *payload,
                      size_t payload_len, long long time_ms);

#endif
