/* moorconf.h: every tunable of moor's C side in one place, as Lua's
 * luaconf.h. Defaults, limits, timeouts and grace periods; each can be set at
 * build time (-DMOOR_HTTP_QUEUE_MAX=...). What an environment variable or a
 * moor_config field overrides at run time says so. The Lua side's own
 * tunables (the cancel grace, delivery queues) are in lua/moor/. */
#ifndef MOOR_CONF_H
#define MOOR_CONF_H

#include <stddef.h>

#define MOOR__STR_(x) #x
#define MOOR__STR(x) MOOR__STR_(x)

/* --- where things are ------------------------------------------------------ */

/* The Lua side: cfg.lua_dir, else $MOOR_LUA_DIR, else found from the install
 * prefix, else (a program run from the build tree) the source tree's lua/:
 * host/paths.c, with the relative paths CMake computes (MOOR_REL_LUA). */
#ifndef MOOR_DEFAULT_DB
#define MOOR_DEFAULT_DB ".moor/moor.db" /* the database when --db, cfg.db_path and $MOOR_DB are unset */
#endif

/* --- the HTTP API (host/serve.c, host/http.c) ------------------------------ */

#ifndef MOOR_DEFAULT_HOST
#define MOOR_DEFAULT_HOST "127.0.0.1"   /* moor_listen's address when none is given (loopback only) */
#endif
#ifndef MOOR_DEFAULT_PORT
#define MOOR_DEFAULT_PORT 7373          /* moor_listen's port when the address names none */
#endif
/* "127.0.0.1:7373", as moor dev's --listen help shows it. */
#define MOOR_DEFAULT_LISTEN MOOR_DEFAULT_HOST ":" MOOR__STR(MOOR_DEFAULT_PORT)
#ifndef MOOR_MIN_TOKEN
#define MOOR_MIN_TOKEN 32               /* characters $MOOR_API_TOKEN needs for a non-loopback listen */
#endif
#ifndef MOOR_HTTP_BODY_LIMIT
#define MOOR_HTTP_BODY_LIMIT ((size_t)1 << 20) /* request body bytes (cfg.body_limit, $MOOR_BODY_LIMIT) */
#endif
#ifndef MOOR_HTTP_TIMEOUT_MS
#define MOOR_HTTP_TIMEOUT_MS 10000u     /* a started request must be complete within (cfg.http_timeout_ms, $MOOR_HTTP_TIMEOUT_MS) */
#endif
#ifndef MOOR_HTTP_IDLE_MS
#define MOOR_HTTP_IDLE_MS 60000u        /* an idle keep-alive connection is closed after */
#endif
#ifndef MOOR_HTTP_FIRST_BYTE_MS
#define MOOR_HTTP_FIRST_BYTE_MS 5000u   /* a new connection that sends nothing is dropped after ($MOOR_HTTP_FIRST_BYTE_MS) */
#endif
#ifndef MOOR_HTTP_MAX_CONNECTIONS
#define MOOR_HTTP_MAX_CONNECTIONS 1024u /* open connections, all peers together ($MOOR_MAX_CONNECTIONS) */
#endif
#ifndef MOOR_HTTP_MAX_PER_PEER
#define MOOR_HTTP_MAX_PER_PEER 256u     /* open connections from one IP address ($MOOR_MAX_CONNECTIONS_PER_PEER) */
#endif
#ifndef MOOR_HTTP_HEADER_MAX
#define MOOR_HTTP_HEADER_MAX ((size_t)64 * 1024)      /* request line + headers (431 beyond) */
#endif
#ifndef MOOR_HTTP_PENDING_MAX
#define MOOR_HTTP_PENDING_MAX ((size_t)256 * 1024)    /* unparsed bytes held while a request waits for its answer */
#endif
#ifndef MOOR_HTTP_QUEUE_MAX
#define MOOR_HTTP_QUEUE_MAX ((size_t)8 * 1024 * 1024) /* unsent bytes (an SSE stream) before a slow reader is dropped */
#endif
#ifndef MOOR_HTTP_LINGER_MS
#define MOOR_HTTP_LINGER_MS 2000u       /* grace for a closing connection to flush and see the peer's FIN */
#endif
#ifndef MOOR_HTTP_READ_SIZE
#define MOOR_HTTP_READ_SIZE ((size_t)64 * 1024)       /* the server-wide read buffer */
#endif
#ifndef MOOR_HTTP_READ_MIN
#define MOOR_HTTP_READ_MIN ((size_t)16 * 1024)        /* free space wanted when reading into a connection's buffer */
#endif
#ifndef MOOR_HTTP_KEEP_BYTES
#define MOOR_HTTP_KEEP_BYTES ((size_t)64 * 1024)      /* a connection's bigger body buffer is given back */
#endif
#ifndef MOOR_HTTP_POOL_DATA
#define MOOR_HTTP_POOL_DATA ((size_t)4096)            /* payload of a pooled write block */
#endif
#ifndef MOOR_HTTP_POOL_MAX
#define MOOR_HTTP_POOL_MAX 128          /* pooled write blocks kept for reuse */
#endif

