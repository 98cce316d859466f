/* Issue 13, item 2, through the public API: moor_tick_budget returns with
 * work left and the next calls finish it; moor_tick still drains; an event
 * callback that tries to drive or change the engine from inside its round
 * gets MOOR_EBUSY (and nothing happens), while reading is allowed.
 *
 *   test_tick AGENT_DIR   (tests/embed/agent: the tools work and quiz) */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moor.h"

static const char *agent_dir = "tests/embed/agent";
static char dir[] = "/tmp/moor-test-tick-XXXXXX";

static moor *open_engine(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  moor_config cfg = {.db_path = path};
  moor *m = NULL;
  int rc = moor_open(&m, &cfg);
  if (!rc) rc = moor_load_agent(m, agent_dir);
  if (rc) fail_msg("open %s: %s", path, moor_errmsg(m));
  return m;
}

static void expect_run(moor *m, const char *id, const char *status, const char *result) {
  char *st = NULL, *js = NULL;
  assert_int_equal(moor_run_info(m, id, &st, &js), 0);
  assert_string_equal(st, status);
  if (result) assert_string_equal(js, result);
  free(st);
  free(js);
}

static void test_budget_leaves_work(void **state) {
  (void)state;
  moor *m = open_engine("budget.db");
  char id[64];
  assert_int_equal(moor_call(m, "work", "{\"n\":2000}", id, sizeof id), 0);
  long long due = -5;
  assert_int_equal(moor_tick_budget(m, 1000, &due), 0); /* 1 ms: far less than 2,000 steps take */
  assert_int_equal(due, 0);                               /* work left: call again at once */
  expect_run(m, id, "running", NULL);
  int ticks = 1;
  for (; ticks < 200000; ticks++) {
    assert_int_equal(moor_tick_budget(m, 1000, &due), 0);
    if (due != 0) break;
  }
  assert_true(ticks > 2);
  assert_int_equal(due, -1); /* nothing waits any more */
  expect_run(m, id, "completed", "2000");
  moor_close(m);
}

static void test_tick_drains(void **state) {
  (void)state;
  moor *m = open_engine("drain.db");
  char id[64];
  long long due = -5;
  assert_int_equal(moor_call(m, "work", "{\"n\":300}", id, sizeof id), 0);
  assert_int_equal(moor_tick(m, &due), 0);
  assert_int_equal(due, -1);
  expect_run(m, id, "completed", "300");
  /* max_us <= 0 is no budget */
  assert_int_equal(moor_call(m, "work", "{\"n\":300}", id, sizeof id), 0);
  assert_int_equal(moor_tick_budget(m, 0, &due), 0);
  expect_run(m, id, "completed", "300");
  moor_close(m);
}

/* What a callback tried from inside the round, and what it got. */
struct reentry {
  moor *m;
  int events, started, tries;
  int tick, budget, run, call, cancel, answer, resume, session, load;
  int info, format;
  char run_id[64];
  char msg[512];
};

static void on_event(const moor_event *ev, void *ud) {
  struct reentry *r = ud;
  r->events++;
  if (!strcmp(ev->kind, "run.started")) r->started++;
  if (r->tries++) return; /* once is enough */
  moor *m = r->m;
  long long due;
  char id[64];
  r->tick = moor_tick(m, &due);
  snprintf(r->msg, sizeof r->msg, "%s", moor_errmsg(m));
  r->budget = moor_tick_budget(m, 1000, &due);
  r->run = moor_run(m);
  r->call = moor_call(m, "work", "{\"n\":1}", id, sizeof id);
  r->cancel = moor_cancel(m, ev->run_id);
  r->answer = moor_answer(m, "req_none", "left", NULL);
  r->resume = moor_resume_all(m);
  r->session = moor_session_send(m, "ses_none", "hi", NULL);
  r->load = moor_load_agent(m, agent_dir);
  char *st = NULL, *js = NULL;
  r->info = moor_run_info(m, ev->run_id, &st, &js);
  free(st);
  free(js);
  char *line = NULL;
  r->format = moor_format_event(m, ev, &line);
  free(line);
}

static void test_callback_cannot_reenter(void **state) {
  (void)state;
  moor *m = open_engine("reentry.db");
  struct reentry r = {.m = m};
  moor_on_event(m, on_event, &r);
  assert_int_equal(moor_call(m, "work", "{\"n\":3}", r.run_id, sizeof r.run_id), 0);
  long long due;
  assert_int_equal(moor_tick(m, &due), 0);
  assert_int_equal(r.tick, MOOR_EBUSY);
  assert_non_null(strstr(r.msg, "moor_tick called from an event callback"));
  assert_int_equal(r.budget, MOOR_EBUSY);
  assert_int_equal(r.run, MOOR_EBUSY);
  assert_int_equal(r.call, MOOR_EBUSY);
  assert_int_equal(r.cancel, MOOR_EBUSY);
  assert_int_equal(r.answer, MOOR_EBUSY);
  assert_int_equal(r.resume, MOOR_EBUSY);
  assert_int_equal(r.session, MOOR_EBUSY);
  assert_int_equal(r.load, MOOR_EBUSY);
  assert_int_equal(r.info, 0);   /* reading is allowed */
  assert_int_equal(r.format, 0);
  /* Nothing the refused calls asked for happened: one run, not cancelled,
   * each of its events seen once (run.started, 3 steps, run.completed). */
  assert_int_equal(r.started, 1);
  assert_int_equal(r.events, 5);
  expect_run(m, r.run_id, "completed", "3");
  /* After the round the same calls work. */
  char id[64];
  moor_on_event(m, NULL, NULL);
  assert_int_equal(moor_call(m, "work", "{\"n\":1}", id, sizeof id), 0);
  assert_int_equal(moor_run(m), 0);
  expect_run(m, id, "completed", "1");
  assert_string_equal(moor_strerror(MOOR_EBUSY), "engine busy in a round");
  moor_close(m);
}

int main(int argc, char **argv) {
  if (argc > 1) agent_dir = argv[1];
  if (!mkdtemp(dir)) return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_budget_leaves_work),
    cmocka_unit_test(test_tick_drains),
    cmocka_unit_test(test_callback_cannot_reenter),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return rc;
}
