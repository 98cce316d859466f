/* Issue 13: the store's checkpoints run on their own thread (host/store.c,
 * "The checkpointer"), not inside the engine's commits. Built from store.c
 * itself with a small MOOR_STORE_CHECKPOINT_FRAMES (tests/CMakeLists.txt),
 * so a few hundred commits pass the threshold many times: the thread ran,
 * the WAL started over after its checkpoints and stayed bounded, also under
 * commits that never pause (the thread's passes and a commit's finish of
 * what it leaves; the inline fallback at MOOR_STORE_CHECKPOINT_MAX_FRAMES);
 * an open after a kill -9 copies nothing on the engine's thread and reads
 * the WAL's frames ahead while it recovers; every commit is in the file after
 * close, the close left no WAL behind, and a read-only open has no thread. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "moor.h"
#include "store.h"

#if MOOR_STORE_CHECKPOINT_FRAMES > 200
#error "build this test with a small MOOR_STORE_CHECKPOINT_FRAMES (tests/CMakeLists.txt)"
#endif

static char dir[] = "/tmp/moor-test-store-XXXXXX";
static char payload[6000]; /* two overflow pages and a leaf: about 3 frames a commit */

static void db_path(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

static long long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static size_t read_all(const char *path, char **out) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc(n > 0 ? (size_t)n : 1);
  assert_non_null(*out);
  assert_int_equal(fread(*out, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return (size_t)n;
}

static int page_size(moor_store *s) {
  sqlite3_stmt *st = NULL;
  int n = 0;
  if (sqlite3_prepare_v2(s->db, "PRAGMA page_size", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return n;
}

/* One commit of one event (run "r", the next seq). */
static void commit_one(moor_store *s, long long *seq) {
  ++*seq;
  assert_int_equal(moor_store_append(s, "r", *seq, *seq, "step.result", "s", payload, sizeof payload, 0), 0);
  assert_int_equal(moor_store_commit(s), 0);
}

static moor_store_ckpt_stats stats_of(moor_store *s) {
  moor_store_ckpt_stats st;
  moor_store_stats(s, &st);
  return st;
}

/* The file as another process would read it after close: every event, once,
 * and intact. */
static void check_file(const char *path, long long events) {
  char wal[300];
  snprintf(wal, sizeof wal, "%s-wal", path);
  assert_int_equal(file_size(wal), -1); /* the last connection's close folded it in and removed it */
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*), count(DISTINCT seq), max(seq) FROM events", -1, &st, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int64(st, 0), events);
  assert_int_equal(sqlite3_column_int64(st, 1), events);
  assert_int_equal(sqlite3_column_int64(st, 2), events);
  sqlite3_finalize(st);
  assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

/* Commits with a pause after each threshold passed (as a host between
 * bursts): the thread checkpoints each time, and the next commit starts the
 * WAL over, so it never holds much more than the threshold. */
static void test_paced_commits(void **state) {
  (void)state;
  char path[256], wal[300];
  db_path(path, sizeof path, "paced.db");
  snprintf(wal, sizeof wal, "%s-wal", path);
  moor_store s;
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 0), 0);
  assert_int_equal(stats_of(&s).checkpointer, 1);
  long long seq = 0, wal_max = 0, written = 0;
  int frames_max = 0, prev = 0;
  enum { BURSTS = 10 };
  for (int b = 0; b < BURSTS; b++) {
    long before = stats_of(&s).checkpoints;
    for (int i = 0; i < 1000 && (i == 0 || stats_of(&s).wal_frames < MOOR_STORE_CHECKPOINT_FRAMES); i++) {
      commit_one(&s, &seq);
      int f = stats_of(&s).wal_frames;
      written += f < prev ? f : f - prev; /* (fewer: the WAL started over) */
      prev = f;
      if (f > frames_max) frames_max = f;
    }
    assert_true(stats_of(&s).wal_frames >= MOOR_STORE_CHECKPOINT_FRAMES);
    /* the thread ran one, and caught up once the commits stopped, within 5 s */
    for (int i = 0; i < 5000 && (stats_of(&s).checkpoints == before || stats_of(&s).checkpointing); i++) sleep_ms(1);
    assert_true(stats_of(&s).checkpoints > before);
    assert_false(stats_of(&s).checkpointing);
    long long size = file_size(wal);
    if (size > wal_max) wal_max = size;
  }
  moor_store_ckpt_stats st = stats_of(&s);
  assert_true(st.checkpoints >= BURSTS);
  assert_int_equal(st.checkpoints_inline, 0);
  /* The WAL started over after each checkpoint: never much more than the
   * threshold (and one commit), where it would hold every frame written. */
  assert_true(frames_max < 2 * MOOR_STORE_CHECKPOINT_FRAMES);
  long long frame = page_size(&s) + 24;
  assert_true(wal_max <= 32 + 2 * MOOR_STORE_CHECKPOINT_FRAMES * frame);
  assert_true(written >= BURSTS * MOOR_STORE_CHECKPOINT_FRAMES); /* (what was written: far more) */
  moor_store_close(&s);
  check_file(path, seq);
}

/* Commits that never pause: the thread's checkpoints alone would never let
 * the WAL start over (each next transaction begins before one ends), so it
 * grew to MOOR_STORE_CHECKPOINT_MAX_FRAMES each time, and a kill -9 left all
 * of it for the next open to recover. Now a commit that finds the thread
 * idle with at most MOOR_STORE_CHECKPOINT_FINISH_FRAMES frames left copies
 * them (tests/CMakeLists.txt sets it high here: the thread's passes converge
 * only as fast as its syncs, which a loaded machine slows), and the WAL
 * starts over before the hard bound. A round where the thread got no CPU
 * meanwhile proves nothing: up to three rounds, one must show it. */
static int sustained_round(int round) {
  char path[256], wal[300], name[32];
  snprintf(name, sizeof name, "sustained%d.db", round);
  db_path(path, sizeof path, name);
  snprintf(wal, sizeof wal, "%s-wal", path);
  moor_store s;
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 0), 0);
  long long seq = 0;
  enum { N = 4 * MOOR_STORE_CHECKPOINT_MAX_FRAMES / 3 }; /* (about 3 frames a commit: the hard bound four times) */
  int frames_max = 0, restarts = 0, prev = 0;
  for (int i = 0; i < N; i++) {
    commit_one(&s, &seq);
    int f = stats_of(&s).wal_frames;
    restarts += f < prev;
    prev = f;
    if (f > frames_max) frames_max = f;
  }
  moor_store_ckpt_stats st = stats_of(&s);
  assert_true(st.checkpoints > 0);
  assert_true(frames_max < MOOR_STORE_CHECKPOINT_MAX_FRAMES + 16);
  assert_true(file_size(wal) <= 32 + (MOOR_STORE_CHECKPOINT_MAX_FRAMES + 16) * (long long)(page_size(&s) + 24));
  print_message("round %d: %d restarts of the WAL, %ld at the hard bound, %ld after a commit's finish; "
                "%ld checkpoints by the thread\n", round, restarts, st.checkpoints_inline, st.checkpoints_finish,
                st.checkpoints);
  moor_store_close(&s);
  check_file(path, seq);
  /* (the fallback alone: as many restarts as checkpoints at the hard bound) */
  return st.checkpoints_finish > 0 && restarts > st.checkpoints_inline;
}

