/* An embedder of the installed libmoor (test_install.sh builds it with
 * `pkg-config --cflags --libs moor`): open an engine, load an agent, start a
 * workflow tool's run and drive it with moor_tick until it settles.
 *   embed AGENT_DIR DB TOOL JSON */
#include <moor.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: embed AGENT_DIR DB TOOL JSON\n");
    return 2;
  }
  moor *m = NULL;
  moor_config cfg = {.db_path = argv[2]};
  char run[64];
  if (moor_open(&m, &cfg) || moor_load_agent(m, argv[1]) || moor_call(m, argv[3], argv[4], run, sizeof run)) {
    fprintf(stderr, "embed: %s\n", m ? moor_errmsg(m) : "out of memory");
    moor_close(m);
    return 1;
  }
  int ticks = 0;
  for (; ticks < 10000; ticks++) { /* a game's frames: never blocks */
    long long due = -1;
    if (moor_tick(m, &due)) {
      fprintf(stderr, "embed: %s\n", moor_errmsg(m));
      moor_close(m);
      return 1;
    }
    if (due < 0) break;
    struct timespec ts = {0, (due > 5 ? 5 : due) * 1000000L};
    nanosleep(&ts, NULL);
  }
  char *status = NULL, *json = NULL;
  int rc = moor_run_info(m, run, &status, &json);
  if (!rc) printf("%s %s ticks>1:%s\n", status, json, ticks > 1 ? "yes" : "no");
  free(status);
  free(json);
  moor_close(m);
  return rc ? 1 : 0;
}