/* --- the engine's clock (host/moor.c) ------------------------------------- */

#ifndef MOOR_MAX_DUE_MS
#define MOOR_MAX_DUE_MS 9007199254740991LL /* longest wait a tick may answer (2^53 - 1, as lua/moor/conf.lua's MAX_DURATION) */
#endif

/* --- serving while the database fails (host/serve.c) ----------------------- */

#ifndef MOOR_STORE_BACKOFF_MIN_MS
#define MOOR_STORE_BACKOFF_MIN_MS 100   /* first retry of a failed commit's round; doubles each time */
#endif
#ifndef MOOR_STORE_BACKOFF_MAX_MS
#define MOOR_STORE_BACKOFF_MAX_MS 5000  /* longest wait between retries */
#endif

/* --- the store (host/store.c) ---------------------------------------------- */

#ifndef MOOR_BLOB_MIN
#define MOOR_BLOB_MIN ((size_t)64 * 1024) /* an event payload over this goes to the blobs table */
#endif
#ifndef MOOR_STORE_BUSY_MS
#define MOOR_STORE_BUSY_MS 5000         /* SQLite's busy timeout (another connection writing) */
#endif
#ifndef MOOR_STORE_WAL_WAIT_MS
#define MOOR_STORE_WAL_WAIT_MS 5000     /* how long opening retries switching a file to WAL while another opens it */
#endif
#ifndef MOOR_EVENTS_PRESIZE_MAX
#define MOOR_EVENTS_PRESIZE_MAX 1000000 /* a log read back (replay) is read into arrays made at its size, up to this */
#endif
#ifndef MOOR_STORE_STMT_SETS
#define MOOR_STORE_STMT_SETS 32         /* prepared statements kept per database: sets (a power of 2) ... */
#endif
#ifndef MOOR_STORE_STMT_WAYS
#define MOOR_STORE_STMT_WAYS 4          /* ... times statements per set (lua/moor/store.lua has about 50) */
#endif
#ifndef MOOR_STORE_STMT_SQL_MAX
#define MOOR_STORE_STMT_SQL_MAX 4096    /* longer SQL (a long IN list) is prepared for one use, not kept */
#endif
/* glibc's malloc gives the top of its heap back to the system once more than
 * its trim threshold is free there, and takes it back as page faults on the
 * next commit (SQLite's page cache, a round's Lua garbage): about 7 faults a
 * commit under `moor dev`. A read-write open sets these (mallopt, process-
 * wide) unless $GLIBC_TUNABLES names malloc's own; 0 leaves malloc alone. */
#ifndef MOOR_MALLOC_TRIM_THRESHOLD
#define MOOR_MALLOC_TRIM_THRESHOLD (8 * 1024 * 1024) /* free bytes kept at the heap's top */
#endif
#ifndef MOOR_MALLOC_MMAP_THRESHOLD
#define MOOR_MALLOC_MMAP_THRESHOLD (4 * 1024 * 1024) /* larger blocks are mmap'd (setting the trim threshold
                                                        stops glibc adjusting this one itself) */
#endif
/* The engine's Lua state takes blocks up to this size from size classes of
 * its own (host/alloc.c), each class from slabs of MOOR_ALLOC_SLAB bytes of
 * its own; larger ones from malloc. Slabs left with no block in use are kept
 * for any class while at most twice as many are empty as in use (and always
 * MOOR_ALLOC_KEEP_SLABS); the others' pages are given back to the system.
 * $MOOR_LUA_ALLOC=malloc: every block from malloc (the default under
 * AddressSanitizer; =pool turns the pool on there). */
