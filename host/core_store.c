/* moor.core's store binding: SQL over the engine's SQLite file (query,
 * exec), the event log (append, events) and the group commit (commit). The
 * schema and migrations are store.c's. */
#include "host.h"

static void bind_args(lua_State *L, sqlite3_stmt *st, int first, int n) {
  for (int i = 0; i < n; i++) {
    int idx = first + i;
    switch (lua_type(L, idx)) {
      case LUA_TNIL: sqlite3_bind_null(st, i + 1); break;
      case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) sqlite3_bind_int64(st, i + 1, lua_tointeger(L, idx));
        else sqlite3_bind_double(st, i + 1, lua_tonumber(L, idx));
        break;
      default: {
        size_t len;
        const char *s = luaL_checklstring(L, idx, &len);
        sqlite3_bind_text(st, i + 1, s, (int)len, SQLITE_TRANSIENT);
      }
    }
  }
}

static void push_column(lua_State *L, sqlite3_stmt *st, int c) {
  switch (sqlite3_column_type(st, c)) {
    case SQLITE_INTEGER: lua_pushinteger(L, sqlite3_column_int64(st, c)); break;
    case SQLITE_FLOAT: lua_pushnumber(L, sqlite3_column_double(st, c)); break;
    case SQLITE_NULL: lua_pushnil(L); break;
    default:
      lua_pushlstring(L, (const char *)sqlite3_column_text(st, c), (size_t)sqlite3_column_bytes(st, c));
  }
}

static void push_text(lua_State *L, sqlite3_stmt *st, int c) {
  const char *text = (const char *)sqlite3_column_text(st, c);
  lua_pushlstring(L, text ? text : "", (size_t)sqlite3_column_bytes(st, c));
}

/* A payload kept in the blobs table (the event row holds ''), as the view
 * event_log gives it: its text, or '' where there is none. 0, or -1. */
static int push_blob(lua_State *L, moor *m, const char *run, size_t len, sqlite3_int64 seq) {
  static const char sql[] = "SELECT payload FROM blobs WHERE run_id=? AND seq=?";
  sqlite3_stmt *st;
  int owned;
  if (moor_store_prepare(&m->store, sql, sizeof sql - 1, &st, &owned)) return -1;
  sqlite3_bind_text(st, 1, run, (int)len, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, seq);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) push_text(L, st, 0);
  else lua_pushliteral(L, "");
  moor_store_release(&m->store, st, owned);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* nil, message: a failure the store (or SQLite) describes. */
static int fail(lua_State *L, const char *message) {
  lua_pushnil(L);
  lua_pushstring(L, message);
  return 2;
}

/* A statement comes from the store's cache (prepared once per database,
 * kept until close) and goes back reset on every path: nothing between
 * taking and giving it back here raises except an out-of-memory error, after
 * which the next use resets it. */
static int run_sql(lua_State *L, int want_rows) {
  moor *m = moor__self(L);
  size_t len;
  const char *sql = luaL_checklstring(L, 1, &len);
  int n = lua_gettop(L) - 1;
  for (int i = 0; i < n; i++) {
    int t = lua_type(L, 2 + i);
    if (t != LUA_TNIL && t != LUA_TNUMBER && t != LUA_TSTRING)
      return luaL_argerror(L, 2 + i, "expected nil, number or string");
  }
  if (!want_rows && moor_store_begin(&m->store)) return fail(L, m->store.err);
  sqlite3_stmt *st = NULL;
  int owned = 0;
  int prc = moor_store_prepare(&m->store, sql, len, &st, &owned);
  if (prc || !st) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s (in: %s)",
                    prc == MOOR_ENOMEM ? "out of memory" : prc ? sqlite3_errmsg(m->store.db) : "no SQL statement", sql);
    moor_store_release(&m->store, st, owned);
    return 2;
  }
  bind_args(L, st, 2, n);
  lua_newtable(L);
  int rows = 0, rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int cols = sqlite3_column_count(st);
    lua_createtable(L, 0, cols);
    for (int c = 0; c < cols; c++) {
      push_column(L, st, c);
      lua_setfield(L, -2, sqlite3_column_name(st, c));
    }
    lua_rawseti(L, -2, ++rows);
  }
  if (rc != SQLITE_DONE) {
    lua_pushnil(L);
    lua_pushstring(L, sqlite3_errmsg(m->store.db));
    moor_store_release(&m->store, st, owned);
    return 2;
  }
  moor_store_release(&m->store, st, owned);
  lua_pushinteger(L, sqlite3_changes(m->store.db));
  return 2;
}