static void test_sustained_commits(void **state) {
  (void)state;
  int shown = 0;
  for (int round = 0; round < 3 && !shown; round++) shown = sustained_round(round);
  assert_true(shown);
}

/* A kill -9 leaves a WAL of more than SQLite's automatic checkpoint's 1,000
 * frames. Opening the store must not copy them into the database file then
 * (the test write's commit did, with two syncs, on the engine's thread: most
 * of a restart's SQLite time after 1,000 steps); the checkpointer copies them
 * after the first commit, and nothing is lost. */
static void test_open_after_kill(void **state) {
  (void)state;
  char path[256], wal[300];
  db_path(path, sizeof path, "killed.db");
  snprintf(wal, sizeof wal, "%s-wal", path);
  moor_store s;
  long long seq = 0;
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 0), 0);
  commit_one(&s, &seq);
  moor_store_close(&s);
  enum { COMMITS = 700 }; /* (about 2,000 frames) */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* a writer with no checkpoint at all, killed with its WAL */
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK || sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL) ||
        sqlite3_wal_autocheckpoint(db, 0) ||
        sqlite3_prepare_v2(db, "INSERT INTO events(run_id,seq,op,kind,name,payload,time) VALUES('r',?,?,'step.result','s',?,0)",
                           -1, &ins, NULL))
      _exit(2);
    for (int i = 2; i <= COMMITS + 1; i++) {
      sqlite3_bind_int(ins, 1, i);
      sqlite3_bind_int(ins, 2, i);
      sqlite3_bind_text(ins, 3, payload, 1000, SQLITE_STATIC);
      if (sqlite3_step(ins) != SQLITE_DONE) _exit(3);
      sqlite3_reset(ins);
      /* (a second page a commit: a blob as the store writes for a large payload) */
      char sql[128];
      snprintf(sql, sizeof sql, "INSERT INTO blobs(run_id,seq,payload) VALUES('b',%d,randomblob(3000))", i);
      if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) _exit(4);
    }
    kill(getpid(), SIGKILL);
    _exit(5);
  }
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
  long long frame = 4096 + 24;
  assert_true(file_size(wal) > 32 + 1000 * frame); /* (past SQLite's automatic checkpoint) */
  char *before = NULL, *after = NULL;
  size_t n_before = read_all(path, &before);
  long long reads = moor__store_vfs_wal_reads();
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 0), 0);
  reads = moor__store_vfs_wal_reads() - reads;
  assert_int_equal(stats_of(&s).checkpointer, 1);
  size_t n_after = read_all(path, &after);
  /* The recovery of the WAL-index read its frames ahead, in reads of
   * MOOR_STORE_WAL_READ_AHEAD bytes, not one read a frame (over 1,000). */
  long long frames = (file_size(wal) - 32) / frame;
  print_message("recovery: %lld frames, %lld reads of the WAL\n", frames, reads);
  assert_true(reads > 0);
  assert_true(reads < frames / 20);
  /* the database file is as the kill left it: the open copied nothing into it */
  assert_int_equal(n_after, n_before);
  assert_memory_equal(after, before, n_before);
  free(before);
  free(after);
  seq = COMMITS + 1;
  commit_one(&s, &seq);
  moor_store_close(&s);
  check_file(path, seq);
}