#ifndef MOOR_ALLOC_SMALL_MAX
#define MOOR_ALLOC_SMALL_MAX 512        /* bytes, a multiple of 16 */
#endif
#ifndef MOOR_ALLOC_SLAB
#define MOOR_ALLOC_SLAB (64 * 1024)     /* bytes, a power of two */
#endif
#ifndef MOOR_ALLOC_KEEP_SLABS
#define MOOR_ALLOC_KEEP_SLABS 16        /* empty slabs always kept (1 MiB); beyond it, twice those in use */
#endif
#ifndef MOOR_ALLOC_MAP_SLABS
#define MOOR_ALLOC_MAP_SLABS 16         /* slabs taken from malloc at once (1 MiB) */
#endif
#ifndef MOOR_STORE_SCHEMA_WAIT_MS
#define MOOR_STORE_SCHEMA_WAIT_MS 1000  /* a read-only open waits this long for a writer to commit the schema */
#endif
/* Checkpoints (copying the WAL's pages into the database file, and syncing
 * it) run on a thread of their own with its own connection, not inside the
 * engine's commits. A commit that leaves at least this many frames (pages)
 * of the WAL not yet in the database file wakes it; it runs a PASSIVE
 * checkpoint. 0: no thread, SQLite's own automatic checkpoint at 1,000
 * frames, inside the commit. */
#ifndef MOOR_STORE_WAL_BUFFER
#define MOOR_STORE_WAL_BUFFER (1024 * 1024) /* bytes of a transaction's WAL appends gathered (0: SQLite's default VFS) */
#endif
#ifndef MOOR_STORE_WAL_WRITE
#define MOOR_STORE_WAL_WRITE (64 * 1024) /* ... and written at most this many at once (the unix VFS's limit is 128 KiB) */
#endif
#ifndef MOOR_STORE_WAL_READ_AHEAD
#define MOOR_STORE_WAL_READ_AHEAD (256 * 1024) /* the WAL read this many bytes at once while an open recovers it (0: a read a frame) */
#endif
#ifndef MOOR_STORE_CHECKPOINT_FRAMES
#define MOOR_STORE_CHECKPOINT_FRAMES 1000 /* (SQLite's default) */
#endif
/* Commits with no pause between them keep the WAL from starting over (each
 * transaction begins before the thread's checkpoint ends): from this many
 * frames on, a commit runs the PASSIVE checkpoint itself, inline, as SQLite's
 * automatic one does (after waiting for the thread's, if one runs), and the
 * WAL starts over. Its file keeps its largest size: 4 KiB pages x 16,000
 * is about 64 MiB. */
#ifndef MOOR_STORE_CHECKPOINT_IDLE_MS
#define MOOR_STORE_CHECKPOINT_IDLE_MS 5 /* no commit for this long: the thread copies what its last one left */
#endif
#ifndef MOOR_STORE_CHECKPOINT_MAX_FRAMES
#define MOOR_STORE_CHECKPOINT_MAX_FRAMES (16 * MOOR_STORE_CHECKPOINT_FRAMES)
#endif
/* Not 0: once the WAL holds MOOR_STORE_CHECKPOINT_FRAMES frames, the
 * thread's checkpoints are repeated until at most this many frames are left
 * that it has not copied; the next commit copies those itself (a small
 * PASSIVE checkpoint and its two syncs, once each time the WAL fills), and
 * the WAL starts over at the transaction after it. That keeps what a kill -9
 * leaves for the next open to recover (every frame since the WAL last
 * started over, 1.5-2 us each) near MOOR_STORE_CHECKPOINT_FRAMES under
 * commits that never pause, where it otherwise grows to _MAX_FRAMES. Off by
 * default: the finish is a sync on the engine's thread (1-8 ms measured on
 * the development VM for 100-250 frames), which the checkpointer exists to
 * keep off it. */
#ifndef MOOR_STORE_CHECKPOINT_FINISH_FRAMES
#define MOOR_STORE_CHECKPOINT_FINISH_FRAMES 0
#endif

/* --- the HTTP client (host/fetch.c, host/fetch_lua.c) ---------------------- */

