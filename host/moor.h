/* moor: a durable host for agent tools written in Lua.
 *
 * This is the one public header. An embedder (the `moor` CLI, a game loop, an
 * edge host) opens an engine on a SQLite file, loads an agent directory, starts
 * calls and drives the engine with moor_tick (non-blocking) or moor_run
 * (blocking). Every function returns 0 or a negative MOOR_E* code; the human
 * message for the last failure is kept in the engine (moor_errmsg). */
#ifndef MOOR_H
#define MOOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MOOR_API __attribute__((visibility("default")))
#else
#define MOOR_API
#endif

#define MOOR_VERSION "0.1.0"

/* The error codes: XX(name, value, what moor_strerror says). One table (as
 * libuv's UV_ERRNO_MAP), so no code can be without its message. */
#define MOOR_ERRNO_MAP(XX)                                                                                         \
  XX(EINVAL, -1, "invalid argument")                        /* bad argument or usage */                            \
  XX(ENOMEM, -2, "out of memory")                           /* out of memory */                                    \
  XX(EIO, -3, "storage error")                              /* SQLite or file-system failure */                    \
  XX(ELOCKED, -4, "database in use by another process")     /* another process drives this database */             \
  XX(ELOAD, -5, "agent failed to load")                     /* the agent directory has broken files */             \
  XX(EJSON, -6, "invalid JSON")                             /* a value is not JSON, or text is not valid JSON */   \
  XX(ENOTFOUND, -7, "not found")                            /* unknown tool or run */                              \
  XX(ELUA, -8, "engine error")                              /* a Lua error inside the engine */                    \
  XX(ETOOL, -9, "tool failed")                              /* the tool call failed (the run settled as failed) */ \
  XX(ECONFLICT, -10, "conflict")                            /* already answered, withdrawn or settled */ \
  XX(EBUSY, -11, "engine busy in a round")                  /* called from an event callback (see moor_on_event) */

enum {
  MOOR_OK = 0,
#define MOOR__ERRNO_ENUM(name, value, message) MOOR_##name = value,
  MOOR_ERRNO_MAP(MOOR__ERRNO_ENUM)
#undef MOOR__ERRNO_ENUM
};

enum { MOOR_DURABILITY_NORMAL = 0, MOOR_DURABILITY_FULL = 1 };

typedef struct moor moor;

typedef struct moor_config {
  const char *db_path;    /* NULL: $MOOR_DB, else .moor/moor.db */
  int durability;         /* MOOR_DURABILITY_*; NORMAL survives a killed process */
  const char *lua_dir;    /* NULL: $MOOR_LUA_DIR, else <prefix>/share/lua/5.4 of the
                           * installed program (or libmoor.so), else, for a program
                           * run from the build tree, the source tree's lua/ */
  int read_only;          /* 1: inspect only (runs, logs): takes no lock, opens the
                           * file read-only and creates nothing (MOOR_ENOTFOUND
                           * "no database at ..." when it is missing) */
  int no_input;           /* 1: runs started by moor_call have no channel for
                           * questions: ctx.ask answers "unavailable" */
  size_t body_limit;      /* HTTP request body limit; 0: $MOOR_BODY_LIMIT or 1 MiB */
  unsigned http_timeout_ms; /* a started request must finish within; 0: 10 s */
} moor_config;

/* One event appended to a run's log, as it is committed. */
typedef struct moor_event {
  const char *run_id;
  long long seq;          /* 0: a live-only event (message.delta), never in the log */
  const char *kind;       /* run.started, step.result, progress, run.completed, ... */
  const char *name;       /* step or tool name; may be NULL */
  const char *payload;    /* JSON */
} moor_event;

/* The callback runs inside the engine's round (moor_tick, moor_run,
 * moor_serve), as each event is committed. It may read: moor_run_info,
 * moor_list_runs, moor_list_events, moor_format_event, moor_format_input,
 * moor_describe_waiting, moor_errmsg, moor_strerror, moor_term_clean,
 * moor_find_server, moor_loop, moor_on_event and moor_stop. Whatever drives
 * or changes the engine (moor_tick, moor_tick_budget, moor_run, moor_serve,
 * moor_call, moor_resume_all, moor_load_agent, moor_answer, moor_answer_line,
 * moor_cancel, moor_session_start, moor_session_send, moor_session_line,
 * moor_test) answers MOOR_EBUSY from inside it, and does nothing: note what
 * to do and do it after the round returns. Never moor_close from it. */
