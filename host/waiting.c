/* moor_describe_waiting: what each unfinished run waits on (a question, a
 * hook or webhook, a child run, its session's next message), one line per
 * run, read straight from the database for `moor resume` to say why it
 * stopped. */
#include "host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One column of a one-parameter query, each row through fn. */
static int each_row(moor *m, const char *sql, const char *arg, void (*fn)(FILE *, const char *, const char *, void *),
                    FILE *f, void *ud) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(m->store.db, sql, -1, &st, NULL) != SQLITE_OK)
    return moor__set_err(m, MOOR_EIO, "cannot read the database: %s", sqlite3_errmsg(m->store.db));
  if (arg) sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
  int n = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *a = (const char *)sqlite3_column_text(st, 0);
    const char *b = sqlite3_column_count(st) > 1 ? (const char *)sqlite3_column_text(st, 1) : NULL;
    fn(f, a ? a : "", b ? b : "", ud);
    n++;
  }
  sqlite3_finalize(st);
  return n;
}

typedef struct waits {
  const char *run, *tool;
  int n;
} waits;

static void wait_line(FILE *f, waits *w, const char *what) {
  if (w->n++) fprintf(f, "  and on %s\n", what);
  else fprintf(f, "%s (%s) waits on %s\n", w->run, w->tool, what);
}

static void on_question(FILE *f, const char *req, const char *unused, void *ud) {
  (void)unused;
  char what[256];
  snprintf(what, sizeof what, "a question %s: 'moor answer %s OPTION' (or --text TEXT)", req, req);
  wait_line(f, ud, what);
}

static void on_hook(FILE *f, const char *kind, const char *count, void *ud) {
  waits *w = ud;
  char what[256];
  if (!strcmp(w->tool, "moor__session"))
    snprintf(what, sizeof what, "its next message: 'moor chat' or 'moor dev' continues it");
  else
    snprintf(what, sizeof what, "%s %s%s: 'moor dev' serves %s", count, kind, strcmp(count, "1") ? "s" : "",
             !strcmp(kind, "webhook") ? "its webhook URL" : "POST /v1/hooks/TOKEN");
  wait_line(f, ud, what);
}

/* A sleep not yet fired: when it falls due (local time) and how far off. */
static void on_timer(FILE *f, const char *due_text, const char *unused, void *ud) {
  (void)unused;
  char what[256], when[64];
  long long due = atoll(due_text), left = due - (long long)time(NULL) * 1000;
  time_t t = (time_t)(due / 1000);
  struct tm tm;
  if (!localtime_r(&t, &tm) || !strftime(when, sizeof when, left < 86400000 ? "%H:%M:%S" : "%Y-%m-%d %H:%M", &tm))
    snprintf(when, sizeof when, "%s ms", due_text);
  long long s = left > 0 ? (left + 999) / 1000 : 0;
  if (s < 120) snprintf(what, sizeof what, "a sleep until %s (%llds)", when, s);
  else if (s < 7200) snprintf(what, sizeof what, "a sleep until %s (%lldm)", when, (s + 30) / 60);
  else snprintf(what, sizeof what, "a sleep until %s (%lldh)", when, (s + 1800) / 3600);
  wait_line(f, ud, what);
}

static void on_child(FILE *f, const char *child, const char *tool, void *ud) {
  char what[256];
  snprintf(what, sizeof what, "its child run %s (%s)", child, tool);
  wait_line(f, ud, what);
}

typedef struct run_list {
  char **ids, **tools;
  size_t n, cap;
  int oom;
} run_list;

static void on_run(FILE *f, const char *id, const char *tool, void *ud) {
  (void)f;
  run_list *l = ud;
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **ids = realloc(l->ids, cap * sizeof *ids);
    if (ids) l->ids = ids;
    char **tools = ids ? realloc(l->tools, cap * sizeof *tools) : NULL;
    if (tools) l->tools = tools;
    if (!ids || !tools) {
      l->oom = 1;
      return;
    }
    l->cap = cap;
  }
  l->ids[l->n] = strdup(id);
  l->tools[l->n] = strdup(tool);
  if (!l->ids[l->n] || !l->tools[l->n]) {
    free(l->ids[l->n]);
    free(l->tools[l->n]);
    l->oom = 1;
    return;
  }
  l->n++;
}

