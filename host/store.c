/* SQLite store. Writes go through one lazily opened transaction that the
 * engine commits once per scheduler round (group commit), so a batch of
 * results becomes durable together before any body sees one of them.
 * Checkpoints run on a thread of their own (see "The checkpointer"). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include "store.h"
#ifndef SQLITE_DEFAULT_WAL_AUTOCHECKPOINT
#define SQLITE_DEFAULT_WAL_AUTOCHECKPOINT 1000 /* (sqlite3.c's own default) */
#endif
#include "moor.h"

#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif
#if defined(__GLIBC__)
#include <pthread.h>
#endif
#include <uv.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MOOR_SCHEMA_VERSION 1
/* The oldest schema a read-only open (moor runs, moor logs) reads as it is:
 * migration 5 only adds a table (harness_turns) that no reader touches. */
#define MOOR_SCHEMA_READ_OLDEST 4

/* Each entry migrates from version i to i+1. Never edit a shipped entry:
 * append a new one, so old files upgrade in order. */
static const char *const migrations[] = {
  "CREATE TABLE runs ("
  "  id TEXT PRIMARY KEY,"
  "  tool TEXT NOT NULL,"
  "  entry TEXT NOT NULL,"
  "  status TEXT NOT NULL,"
  "  input TEXT NOT NULL,"
  "  call_id TEXT NOT NULL,"
  "  result TEXT,"
  "  error TEXT,"
  "  source_hash TEXT,"
  "  seed INTEGER NOT NULL,"
  "  started INTEGER NOT NULL,"
  "  updated INTEGER NOT NULL);"
  "CREATE INDEX runs_status ON runs(status);"
  "CREATE TABLE events ("
  "  run_id TEXT NOT NULL,"
  "  seq INTEGER NOT NULL,"
  "  op INTEGER,"
  "  kind TEXT NOT NULL,"
  "  name TEXT,"
  "  payload TEXT NOT NULL,"
  "  time INTEGER NOT NULL,"
  "  PRIMARY KEY (run_id, seq)) WITHOUT ROWID;",
  /* (Measured for issue 13 against a rowid table with a unique index on
   * (run_id, seq): that writes fewer WAL pages only when about ten or more
   * runs step in one group commit (100 runs x 100 steps: 32 pages a commit
   * against 42), and more otherwise (one run: 2.24 a commit against 1.31,
   * +11% instructions a step, the WAL checksum mostly; a 1-step run +7%);
   * replay +2.5-5.5%. The key stays.) */

  /* 2: waiting on the world: questions, hooks and webhooks, cancellation. */
  "ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;"
  "ALTER TABLE runs ADD COLUMN channel TEXT NOT NULL DEFAULT 'default';"
  "CREATE TABLE inputs ("
  "  request_id TEXT PRIMARY KEY,"
  "  run_id TEXT NOT NULL,"
  "  op INTEGER NOT NULL,"
  "  request TEXT NOT NULL,"
  "  status TEXT NOT NULL,"       /* pending | answered | cancelled */
  "  answer TEXT,"
  "  created INTEGER NOT NULL,"
  "  resolved INTEGER);"
  "CREATE INDEX inputs_pending ON inputs(status, run_id);"
  "CREATE TABLE hooks ("
  "  token TEXT PRIMARY KEY,"
  "  run_id TEXT NOT NULL,"
  "  kind TEXT NOT NULL,"         /* hook | webhook */
  "  respond TEXT,"               /* respondWith as JSON, webhooks only */
  "  created INTEGER NOT NULL,"
  "  closed INTEGER NOT NULL DEFAULT 0);"
  "CREATE INDEX hooks_run ON hooks(run_id);"
  "CREATE TABLE deliveries ("
  "  token TEXT NOT NULL,"
  "  n INTEGER NOT NULL,"
  "  run_id TEXT NOT NULL,"
  "  payload TEXT NOT NULL,"
  "  consumed INTEGER NOT NULL DEFAULT 0,"
  "  time INTEGER NOT NULL,"
  "  PRIMARY KEY (token, n)) WITHOUT ROWID;",

  /* 3: child runs (a session's workflow tool calls). */
  "ALTER TABLE runs ADD COLUMN parent_id TEXT;"
  "ALTER TABLE runs ADD COLUMN parent_op INTEGER;"
  "CREATE INDEX runs_parent ON runs(parent_id);",

  /* 4: large payloads (a model answer, a screenshot) live in a rowid table,
   * whose overflow pages suit them, so the log's rows stay small; the event
   * row holds '' in their place. Older files have no such rows. */
  "CREATE TABLE blobs ("
  "  run_id TEXT NOT NULL,"
  "  seq INTEGER NOT NULL,"
  "  payload TEXT NOT NULL,"
  "  PRIMARY KEY (run_id, seq));"
  "CREATE VIEW event_log AS SELECT run_id, seq, op, kind, name,"
  "  CASE WHEN payload <> '' THEN payload ELSE coalesce((SELECT b.payload FROM blobs b"
  "    WHERE b.run_id = events.run_id AND b.seq = events.seq), '') END AS payload, time FROM events;",

  /* 5: harness agents' turns that have a live process (lua/moor/harness/
   * host.lua): at start-up each is ended as interrupted and its process
   * group killed (when pstart, its start time, still matches). */
  "CREATE TABLE harness_turns ("
  "  token TEXT NOT NULL,"
  "  turn INTEGER NOT NULL,"
  "  pid INTEGER NOT NULL,"
  "  pstart TEXT,"
  "  dir TEXT NOT NULL,"
  "  created INTEGER NOT NULL,"
  "  PRIMARY KEY (token, turn));",

  /* 6: a run with no parent (nearly all) has no entry in runs_parent, so
   * starting one writes a page less (a 1-step run: 365 k -> 352 k
   * instructions, the WAL checksum mostly); parent_id = ? implies NOT NULL,
   * so every query by parent still searches it. */
  "DROP INDEX IF EXISTS runs_parent;"
  "CREATE INDEX runs_parent ON runs(parent_id) WHERE parent_id IS NOT NULL;",
};