/* Closing while the thread may be in a checkpoint: it is joined, and loses
 * nothing. */
static void test_close_while_checkpointing(void **state) {
  (void)state;
  char path[256];
  db_path(path, sizeof path, "close.db");
  long long seq = 0;
  for (int round = 0; round < 5; round++) {
    moor_store s;
    assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_FULL, 0), 0);
    assert_int_equal(stats_of(&s).checkpointer, 1);
    for (int i = 0; i < 1000 && (i == 0 || stats_of(&s).wal_frames < MOOR_STORE_CHECKPOINT_FRAMES); i++)
      commit_one(&s, &seq);
    moor_store_close(&s); /* (the thread was just woken) */
    check_file(path, seq);
  }
}

static void test_read_only_has_no_thread(void **state) {
  (void)state;
  char path[256];
  db_path(path, sizeof path, "ro.db");
  moor_store s;
  long long seq = 0;
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 0), 0);
  commit_one(&s, &seq);
  moor_store_close(&s);
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 1), 0);
  assert_int_equal(stats_of(&s).checkpointer, 0);
  moor_store_close(&s);
}

/* SQLite's allocation counting (a global mutex each allocation) is off once
 * a store has opened: sqlite3_memory_used() stays at zero while it works. */
static void test_no_memory_counting(void **state) {
  (void)state;
  char path[256];
  db_path(path, sizeof path, "memstatus.db");
  moor_store s;
  long long seq = 0;
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 0), 0);
  for (int i = 0; i < 20; i++) commit_one(&s, &seq);
  assert_int_equal(sqlite3_memory_used(), 0);
  moor_store_close(&s);
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (char)('a' + i % 26);
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_paced_commits),
    cmocka_unit_test(test_sustained_commits),
    cmocka_unit_test(test_open_after_kill),
    cmocka_unit_test(test_close_while_checkpointing),
    cmocka_unit_test(test_read_only_has_no_thread),
    cmocka_unit_test(test_no_memory_counting),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return rc;
}