int moor_describe_waiting(moor *m, char **out) {
  *out = NULL;
  run_list l = {0};
  int rc = each_row(m, "SELECT id, tool FROM runs WHERE status='running' ORDER BY started, id", NULL, on_run, NULL, &l);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = rc >= 0 && !l.oom && l.n ? open_memstream(&buf, &len) : NULL;
  if (rc >= 0 && !l.oom && l.n && !f) rc = MOOR_ENOMEM;
  for (size_t i = 0; f && i < l.n && rc >= 0; i++) {
    waits w = {l.ids[i], l.tools[i], 0};
    if ((rc = each_row(m, "SELECT request_id FROM inputs WHERE run_id=? AND status='pending' ORDER BY created, "
                       "request_id", w.run, on_question, f, &w)) < 0 ||
        (rc = each_row(m, "SELECT kind, count(*) FROM hooks WHERE run_id=? AND closed=0 GROUP BY kind ORDER BY kind",
                       w.run, on_hook, f, &w)) < 0 ||
        (rc = each_row(m, "SELECT id, tool FROM runs WHERE parent_id=? AND status='running' ORDER BY started, id",
                       w.run, on_child, f, &w)) < 0 ||
        (rc = each_row(m, "SELECT json_extract(e.payload, '$.due') FROM event_log e WHERE e.run_id=? AND "
                       "e.kind='timer.scheduled' AND NOT EXISTS (SELECT 1 FROM events g WHERE g.run_id=e.run_id "
                       "AND g.op=e.op AND g.kind='timer.fired') ORDER BY e.seq", w.run, on_timer, f, &w)) < 0)
      break;
    if (!w.n) wait_line(f, &w, "nothing this process can see (a cancel's cleanup, or a step elsewhere)");
  }
  if (l.oom) rc = MOOR_ENOMEM;
  for (size_t i = 0; i < l.n; i++) {
    free(l.ids[i]);
    free(l.tools[i]);
  }
  free(l.ids);
  free(l.tools);
  if (f && fclose(f) != 0 && rc >= 0) rc = MOOR_ENOMEM;
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  return 0;
}

/* The CLI's views (lua/moor/cli.lua through moor.host): fn's first result,
 * a string, copied into *out (cleaned for a terminal unless as_json); nil
 * with nothing after it leaves *out NULL; nil and an error is that error. */
static int view_call(moor *m, const char *fn, int nargs, int as_json, char **out) {
  *out = NULL;
  int rc = moor__call_engine(m, fn, nargs, 2);
  if (rc) return rc;
  lua_State *L = m->L;
  if (lua_type(L, -2) == LUA_TSTRING) {
    if (!(*out = strdup(lua_tostring(L, -2)))) rc = MOOR_ENOMEM;
    else if (!as_json) moor_term_clean(*out);
  } else if (!lua_isnil(L, -1)) {
    rc = moor__lua_error(m, -1, MOOR_EINVAL);
  }
  lua_pop(L, 2);
  return rc;
}

int moor_list_runs_filtered(moor *m, const moor_run_filter *f, int as_json, char **out) {
  lua_State *L = m->L;
  lua_pushboolean(L, as_json);
  if (f && f->status) lua_pushstring(L, f->status);
  else lua_pushnil(L);
  if (f && f->tool) lua_pushstring(L, f->tool);
  else lua_pushnil(L);
  if (f && f->limit > 0) lua_pushinteger(L, f->limit);
  else lua_pushnil(L);
  return view_call(m, "cli_runs", 4, as_json, out);
}

int moor_list_inputs(moor *m, int as_json, char **out) {
  lua_pushboolean(m->L, as_json);
  return view_call(m, "cli_inputs", 1, as_json, out);
}

int moor_run_waiting(moor *m, const char *run_id, char **out) {
  lua_pushstring(m->L, run_id);
  return view_call(m, "cli_waiting", 1, 0, out);
}