static int fail(moor_store *s, int code, const char *what) {
  snprintf(s->err, sizeof s->err, "%s: %s", what, s->db ? sqlite3_errmsg(s->db) : "cannot open");
  return code;
}

static int prepare(moor_store *s, sqlite3_stmt **st, const char *sql) {
  s->prepared++;
  if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
    return fail(s, MOOR_EIO, "prepare");
  return 0;
}

static unsigned sql_hash(const char *sql, size_t len) { /* FNV-1a */
  unsigned h = 2166136261u;
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)sql[i]) * 16777619u;
  return h;
}

int moor_store_prepare(moor_store *s, const char *sql, size_t len, sqlite3_stmt **st, int *owned) {
  *st = NULL;
  *owned = 0;
  if (len > MOOR_STORE_STMT_SQL_MAX) {
    *owned = 1;
    s->prepared++;
    return sqlite3_prepare_v2(s->db, sql, (int)len, st, NULL) == SQLITE_OK ? 0 : MOOR_EIO;
  }
  unsigned h = sql_hash(sql, len);
  moor_store_stmt *set = s->stmts + (h & (MOOR_STORE_STMT_SETS - 1)) * MOOR_STORE_STMT_WAYS, *victim = set;
  for (int i = 0; i < MOOR_STORE_STMT_WAYS; i++) {
    moor_store_stmt *e = set + i;
    if (e->st && e->hash == h && e->len == len && !memcmp(e->sql, sql, len)) {
      e->used = ++s->stmt_clock;
      /* (reset again: a Lua error between two steps may have left it running) */
      sqlite3_reset(e->st);
      sqlite3_clear_bindings(e->st);
      *st = e->st;
      return 0;
    }
    if (victim->st && (!e->st || e->used < victim->used)) victim = e;
  }
  char *copy = malloc(len + 1);
  if (!copy) return MOOR_ENOMEM;
  memcpy(copy, sql, len);
  copy[len] = 0;
  sqlite3_stmt *fresh = NULL;
  s->prepared++;
  if (sqlite3_prepare_v3(s->db, sql, (int)len, SQLITE_PREPARE_PERSISTENT, &fresh, NULL) != SQLITE_OK) {
    free(copy);
    return MOOR_EIO;
  }
  if (!fresh) { /* (SQL with no statement in it: nothing to keep) */
    free(copy);
    return 0;
  }
  sqlite3_finalize(victim->st);
  free(victim->sql);
  *victim = (moor_store_stmt){.st = fresh, .sql = copy, .len = len, .hash = h, .used = ++s->stmt_clock};
  *st = fresh;
  return 0;
}