typedef void (*moor_event_cb)(const moor_event *ev, void *ud);

MOOR_API int moor_open(moor **out, const moor_config *cfg);
MOOR_API void moor_close(moor *m);
MOOR_API const char *moor_errmsg(const moor *m);
MOOR_API const char *moor_strerror(int code);

/* Load agent/tools/ *.lua, agent/agent.lua and put agent/lib on the module
 * path. On MOOR_ELOAD the message lists every broken file with its line. */
MOOR_API int moor_load_agent(moor *m, const char *dir);

MOOR_API void moor_on_event(moor *m, moor_event_cb cb, void *ud);

/* Validate input_json against the tool's schema and start a run. The new run
 * id is copied into run_id (at least 40 bytes). */
MOOR_API int moor_call(moor *m, const char *tool, const char *input_json,
                       char *run_id, size_t run_id_size);

/* Load every unfinished run from the database so the loop drives it. */
MOOR_API int moor_resume_all(moor *m);

/* Run what is ready and return at once. *next_due_ms (may be NULL) gets the
 * milliseconds until the next timer, or -1 when nothing is waiting. */
MOOR_API int moor_tick(moor *m, long long *next_due_ms);
/* The same within a budget, for a frame of a game loop: returns once about
 * max_us microseconds of engine work are spent (at most one step's work, or
 * one timer's firing, and the round's commit past them), leaving the rest
 * runnable for the next call; *next_due_ms is then 0. max_us <= 0: no
 * budget (moor_tick). Runs take the same ops in the same order either way. */
MOOR_API int moor_tick_budget(moor *m, long long max_us, long long *next_due_ms);
/* (moor_tick and moor_run: MOOR_EIO "cannot write the database: ..." when a
 * commit failed. It was rolled back, the runs it touched reload from their
 * logs, and calling again later retries; nothing answered was lost.) */

/* Block until no run is runnable or due (sleeping until timers fall due). */
MOOR_API int moor_run(moor *m);

/* A run's status ("running", "completed", "failed", ...) and its result or
 * error as JSON. The strings are owned by the caller (free()). */
MOOR_API int moor_run_info(moor *m, const char *run_id, char **status, char **json);

/* Runs as a table for people, or a JSON array [{id, tool, status, started,
 * updated}] when as_json (caller frees *out). */
MOOR_API int moor_list_runs(moor *m, int as_json, char **out);

/* A run's events, one line each, or a JSON array [{seq, op, kind, name,
 * payload, time}] when as_json. */
MOOR_API int moor_list_events(moor *m, const char *run_id, int as_json, char **out);

/* The engine's libuv loop, for an embedder that adds its own handles (the
 * CLI reads a terminal on it while a question waits). */
MOOR_API void *moor_loop(moor *m);

/* Answer a pending question (exactly one of option_id and text); an in-process
 * person channel, so an approval is bound to the request it answers. Codes:
 * MOOR_ENOTFOUND (unknown request), MOOR_EINVAL (an option never offered,
 * free text where it is not allowed: the question stays open), MOOR_ECONFLICT
 * (already answered or withdrawn). */
MOOR_API int moor_answer(moor *m, const char *request_id, const char *option_id, const char *text);

/* For a terminal channel: the question as text (prompt, numbered options;
 * caller frees *out), and an answer from a typed line (an option's number,
 * id or label, else free text). */
MOOR_API int moor_format_input(moor *m, const char *request_id, char **out);
MOOR_API int moor_answer_line(moor *m, const char *request_id, const char *line);

/* Cancel a run: its abort signal aborts, the op it is parked on raises
 * moor.Cancelled, cleanup gets a 30 s grace. Works on runs not in memory
 * (it takes effect when they resume). MOOR_ENOTFOUND, MOOR_ECONFLICT. */
MOOR_API int moor_cancel(moor *m, const char *run_id);

/* Sessions with the agent (agent/agent.lua): start one (message may be
 * NULL) and get its id; send a message (turn_policy "steer", the default, or
 * "queue"). The session's events reach moor_on_event like any run's. */
MOOR_API int moor_session_start(moor *m, const char *message, char *session_id, size_t size);
MOOR_API int moor_session_send(moor *m, const char *session_id, const char *message, const char *turn_policy);
/* A line a person typed (moor chat): it answers the session's sole pending
 * question when it fits (an option's number, id or label, or free text where
 * allowed; approvals included, bound to the request), else it is sent as a
 * message. Message text never answers an approval. */