#ifndef MOOR_FETCH_BODY_MAX
#define MOOR_FETCH_BODY_MAX ((size_t)32 * 1024 * 1024) /* a response body (decoded); bigger fails the request */
#endif
#ifndef MOOR_FETCH_HEAD_MAX
#define MOOR_FETCH_HEAD_MAX ((size_t)1024 * 1024)      /* a response's headers */
#endif
#ifndef MOOR_FETCH_BODY_FIRST
#define MOOR_FETCH_BODY_FIRST ((size_t)16 * 1024)      /* first allocation of a response body buffer */
#endif
#ifndef MOOR_FETCH_TIMEOUT_MS
#define MOOR_FETCH_TIMEOUT_MS 60000L    /* a whole request, when the caller sets none */
#endif
#ifndef MOOR_FETCH_CONNECT_MS
#define MOOR_FETCH_CONNECT_MS 10000L    /* connecting, when the caller sets none */
#endif
#ifndef MOOR_FETCH_REDIRECTS
#define MOOR_FETCH_REDIRECTS 5          /* redirects followed when the caller sets none */
#endif
#ifndef MOOR_FETCH_REDIRECTS_MAX
#define MOOR_FETCH_REDIRECTS_MAX 100    /* the most redirects a request may ask to follow (fetch.start) */
#endif
#ifndef MOOR_FETCH_METHOD_MAX
#define MOOR_FETCH_METHOD_MAX 32        /* characters of a request method */
#endif

/* --- JSON (host/json.c) ---------------------------------------------------- */

#ifndef MOOR_JSON_MAXDEPTH
#define MOOR_JSON_MAXDEPTH 200          /* nesting limit, encode and decode */
#endif
#ifndef MOOR_JSON_KEEP_BYTES
#define MOOR_JSON_KEEP_BYTES ((size_t)256 * 1024) /* a bigger scratch buffer is given back after a call */
#endif
#ifndef MOOR_JSON_KEEP_KEYS
#define MOOR_JSON_KEEP_KEYS ((size_t)4096)        /* likewise the key-sorting scratch, in keys */
#endif

/* --- schema patterns (host/regex.c, PCRE2) --------------------------------- */

#ifndef MOOR_REGEX_MATCH_LIMIT
#define MOOR_REGEX_MATCH_LIMIT 100000 /* backtracking steps (pcre2_set_match_limit) */
#endif
#ifndef MOOR_REGEX_DEPTH_LIMIT
#define MOOR_REGEX_DEPTH_LIMIT 100000 /* nested backtracking points, interpreter only */
#endif
#ifndef MOOR_REGEX_HEAP_LIMIT_KIB
#define MOOR_REGEX_HEAP_LIMIT_KIB (4 * 1024) /* backtracking frames, interpreter only (when no JIT) */
#endif
#ifndef MOOR_REGEX_JIT_STACK_MAX
#define MOOR_REGEX_JIT_STACK_MAX (8 * 1024 * 1024) /* JIT matches' stack, bytes */
#endif

/* --- harness agents (host/harness.c: processes and the Unix socket; host/wfa.c) */

/* Defaults of core.unix_listen's options (each can be given per server). */
#ifndef MOOR_HARNESS_MAX_CONNECTIONS
#define MOOR_HARNESS_MAX_CONNECTIONS 64 /* open connections; the next is answered full_response (max_connections) */
#endif
#ifndef MOOR_HARNESS_MAX_REQUEST
#define MOOR_HARNESS_MAX_REQUEST ((size_t)1024 * 1024 + 64 * 1024) /* a request line, bytes (max_request) */
#endif
#ifndef MOOR_HARNESS_LIFETIME_MS
#define MOOR_HARNESS_LIFETIME_MS 30000u /* a connection is closed unanswered after, unless held (lifetime_ms) */
#endif
/* core.spawn's fixed limits. */
#ifndef MOOR_HARNESS_STDERR_TAIL
#define MOOR_HARNESS_STDERR_TAIL ((size_t)4096) /* last bytes of a process's stderr given to on_exit */
#endif
#ifndef MOOR_HARNESS_LINE_MAX
#define MOOR_HARNESS_LINE_MAX ((size_t)1 << 20) /* a stdout line longer is cut to this many bytes */
#endif
/* The launcher client moor-wfa (host/wfa.c). */
#ifndef MOOR_WFA_STDIN_MAX
#define MOOR_WFA_STDIN_MAX ((size_t)1 << 20) /* standard input read for a JSON tool or `result` */
#endif
#ifndef MOOR_WFA_STDIN_MS
#define MOOR_WFA_STDIN_MS 30000         /* ... within this long */
#endif
#ifndef MOOR_WFA_RESPONSE_MAX
#define MOOR_WFA_RESPONSE_MAX ((size_t)256 * 1024 + 16 * 1024) /* the workflow's response line */
#endif
#ifndef MOOR_WFA_CONNECT_MS
#define MOOR_WFA_CONNECT_MS 5000        /* a connect() waiting on a full backlog gives up (too-many-connections) */
#endif