void moor_store_release(moor_store *s, sqlite3_stmt *st, int owned) {
  (void)s;
  if (owned) {
    sqlite3_finalize(st);
  } else if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
  }
}

static int read_version(moor_store *s) {
  sqlite3_stmt *st = NULL;
  int version = -1;
  if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) return -1;
  if (sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return version;
}

static int migrate(moor_store *s) {
  int version = read_version(s);
  if (version < 0) return fail(s, MOOR_EIO, "read schema version");
  int target = (int)(sizeof migrations / sizeof migrations[0]);
  if (version > target) {
    snprintf(s->err, sizeof s->err,
             "database schema version %d is newer than this moor understands (%d); "
             "use a newer moor or another --db file", version, target);
    return MOOR_EIO;
  }
  for (int v = version; v < target; v++) {
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", v + 1);
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
      return fail(s, MOOR_EIO, "migrate");
    /* Another process (a reader opening the same new file) may have
     * migrated while we waited for the write lock: read it again. */
    int now = read_version(s);
    if (now > v) {
      sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
      v = now - 1;
      continue;
    }
    if (sqlite3_exec(s->db, migrations[v], NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(s->db, pragma, NULL, NULL, NULL) != SQLITE_OK) {
      int rc = fail(s, MOOR_EIO, "migrate");
      sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
      return rc;
    }
    if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
      return fail(s, MOOR_EIO, "migrate");
  }
  return 0;
}

/* The database, its -wal and -shm are the user's alone (0600). SQLite gives
 * -wal and -shm the database's own mode, so creating the database under a
 * 077 umask is enough for new files; chmod tightens what an older moor made. */
static void tighten(const char *path) {
  char p[4096];
  static const char *const sfx[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s%s", path, sfx[i]);
    struct stat st;
    if (stat(p, &st) == 0 && (st.st_mode & 077) && st.st_uid == geteuid() && chmod(p, st.st_mode & 0700) != 0) {
      /* not ours to change: leave it */
    }
  }
}

/* Refuse a database this process cannot write (a read-only or immutable file
 * or directory, a full disk): better than serving and failing every write. */
static int check_writable(moor_store *s, const char *path, int version) {
  if (sqlite3_db_readonly(s->db, "main") == 1) {
    snprintf(s->err, sizeof s->err,
             "the file is read-only for this process (permissions, a read-only mount or an immutable "
             "file): moor needs to write %s, its -wal and -shm", path);
    return MOOR_EIO;
  }
  char pragma[64];
  snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", version);
  if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(s->db, pragma, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
    snprintf(s->err, sizeof s->err,
             "a test write failed: %s (is the disk full, or the file or its directory read-only?)",
             sqlite3_errmsg(s->db));
    if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return MOOR_EIO;
  }
  return 0;
}

/* MOOR_MALLOC_TRIM_THRESHOLD (moorconf.h): no page faults a commit from
 * malloc handing its heap's top back and taking it again. */
static void tune_malloc(void) {
#if defined(__GLIBC__) && defined(M_TRIM_THRESHOLD) && MOOR_MALLOC_TRIM_THRESHOLD > 0
  const char *t = getenv("GLIBC_TUNABLES");
  if (t && strstr(t, "glibc.malloc.")) return; /* (the user's own choice) */
  mallopt(M_MMAP_THRESHOLD, MOOR_MALLOC_MMAP_THRESHOLD);
  mallopt(M_TRIM_THRESHOLD, MOOR_MALLOC_TRIM_THRESHOLD);
#endif
}

/* --- The checkpointer -------------------------------------------------------
 * SQLite's automatic checkpoint runs inside the commit that leaves the WAL
 * with 1,000 frames or more: on the engine's thread, it copies those pages
 * into the database file and syncs it (about 2-3 ms of CPU and 5-8 ms wall
 * here, once every ~770 steps of a run: a budgeted tick's worst overshoot).
 * A read-write WAL store replaces it: its WAL hook (which takes the place
 * of SQLite's own, the automatic checkpoint being one) wakes a thread that
 * runs the same PASSIVE checkpoint on a connection of its own. Durability
 * does not move: commits still commit, and sync as `synchronous` says, on
 * the engine's connection; the thread only copies committed frames into the
 * file (PASSIVE: no frame a reader still needs, never waiting on a lock), and
 * the last connection's close checkpoints what is left, as before.
 *
 * The WAL starts over (is written from its start again) at a commit whose
 * transaction began after a checkpoint had copied all of it. When the
 * engine commits with no pause, its next transaction has always begun
 * before the thread's checkpoint ends, so the WAL grows although each
 * checkpoint copies nearly all of it; from MOOR_STORE_CHECKPOINT_MAX_FRAMES
 * on, the commit waits for the thread's checkpoint if one runs and runs one
 * itself (copying what little the thread left), as SQLite's automatic one
 * would: the next transaction starts the WAL over. With pauses (a host
 * waiting on the network, between frames of a game) the thread catches up
 * in one and the WAL starts over after about MOOR_STORE_CHECKPOINT_FRAMES.
 * (MOOR_STORE_CHECKPOINT_FINISH_FRAMES, off by default, starts it over near
 * that under commits with no pause too, at the cost of a small checkpoint on
 * the engine's thread: see on_wal_commit.) A kill -9 leaves every frame since
 * the WAL last started over for the next open to recover; that open runs no
 * automatic checkpoint of them (moor_store_open): the thread copies them
 * after the first commit.
 *
 * The second connection is this process's: moor's single-host lock (lock.c,
 * a file of its own) is unaffected, SQLite shares its POSIX locks between
 * the two, and the close order (the thread's connection first) leaves the
 * engine's as the last one, which folds the WAL in and removes it. */
struct moor_store_ckpt {
  uv_thread_t thread;
  uv_mutex_t mu;      /* held only to read or change the fields below, never across a checkpoint */
  uv_cond_t wake;     /* wanted or stop set */
  uv_cond_t idle;     /* running cleared */
  sqlite3 *db;        /* the thread's connection: only the thread uses it while it runs */
  int wanted, stop, running;
  int behind;         /* frames are left that the last checkpoint did not copy: catch up when idle */
  unsigned gen;       /* times the WAL started over (the hook counts them) */
  unsigned done_gen;  /* ... when the thread's last checkpoint ran, which copied */
  int copied;         /* ... this many of its frames into the database */
  int woken_at;       /* frames in the WAL when the thread was last woken */
  long runs, busy;    /* checkpoints run; of them SQLITE_BUSY */
  /* The engine's write transactions, set without the mutex (moor_store_begin
   * and _commit): the thread catches up only while the engine has opened
   * none for MOOR_STORE_CHECKPOINT_IDLE_MS. */
  atomic_uint txs;    /* transactions begun */
  atomic_int in_tx;   /* one is open */
};

/* Woken when MOOR_STORE_CHECKPOINT_FRAMES frames of the WAL are not in the
 * database file yet, it copies them (and all committed meanwhile), about
 * as often as SQLite's automatic checkpoint would (each one syncs the
 * file: more would cost a commit that syncs too). The engine goes on
 * committing meanwhile, so frames are left; once the engine has had no
 * write transaction open for MOOR_STORE_CHECKPOINT_IDLE_MS it copies those
 * too (once: the next catch-up waits for another commit), so the next
 * transaction starts the WAL over. */
static void ckpt_main(void *arg) {
  struct moor_store_ckpt *c = arg;
#if defined(__GLIBC__)
  pthread_setname_np(pthread_self(), "moor-checkpoint"); /* (15 characters, the most it takes) */
#endif
  uv_mutex_lock(&c->mu);
  while (!c->stop) {
    int catch_up = 0;
    if (!c->wanted) {
      if (!c->behind) {
        uv_cond_wait(&c->wake, &c->mu);
        continue;
      }
      unsigned seen = atomic_load_explicit(&c->txs, memory_order_relaxed);
      int rc = uv_cond_timedwait(&c->wake, &c->mu, (uint64_t)MOOR_STORE_CHECKPOINT_IDLE_MS * 1000000u);
      if (c->stop) break;
      if (!c->wanted && (rc != UV_ETIMEDOUT || !c->behind || atomic_load_explicit(&c->in_tx, memory_order_relaxed) ||
                         atomic_load_explicit(&c->txs, memory_order_relaxed) != seen))
        continue;
      catch_up = !c->wanted;
    }
    c->wanted = 0;
    c->behind = 0;
    c->running = 1;
    unsigned gen = c->gen;
    uv_mutex_unlock(&c->mu);
    /* (An error other than SQLITE_BUSY is SQLite's automatic checkpoint's
     * too: nothing committed is lost, the next one tries again.) */
    int log = 0, copied = 0;
    int rc = sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
    uv_mutex_lock(&c->mu);
    c->running = 0;
    c->runs++;
    if (rc == SQLITE_BUSY) c->busy++;
    if (rc == SQLITE_OK && gen == c->gen) {
      c->done_gen = gen;
      c->copied = copied;
      if (!catch_up && copied < log) c->behind = 1; /* (or the hook set it: commits came meanwhile) */
    }
    uv_cond_signal(&c->idle);
  }
  uv_mutex_unlock(&c->mu);
}

/* The engine connection's WAL hook: after each commit, on the engine's
 * thread. Waking the thread never waits on it.
 *
 * With MOOR_STORE_CHECKPOINT_FINISH_FRAMES set (0, the default: off), once
 * the WAL holds MOOR_STORE_CHECKPOINT_FRAMES frames or more it is started
 * over as soon as it can be, so that whatever a kill -9 leaves for
 * the next open to recover (it reads and checksums every frame since the
 * WAL last started over: 1.5-2 us a frame here) stays about that long:
 * while the thread is idle and more than MOOR_STORE_CHECKPOINT_FINISH_FRAMES
 * frames are left that it has not copied, it is woken for another pass (each
 * copies what commits wrote during the one before: fewer each time); once at
 * most that many are left, this commit copies them itself (a PASSIVE
 * checkpoint of a few pages and its two syncs, once a WAL generation), and
 * the next transaction starts the WAL over. */
static int on_wal_commit(void *ud, sqlite3 *db, const char *name, int frames) {
  moor_store *s = ud;
  struct moor_store_ckpt *c = s->ckpt;
  int restarted = frames < s->wal_frames; /* (the transaction wrote from the WAL's start) */
  s->wal_frames = frames;
  if (restarted) s->wal_restarts++;
  if (frames < MOOR_STORE_CHECKPOINT_FRAMES && !restarted) return SQLITE_OK;
  uv_mutex_lock(&c->mu);
  if (restarted) {
    c->gen++;
    c->behind = 0;
  }
  if (frames >= MOOR_STORE_CHECKPOINT_MAX_FRAMES) {
    /* The fallback: wait for the thread's checkpoint, if one is running
     * (it holds the checkpoint lock, and has copied most of the WAL), then
     * run one here, so the next transaction starts the WAL over. */
    c->wanted = 0;
    while (c->running) uv_cond_wait(&c->idle, &c->mu);
    uv_mutex_unlock(&c->mu);
    if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) == SQLITE_OK) s->ckpt_inline++;
    return SQLITE_OK;
  }
  int copied = c->done_gen == c->gen ? c->copied : 0;
  /* (A checkpoint woken and not yet done copies at least what it was woken for.) */
  if ((c->wanted || c->running) && c->woken_at > copied) copied = c->woken_at;
  int idle = !c->wanted && !c->running, long_wal = frames >= MOOR_STORE_CHECKPOINT_FRAMES;
  /* (Once a generation: a reader of another process holding an old snapshot
   * can keep the next transaction from starting the WAL over.) */
  int finish = MOOR_STORE_CHECKPOINT_FINISH_FRAMES > 0 && long_wal && idle;
  if (finish && c->done_gen == c->gen && frames - copied <= MOOR_STORE_CHECKPOINT_FINISH_FRAMES &&
      !(s->finish_gen == c->gen && frames < s->finish_at + MOOR_STORE_CHECKPOINT_FRAMES)) {
    c->behind = 0; /* (the thread's catch-up would only find the checkpoint lock taken) */
    unsigned gen = c->gen;
    uv_mutex_unlock(&c->mu);
    s->finish_gen = gen;
    s->finish_at = frames;
    int log = 0, done = 0;
    if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, &done) == SQLITE_OK) {
      s->ckpt_finish++;
      uv_mutex_lock(&c->mu);
      if (gen == c->gen && done > c->copied) {
        c->done_gen = gen;
        c->copied = done;
      }
      uv_mutex_unlock(&c->mu);
    }
    return SQLITE_OK;
  }
  if (frames - copied >= MOOR_STORE_CHECKPOINT_FRAMES ||
      (finish && frames - copied > MOOR_STORE_CHECKPOINT_FINISH_FRAMES)) {
    if (!c->wanted) {
      c->wanted = 1;
      c->woken_at = frames;
      uv_cond_signal(&c->wake);
    }
  } else if (frames > copied && !c->behind) {
    c->behind = 1; /* (to copy once the engine idles: then the next transaction starts the WAL over) */
    uv_cond_signal(&c->wake);
  }
  uv_mutex_unlock(&c->mu);
  return SQLITE_OK;
}

