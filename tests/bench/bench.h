/* Shared by the engine benchmark's two files (moor_bench): bench.c (the
 * figures of issue 13's targets, min-max over rounds on fresh databases;
 * the SQLite counters; main) and bench_agents.c (sessions, schema patterns,
 * tasks and the workflow tool, taken once). */
#ifndef MOOR_BENCH_H
#define MOOR_BENCH_H

#include "moor.h"

extern const char *task_agent, *workflow_agent; /* agent folders (argv) */

double now_s(void); /* CLOCK_MONOTONIC, s */
long rss_kib(void); /* this process's resident memory */
void check(moor *m, int rc); /* exits with moor_errmsg(m) unless rc is 0 */
moor *open_db(const char *name, int durability); /* name in the run's temporary folder, the bench agent loaded */
moor *open_agent_db(const char *name, int durability, const char *agent_dir);

void bench_agents(void); /* sections 5-9, printed as they are taken */

#endif