/* query(sql, ...) -> rows, changes: read without opening a write transaction. */
static int l_query(lua_State *L) { return run_sql(L, 1); }
/* exec(sql, ...) -> rows, changes: a write inside the current group-commit
 * transaction (rows come from RETURNING). On failure: nil, message. */
static int l_exec(lua_State *L) { return run_sql(L, 0); }

/* append(run_id, seq, op|nil, kind, name|nil, payload, time) */
static int l_append(lua_State *L) {
  moor *m = moor__self(L);
  const char *run = luaL_checkstring(L, 1);
  lua_Integer seq = luaL_checkinteger(L, 2);
  lua_Integer op = luaL_optinteger(L, 3, 0);
  const char *kind = luaL_checkstring(L, 4);
  const char *name = luaL_optstring(L, 5, NULL);
  size_t plen;
  const char *payload = luaL_checklstring(L, 6, &plen);
  lua_Integer t = luaL_checkinteger(L, 7);
  if (moor_store_append(&m->store, run, seq, op, kind, name, payload, plen, t)) return fail(L, m->store.err);
  lua_pushboolean(L, 1);
  return 1;
}

/* commit() -> true, wrote (a transaction was open) | nil, cause. On failure
 * the transaction has been rolled back: nothing of it is in the file. */
static int l_commit(lua_State *L) {
  moor *m = moor__self(L);
  int wrote = m->store.in_tx;
  if (moor_store_commit(&m->store)) return fail(L, m->store.err);
  lua_pushboolean(L, 1);
  lua_pushboolean(L, wrote);
  return 2;
}

/* events(run_id) -> n, last_seq, ops, kinds, names, payloads, times: one
 * array per column (in seq order), which replay reads far faster than a
 * table per event. ops[i] and names[i] are false where the column is NULL. */
static int l_events(lua_State *L) {
  moor *m = moor__self(L);
  size_t len;
  const char *run = luaL_checklstring(L, 1, &len);
  /* The arrays are made at their final size (seq is dense from 1, so the
   * last seq is the count): growing them row by row rehashed each log2(n)
   * times, a twentieth of a replay. */
  static const char last_sql[] = "SELECT max(seq) FROM events WHERE run_id=?";
  sqlite3_stmt *st;
  int owned, size = 0;
  if (moor_store_prepare(&m->store, last_sql, sizeof last_sql - 1, &st, &owned))
    return fail(L, sqlite3_errmsg(m->store.db));
  sqlite3_bind_text(st, 1, run, (int)len, SQLITE_TRANSIENT);
  if (sqlite3_step(st) == SQLITE_ROW) {
    sqlite3_int64 last = sqlite3_column_int64(st, 0);
    size = last > 0 && last < MOOR_EVENTS_PRESIZE_MAX ? (int)last : 0;
  }
  moor_store_release(&m->store, st, owned);
  st = m->store.events;
  sqlite3_reset(st); /* (an out-of-memory error mid-read last time left it unfinished) */
  sqlite3_bind_text(st, 1, run, (int)len, SQLITE_TRANSIENT);
  int base = lua_gettop(L);
  luaL_checkstack(L, 8, "events");
  for (int c = 1; c < 6; c++) lua_createtable(L, size, 0);
  int n = 0, rc;
  lua_Integer last = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    n++;
    last = sqlite3_column_int64(st, 0);
    /* (by the schema: op and name may be NULL, kind and payload are text,
     * time an integer; read as such, without asking each value its type) */
    if (sqlite3_column_type(st, 1) == SQLITE_NULL) lua_pushboolean(L, 0);
    else lua_pushinteger(L, sqlite3_column_int64(st, 1));
    lua_rawseti(L, base + 1, n);
    push_text(L, st, 2);
    lua_rawseti(L, base + 2, n);
    if (sqlite3_column_type(st, 3) == SQLITE_NULL) lua_pushboolean(L, 0);
    else push_text(L, st, 3);
    lua_rawseti(L, base + 3, n);
    if (sqlite3_column_bytes(st, 4) > 0) push_text(L, st, 4);
    else if (push_blob(L, m, run, len, sqlite3_column_int64(st, 0))) {
      lua_settop(L, base);
      sqlite3_reset(st);
      sqlite3_clear_bindings(st);
      return fail(L, sqlite3_errmsg(m->store.db));
    }
    lua_rawseti(L, base + 4, n);
    lua_pushinteger(L, sqlite3_column_int64(st, 5));
    lua_rawseti(L, base + 5, n);
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_DONE) {
    lua_settop(L, base);
    return fail(L, sqlite3_errmsg(m->store.db));
  }
  lua_pushinteger(L, n);
  lua_insert(L, base + 1);
  lua_pushinteger(L, last);
  lua_insert(L, base + 2);
  return 7;
}