MOOR_API int moor_session_line(moor *m, const char *session_id, const char *line);

/* A committed event as one readable line for a terminal (caller frees *out;
 * NULL when the event is not worth showing). */
MOOR_API int moor_format_event(moor *m, const moor_event *ev, char **out);

/* Make text safe for a terminal, in place: drop control characters (C0
 * but tab and newline, DEL, and C1 as UTF-8), so text from a model or a tool
 * cannot move the cursor, retitle the window or clear the screen. Returns s.
 * moor_format_event, moor_format_input and the text of moor_list_* are
 * already cleaned. */
MOOR_API char *moor_term_clean(char *s);

/* Serve the HTTP API on addr ("127.0.0.1:7373"; port 0 picks a free one).
 * The URL it listens on is copied into url. A non-loopback address needs
 * $MOOR_API_TOKEN (every /v1 route then wants "Authorization: Bearer ..."). */
MOOR_API int moor_listen(moor *m, const char *addr, char *url, size_t url_size);

/* Drive runs and serve HTTP until moor_stop, SIGINT or SIGTERM; then stop
 * the server and return 0, with everything committed. While commits fail it
 * keeps serving (writes answer 503) and retries with a backoff. Non-zero:
 * MOOR_ELUA after an engine error, MOOR_EIO when stopped while commits still
 * failed (moor_errmsg says why). */
MOOR_API int moor_serve(moor *m);
MOOR_API void moor_stop(moor *m);

/* `moor mcp`: serve the Model Context Protocol on stdin (JSON-RPC, one
 * message a line) and out_fd (the real stdout, saved by the caller before it
 * points fd 1 elsewhere) while driving runs as moor_serve does, until stdin
 * closes, SIGINT or SIGTERM. Returns as moor_serve. */
MOOR_API int moor_mcp_stdio(moor *m, int out_fd);

/* When a moor process that serves HTTP holds the database's lock, copy its
 * URL into url and return 0; else MOOR_ENOTFOUND. Takes no lock. MOOR_EINVAL
 * (url still copied, for a message) when the lock file is not the current
 * user's or the URL is not loopback: send it nothing ($MOOR_API_TOKEN least). */
MOOR_API int moor_find_server(const char *db_path, char *url, size_t url_size);

/* What each unfinished run waits on, one line per run ("run_x (tool) waits
 * on a question req_y: ..."), for `moor resume` to say why it stopped; *out
 * is NULL when no run is unfinished (caller frees). */
MOOR_API int moor_describe_waiting(moor *m, char **out);

/* The CLI's views for people (host/waiting.c). Runs filtered by status
 * (running, waiting: running and parked on a question, hook, sleep or child;
 * completed, failed, cancelled), tool, and the newest limit of them (0: all),
 * as moor_list_runs prints them; a NULL filter or field means any. */
typedef struct moor_run_filter {
  const char *status, *tool;
  int limit;
} moor_run_filter;
MOOR_API int moor_list_runs_filtered(moor *m, const moor_run_filter *f, int as_json, char **out);
/* Pending questions with their request ids, run and tool, as a table, or a
 * JSON array [{requestId, runId, tool, kind, request, created}] when as_json. */
MOOR_API int moor_list_inputs(moor *m, int as_json, char **out);
/* What run_id (and the runs under it) waits on, a line each ("approval
 * req_x (tool T)", "question req_x", "sleep until 18:30 (4h)", "a webhook delivery (...)",
 * "child run run_y (tool)"); *out is NULL when it waits on nothing. */
MOOR_API int moor_run_waiting(moor *m, const char *run_id, char **out);

/* Run busted specs inside the host (argv as busted's own). Returns the exit
 * status busted reports. */
MOOR_API int moor_test(moor *m, int argc, char **argv);

/* Write a new agent project into dir (`moor init`; NULL or "": the current
 * directory): agent/agent.lua (on a scripted model), a plain and a workflow
 * tool, a spec for each, .luarc.json and .gitignore. It never overwrites:
 * when any of those files exists nothing is written and MOOR_ECONFLICT's
 * message names them. *out is the report of what was written, or the error
 * message (caller frees). Needs no engine. */
MOOR_API int moor_scaffold(const char *dir, char **out);

#ifdef __cplusplus
}
#endif
#endif