static int is_wal(sqlite3 *db) {
  sqlite3_stmt *st = NULL;
  int wal = 0;
  if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    wal = mode && !sqlite3_stricmp(mode, "wal");
  }
  sqlite3_finalize(st);
  return wal;
}

static void ckpt_free(struct moor_store_ckpt *c) {
  sqlite3_close(c->db);
  uv_cond_destroy(&c->idle);
  uv_cond_destroy(&c->wake);
  uv_mutex_destroy(&c->mu);
  free(c);
}

/* A read-write store's checkpointer. When anything fails (no WAL, a second
 * connection or a thread refused) SQLite's automatic checkpoint stays on. */
static void ckpt_start(moor_store *s, const char *sync) {
  if (MOOR_STORE_CHECKPOINT_FRAMES <= 0 || !sqlite3_threadsafe() || !is_wal(s->db)) return;
  const char *path = sqlite3_db_filename(s->db, "main");
  if (!path || !*path) return;
  struct moor_store_ckpt *c = calloc(1, sizeof *c);
  if (!c) return;
  if (uv_mutex_init(&c->mu)) {
    free(c);
    return;
  }
  if (uv_cond_init(&c->wake)) {
    uv_mutex_destroy(&c->mu);
    free(c);
    return;
  }
  if (uv_cond_init(&c->idle)) {
    uv_cond_destroy(&c->wake);
    uv_mutex_destroy(&c->mu);
    free(c);
    return;
  }
  /* (Opened here, on the engine's thread, which closes it after the join.
   * A first read opens its WAL, which a checkpoint needs.) */
  if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, moor__store_vfs()) != SQLITE_OK ||
      sqlite3_busy_timeout(c->db, MOOR_STORE_BUSY_MS) != SQLITE_OK ||
      sqlite3_exec(c->db, sync, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(c->db, "PRAGMA schema_version", NULL, NULL, NULL) != SQLITE_OK || !is_wal(c->db) ||
      uv_thread_create(&c->thread, ckpt_main, c) != 0) {
    ckpt_free(c);
    return;
  }
  c->done_gen = (unsigned)-1; /* (no checkpoint yet: none in the WAL's first generation) */
  s->ckpt = c;
  sqlite3_wal_hook(s->db, on_wal_commit, s);
}