/* t[name] = v on the table at the top of the stack. */
static void set_int(lua_State *L, const char *name, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, name);
}

static void set_bool(lua_State *L, const char *name, int v) {
  lua_pushboolean(L, v);
  lua_setfield(L, -2, name);
}

/* store_stats() -> { prepared = statements prepared since the database was
 * opened, kept = statements kept prepared now } (tests/lua/store_spec.lua),
 * and the checkpointer's (store.h's moor_store_stats): checkpointer (true
 * when checkpoints run on their own thread), checkpoints and
 * checkpoints_busy (run by it), checkpointing (it runs one, is woken to, or
 * will once the engine idles), checkpoints_inline (run by commits at the
 * hard bound), checkpoints_finish (by commits finishing what the thread
 * left), wal_frames (in the WAL after the last commit), wal_restarts (commits
 * that wrote the WAL from its start since open), checkpoint_frames and
 * checkpoint_max_frames (MOOR_STORE_CHECKPOINT_*) (checkpoint_spec.lua). */
static int l_store_stats(lua_State *L) {
  moor *m = moor__self(L);
  int kept = 0;
  for (size_t i = 0; i < sizeof m->store.stmts / sizeof m->store.stmts[0]; i++) kept += m->store.stmts[i].st != NULL;
  moor_store_ckpt_stats st;
  moor_store_stats(&m->store, &st);
  lua_createtable(L, 0, 14);
  set_int(L, "prepared", m->store.prepared);
  set_int(L, "kept", kept);
  set_bool(L, "checkpointer", st.checkpointer);
  set_int(L, "checkpoints", st.checkpoints);
  set_int(L, "checkpoints_busy", st.checkpoints_busy);
  set_bool(L, "checkpointing", st.checkpointing);
  set_int(L, "checkpoints_inline", st.checkpoints_inline);
  set_int(L, "wal_frames", st.wal_frames);
  set_int(L, "wal_restarts", st.wal_restarts);
  set_int(L, "checkpoints_finish", st.checkpoints_finish);
  set_int(L, "checkpoint_frames", MOOR_STORE_CHECKPOINT_FRAMES);
  set_int(L, "checkpoint_max_frames", MOOR_STORE_CHECKPOINT_MAX_FRAMES);
  long long appends, writes;
  moor__store_vfs_counts(&appends, &writes);
  set_int(L, "wal_appends", appends);
  set_int(L, "wal_writes", writes);
  return 1;
}

const luaL_Reg moor__core_store_fns[] = {
  {"query", l_query}, {"exec", l_exec}, {"append", l_append}, {"commit", l_commit}, {"events", l_events},
  {"store_stats", l_store_stats}, {NULL, NULL}};