/* --- the sandbox for model-written programs (host/sandbox.c) --------------- */

/* Defaults of core.sandbox_new's options (each can be given per sandbox). */
#ifndef MOOR_SANDBOX_MEMORY
#define MOOR_SANDBOX_MEMORY ((size_t)64 << 20)   /* bytes a program's lua_State may hold (memory) */
#endif
#ifndef MOOR_SANDBOX_INSTRUCTIONS
#define MOOR_SANDBOX_INSTRUCTIONS 1000000000LL   /* VM instructions a program may run (instructions) */
#endif
#ifndef MOOR_SANDBOX_SECONDS
#define MOOR_SANDBOX_SECONDS 30.0                /* seconds of execution; time parked on ctx.agent does not count (seconds) */
#endif
#ifndef MOOR_SANDBOX_SOURCE
#define MOOR_SANDBOX_SOURCE ((size_t)256 * 1024) /* bytes of a program's source (source) */
#endif
#ifndef MOOR_SANDBOX_OUTPUT
#define MOOR_SANDBOX_OUTPUT ((size_t)64 * 1024)  /* captured print output, then "[output truncated]" (output) */
#endif
#ifndef MOOR_SANDBOX_RESULT
#define MOOR_SANDBOX_RESULT ((size_t)1 << 20)    /* the program's return value, as JSON (result) */
#endif
#ifndef MOOR_SANDBOX_MESSAGE
#define MOOR_SANDBOX_MESSAGE ((size_t)1 << 20)   /* one ctx.agent message, and its outputSchema as JSON (message) */
#endif
#ifndef MOOR_SANDBOX_COROUTINES
#define MOOR_SANDBOX_COROUTINES 256              /* live coroutines: ctx.all/ctx.race branches and the program's own (coroutines) */
#endif
/* Fixed limits. */
#ifndef MOOR_SANDBOX_SLICE_US
#define MOOR_SANDBOX_SLICE_US 5000               /* a program runs this long before the host gets its loop back */
#endif
#ifndef MOOR_SANDBOX_HOOK_COUNT
#define MOOR_SANDBOX_HOOK_COUNT 1000             /* instructions between two runs of the count hook */
#endif
#ifndef MOOR_SANDBOX_DEPTH
#define MOOR_SANDBOX_DEPTH 100                   /* nesting of a value crossing the boundary */
#endif
#ifndef MOOR_SANDBOX_NAME_MAX
#define MOOR_SANDBOX_NAME_MAX 256                /* bytes of a ctx.agent subagent name */
#endif
#ifndef MOOR_SANDBOX_ERROR_MAX
#define MOOR_SANDBOX_ERROR_MAX ((size_t)8192)    /* bytes of an error message handed to the host */
#endif
#ifndef MOOR_SANDBOX_PATTERN_MAX
#define MOOR_SANDBOX_PATTERN_MAX 512             /* bytes of a pattern (string.find/match/gmatch/gsub) */
#endif
#ifndef MOOR_SANDBOX_SUBJECT_MAX
#define MOOR_SANDBOX_SUBJECT_MAX ((size_t)4 << 20) /* bytes of a subject of those */
#endif
#ifndef MOOR_SANDBOX_PATTERN_COST
#define MOOR_SANDBOX_PATTERN_COST 2e8            /* worst-case matching steps one call may risk, about 0.5 s (see sandbox.c) */
#endif
#ifndef MOOR_SANDBOX_REP_MAX
#define MOOR_SANDBOX_REP_MAX ((size_t)16 << 20)  /* bytes of a string.rep result */
#endif

/* --- the CLI (host/main.c) ------------------------------------------------- */

#ifndef MOOR_CLI_HTTP_TIMEOUT_S
#define MOOR_CLI_HTTP_TIMEOUT_S 30L     /* a CLI request to a running moor dev (answer, cancel, chat) */
#endif
#ifndef MOOR_CLI_RESPONSE_MAX
#define MOOR_CLI_RESPONSE_MAX ((size_t)16 << 20) /* the largest GET answer the CLI reads from moor dev */
#endif

#endif
