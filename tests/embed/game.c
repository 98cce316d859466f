/* An embedding example: a "game loop" at 60 frames per second that links
 * libmoor and gives the engine a budget of each frame (moor_tick_budget).
 * Runs sleep (work with a nap), ask (quiz: the loop answers a few frames
 * after the question appears, as a player would) and complete; one long run
 * (3,000 steps) is spread over frames by the budget. Prints the engine's
 * cost per frame (median, p99, max µs); exits 1 when a run did not end as
 * expected or the frames ran out. Nothing here asserts on time.
 *
 *   moor_embed_game AGENT_DIR DB_PATH [BUDGET_US [MAX_FRAMES]]
 *
 * The event callback only notes what it saw: calling back into the engine
 * from inside its round is refused (MOOR_EBUSY, see moor.h). */
#include "moor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NQUIZ = 4, NNAP = 4, MAXQ = 16, ANSWER_AFTER = 5 };

struct game {
  int frame;
  int nq;
  struct {
    char id[128];
    int seen_at;   /* the frame the question appeared in */
    int n;         /* "Question N": the quiz run's input */
    int answered;
  } q[MAXQ];
  int completed, failed;
};

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* "requestId":"req_..." from an input.requested payload. */
static void request_id(const char *payload, char *out, size_t size) {
  out[0] = 0;
  const char *p = strstr(payload, "\"requestId\":\"");
  if (!p) return;
  p += 13;
  size_t n = 0;
  while (p[n] && p[n] != '"' && n + 1 < size) n++;
  memcpy(out, p, n);
  out[n] = 0;
}

static void on_event(const moor_event *ev, void *ud) {
  struct game *g = ud;
  if (!strcmp(ev->kind, "input.requested") && g->nq < MAXQ) {
    request_id(ev->payload, g->q[g->nq].id, sizeof g->q[g->nq].id);
    const char *p = strstr(ev->payload, "Question ");
    g->q[g->nq].n = p ? atoi(p + 9) : -1;
    g->q[g->nq].seen_at = g->frame;
    g->nq++;
  } else if (!strcmp(ev->kind, "run.completed")) {
    g->completed++;
  } else if (!strcmp(ev->kind, "run.failed")) {
    g->failed++;
  }
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

static int die(moor *m, const char *what) {
  fprintf(stderr, "game: %s: %s\n", what, moor_errmsg(m));
  moor_close(m);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s AGENT_DIR DB_PATH [BUDGET_US [MAX_FRAMES]]\n", argv[0]);
    return 2;
  }
  long long budget = argc > 3 ? atoll(argv[3]) : 2000;
  int max_frames = argc > 4 ? atoi(argv[4]) : 3600; /* a minute at 60 fps */
  moor_config cfg = {.db_path = argv[2]};
  moor *m = NULL;
  if (moor_open(&m, &cfg)) return die(m, "open");
  if (moor_load_agent(m, argv[1])) return die(m, "load");
  struct game g = {0};
  moor_on_event(m, on_event, &g);

  char ids[1 + NNAP + NQUIZ][64], input[64];
  int nruns = 0;
  if (moor_call(m, "work", "{\"n\":3000}", ids[nruns++], sizeof ids[0])) return die(m, "call work");
  for (int i = 0; i < NNAP; i++) {
    snprintf(input, sizeof input, "{\"n\":%d,\"nap\":\"%dms\"}", 10 * (i + 1), 50 + 50 * i);
    if (moor_call(m, "work", input, ids[nruns++], sizeof ids[0])) return die(m, "call work");
  }
  for (int i = 0; i < NQUIZ; i++) {
    snprintf(input, sizeof input, "{\"n\":%d}", i);
    if (moor_call(m, "quiz", input, ids[nruns++], sizeof ids[0])) return die(m, "call quiz");
  }

  const long long frame_us = 1000000 / 60;
  long long *cost = calloc((size_t)max_frames, sizeof *cost);
  if (!cost) return die(m, "out of memory");
  int left_work = 0; /* frames that ended with work left (due 0) */
  long long next = now_us();
  for (g.frame = 0; g.frame < max_frames && g.completed + g.failed < nruns; g.frame++) {
    /* The game's own work would go here; then the engine's share. */
    long long due, t0 = now_us();
    if (moor_tick_budget(m, budget, &due)) return die(m, "tick");
    cost[g.frame] = now_us() - t0;
    if (due == 0) left_work++;
    /* A player answers each question a few frames after it appeared: after
     * the tick (never from the callback). */
    for (int i = 0; i < g.nq; i++) {
      if (g.q[i].answered || g.frame - g.q[i].seen_at < ANSWER_AFTER) continue;
      if (moor_answer(m, g.q[i].id, g.q[i].n % 2 ? "right" : "left", NULL)) return die(m, "answer");
      g.q[i].answered = 1;
    }
    next += frame_us;
    long long wait = next - now_us();
    if (wait > 0) {
      struct timespec ts = {wait / 1000000, (wait % 1000000) * 1000};
      nanosleep(&ts, NULL);
    }
  }
  int frames = g.frame, bad = 0;
  qsort(cost, (size_t)frames, sizeof *cost, cmp_ll);
  printf("C game loop: %d frames at 60 fps, %d runs, budget %lld us a frame (%d frames left work for the next)\n",
         frames, nruns, budget, left_work);
  if (frames > 0)
    printf("  engine per frame: median %lld us, p99 %lld us, max %lld us\n", cost[frames / 2],
           cost[(frames * 99) / 100 < frames ? (frames * 99) / 100 : frames - 1], cost[frames - 1]);
  free(cost);

  /* Correctness: every run ended, with its result. */
  static const char *want_quiz[] = {"\"answered left\"", "\"answered right\""};
  for (int i = 0; i < nruns; i++) {
    char *st = NULL, *js = NULL, want[64];
    if (moor_run_info(m, ids[i], &st, &js)) return die(m, "run info");
    if (i == 0) snprintf(want, sizeof want, "3000");
    else if (i <= NNAP) snprintf(want, sizeof want, "%d", 10 * i);
    else snprintf(want, sizeof want, "%s", want_quiz[(i - 1 - NNAP) % 2]);
    if (strcmp(st, "completed") || strcmp(js, want)) {
      fprintf(stderr, "game: run %s is %s %s, wanted completed %s\n", ids[i], st, js, want);
      bad = 1;
    }
    free(st);
    free(js);
  }
  if (g.nq != NQUIZ) {
    fprintf(stderr, "game: %d questions seen, wanted %d\n", g.nq, NQUIZ);
    bad = 1;
  }
  if (frames >= max_frames) {
    fprintf(stderr, "game: the runs did not end within %d frames\n", max_frames);
    bad = 1;
  }
  if (left_work == 0) {
    fprintf(stderr, "game: no frame left work for the next: the budget never cut a round\n");
    bad = 1;
  }
  moor_close(m);
  return bad;
}