static void ckpt_stop(moor_store *s) {
  struct moor_store_ckpt *c = s->ckpt;
  if (!c) return;
  sqlite3_wal_hook(s->db, NULL, NULL);
  uv_mutex_lock(&c->mu);
  c->stop = 1;
  uv_cond_signal(&c->wake);
  uv_mutex_unlock(&c->mu);
  uv_thread_join(&c->thread);
  ckpt_free(c);
  s->ckpt = NULL;
}

void moor_store_stats(moor_store *s, moor_store_ckpt_stats *out) {
  memset(out, 0, sizeof *out);
  out->wal_frames = s->wal_frames;
  out->checkpoints_inline = s->ckpt_inline;
  out->checkpoints_finish = s->ckpt_finish;
  out->wal_restarts = s->wal_restarts;
  struct moor_store_ckpt *c = s->ckpt;
  if (!c) return;
  out->checkpointer = 1;
  uv_mutex_lock(&c->mu);
  out->checkpoints = c->runs;
  out->checkpoints_busy = c->busy;
  out->checkpointing = c->running || c->wanted || c->behind;
  uv_mutex_unlock(&c->mu);
}

/* SQLite counts every allocation under a global mutex for
 * sqlite3_memory_used(), which moor never reads: off, before SQLite starts
 * (a process that started it already keeps its own setting; the call is
 * then refused, harmlessly). About 110 mutex calls a 1-step run. */
