/* Issue 13: the store's checkpoints run on their own thread (host/store.c,
 * "The checkpointer"), not inside the engine's commits. Built from store.c
 * itself with a small MOOR_STORE_CHECKPOINT_FRAMES (tests/CMakeLists.txt),
 * so a few hundred commits pass the threshold many times: the thread ran,
 * the WAL started over after its checkpoints and stayed bounded, also under
 * commits that never pause (the inline fallback at
 * MOOR_STORE_CHECKPOINT_MAX_FRAMES); every commit is in the file after
 * close, the close left no WAL behind, and a read-only open has no thread. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Commits that never pause: the thread's checkpoints may never let the WAL
 * start over, but it stays under the hard bound (commits checkpoint
 * themselves from MOOR_STORE_CHECKPOINT_MAX_FRAMES on). */
static void test_sustained_commits(void **state) {
  (void)state;
  char path[256], wal[300];
  db_path(path, sizeof path, "sustained.db");
  snprintf(wal, sizeof wal, "%s-wal", path);
  moor_store s;
  assert_int_equal(moor_store_open(&s, path, MOOR_DURABILITY_NORMAL, 0), 0);
  long long seq = 0;
  int frames_max = 0;
  for (int i = 0; i < 4 * MOOR_STORE_CHECKPOINT_MAX_FRAMES / 3; i++) {
    commit_one(&s, &seq);
    int f = stats_of(&s).wal_frames;
    if (f > frames_max) frames_max = f;
  }
  moor_store_ckpt_stats st = stats_of(&s);
  assert_true(st.checkpoints > 0);
  assert_true(frames_max < MOOR_STORE_CHECKPOINT_MAX_FRAMES + 16);
  assert_true(file_size(wal) <= 32 + (MOOR_STORE_CHECKPOINT_MAX_FRAMES + 16) * (long long)(page_size(&s) + 24));
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