static void configure_sqlite(void) { (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

int moor_store_open(moor_store *s, const char *path, int durability, int read_only) {
  static pthread_once_t configured = PTHREAD_ONCE_INIT;
  pthread_once(&configured, configure_sqlite);
  memset(s, 0, sizeof *s);
  if (!read_only) tune_malloc();
  /* (NOMUTEX: one thread uses the connection, so SQLite's per-call mutex is pure cost) */
  int flags = SQLITE_OPEN_NOMUTEX | (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  mode_t old = umask(077);
  int orc = sqlite3_open_v2(path, &s->db, flags, read_only ? NULL : moor__store_vfs());
  umask(old);
  if (orc != SQLITE_OK) {
    int rc = fail(s, MOOR_EIO, path);
    sqlite3_close(s->db);
    s->db = NULL;
    return rc;
  }
  sqlite3_busy_timeout(s->db, MOOR_STORE_BUSY_MS);
  /* No automatic checkpoint while opening: after a kill -9 the WAL can hold
   * thousands of frames, and the test write below (or a migration) would
   * copy them all into the file and sync it here, on the engine's thread
   * (2-4 ms after 1,000 steps); the checkpointer takes them over at the
   * first commit. (Restored when it does not start.) */
  if (!read_only && MOOR_STORE_CHECKPOINT_FRAMES > 0) sqlite3_wal_autocheckpoint(s->db, 0);
  if (read_only) {
    int version = read_version(s);
    int target = (int)(sizeof migrations / sizeof migrations[0]);
    /* A writer may be creating or migrating it this very moment: give it
     * MOOR_STORE_SCHEMA_WAIT_MS to commit its schema. */
    for (int i = 0; i < MOOR_STORE_SCHEMA_WAIT_MS / 20 && version >= 0 && version < target; i++) {
      sqlite3_sleep(20);
      version = read_version(s);
    }
    if (version < 0) return fail(s, MOOR_EIO, "read schema version");
    if (version == 0) {
      snprintf(s->err, sizeof s->err, "the file has no moor tables (an empty or foreign SQLite file)");
      return MOOR_ENOTFOUND;
    }
    if (version != target && !(version >= MOOR_SCHEMA_READ_OLDEST && version < target)) {
      snprintf(s->err, sizeof s->err,
               "database schema version %d, this moor reads %d; %s", version, target,
               version < target ? "run 'moor resume' once to upgrade it" : "use a newer moor");
      return MOOR_EIO;
    }
  } else {
    tighten(path);
  }
  /* NORMAL in WAL mode survives a killed process; FULL also survives power loss. */
  const char *sync = durability == MOOR_DURABILITY_FULL ? "PRAGMA synchronous=FULL"
                                                        : "PRAGMA synchronous=NORMAL";
  /* Switching a new file to WAL needs it to itself, and SQLite does not wait
   * for that with the busy handler: retry while another process opens it. */
  int rc = SQLITE_BUSY;
  for (int i = 0; !read_only && i < MOOR_STORE_WAL_WAIT_MS / 20 && (rc == SQLITE_BUSY || rc == SQLITE_LOCKED);
       i++) {
    rc = sqlite3_exec(s->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) sqlite3_sleep(20);
  }
  if ((!read_only && rc != SQLITE_OK) || sqlite3_exec(s->db, sync, NULL, NULL, NULL) != SQLITE_OK)
    return fail(s, MOOR_EIO, path);
  if (!read_only) {
    if (sqlite3_db_readonly(s->db, "main") != 1 && (rc = migrate(s))) return rc;
    if ((rc = check_writable(s, path, read_version(s)))) return rc;
  }
  if ((rc = prepare(s, &s->append,
                    "INSERT INTO events(run_id,seq,op,kind,name,payload,time) VALUES(?,?,?,?,?,?,?)")) ||
      (rc = prepare(s, &s->begin, "BEGIN IMMEDIATE")) ||
      (rc = prepare(s, &s->commit, "COMMIT")) ||
      (rc = prepare(s, &s->blob, "INSERT INTO blobs(run_id,seq,payload) VALUES(?,?,?)")) ||
      (rc = prepare(s, &s->events,
                    "SELECT seq,op,kind,name,payload,time FROM events WHERE run_id=? ORDER BY seq")))
    return rc;
  if (!read_only) ckpt_start(s, sync);
  if (!read_only && !s->ckpt) sqlite3_wal_autocheckpoint(s->db, SQLITE_DEFAULT_WAL_AUTOCHECKPOINT);
  return 0;
}

void moor_store_close(moor_store *s) {
  if (!s->db) return;
  ckpt_stop(s); /* (first: the engine's connection, closed last, checkpoints what is left) */
  if (s->in_tx) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_finalize(s->append);
  sqlite3_finalize(s->begin);
  sqlite3_finalize(s->commit);
  sqlite3_finalize(s->events);
  sqlite3_finalize(s->blob);
  for (size_t i = 0; i < sizeof s->stmts / sizeof s->stmts[0]; i++) {
    sqlite3_finalize(s->stmts[i].st);
    free(s->stmts[i].sql);
  }
  memset(s->stmts, 0, sizeof s->stmts);
  sqlite3_close(s->db);
  s->db = NULL;
}

/* What the checkpointer watches to tell when the engine idles. */
static void tx_opened(moor_store *s, int open) {
  if (!s->ckpt) return;
  if (open) atomic_fetch_add_explicit(&s->ckpt->txs, 1, memory_order_relaxed);
  atomic_store_explicit(&s->ckpt->in_tx, open, memory_order_relaxed);
}

int moor_store_begin(moor_store *s) {
  if (s->in_tx) return 0;
  int rc = sqlite3_step(s->begin);
  sqlite3_reset(s->begin);
  if (rc != SQLITE_DONE) return fail(s, MOOR_EIO, "begin");
  s->in_tx = 1;
  tx_opened(s, 1);
  return 0;
}

void moor_store_rollback(moor_store *s) {
  /* SQLite rolls some failures back itself (SQLITE_FULL, SQLITE_IOERR);
   * whatever is left open goes now, so the next write starts afresh. */
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  s->in_tx = 0;
  tx_opened(s, 0);
}

int moor_store_commit(moor_store *s) {
  if (!s->in_tx) return 0;
  int rc = sqlite3_step(s->commit);
  sqlite3_reset(s->commit);
  if (rc != SQLITE_DONE) {
    /* Nothing of the transaction was recorded: say why, then roll back. */
    rc = fail(s, MOOR_EIO, "commit");
    moor_store_rollback(s);
    return rc;
  }
  s->in_tx = 0;
  tx_opened(s, 0);
  return 0;
}

int moor_store_append(moor_store *s, const char *run_id, long long seq, long long op,
                      const char *kind, const char *name, const char *payload,
                      size_t payload_len, long long time_ms) {
  int rc = moor_store_begin(s);
  if (rc) return rc;
  int big = payload_len > MOOR_BLOB_MIN;
  if (big) {
    sqlite3_stmt *b = s->blob;
    sqlite3_bind_text(b, 1, run_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(b, 2, seq);
    sqlite3_bind_text(b, 3, payload, (int)payload_len, SQLITE_STATIC);
    rc = sqlite3_step(b);
    sqlite3_reset(b);
    sqlite3_clear_bindings(b);
    if (rc != SQLITE_DONE) return fail(s, MOOR_EIO, "append event payload");
  }
  sqlite3_stmt *st = s->append;
  sqlite3_bind_text(st, 1, run_id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, seq);
  if (op > 0) sqlite3_bind_int64(st, 3, op); else sqlite3_bind_null(st, 3);
  sqlite3_bind_text(st, 4, kind, -1, SQLITE_STATIC);
  if (name) sqlite3_bind_text(st, 5, name, -1, SQLITE_STATIC); else sqlite3_bind_null(st, 5);
  if (big) sqlite3_bind_text(st, 6, "", 0, SQLITE_STATIC);
  else sqlite3_bind_text(st, 6, payload, (int)payload_len, SQLITE_STATIC);
  sqlite3_bind_int64(st, 7, time_ms);
  rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_DONE) return fail(s, MOOR_EIO, "append event");
  return 0;
}
