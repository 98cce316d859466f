/* fake_oauth: a small OAuth 2.0 provider (authorization code with PKCE,
 * refresh tokens, a bearer-protected resource) on loopback, so tests drive
 * moor's sign-in flow with no hosted provider.
 *
 *   fake_oauth [--listen 127.0.0.1:0] [--log FILE.jsonl] [--client-id ID]
 *              [--client-secret S] [--expires-in N] [--deny]
 *
 * The first line of stdout is the base URL; SIGTERM or SIGINT stops it
 * cleanly (exit 0). Endpoints: GET /authorize, POST /token, GET
 * /resource/<path>, POST /control, GET /stats (tests/fake/README.md). Every
 * request is appended to the log as one JSON line, secrets redacted, flushed
 * at once.
 *
 * As in fake_model, the C side is transport (host/http.c), the log file and
 * the primitives Lua lacks (SHA-256, base64, random bytes from libcrypto, a
 * monotonic clock); what a request means lives in the Lua prelude below, with
 * the project's moor.json. All state is in memory: a restart forgets every
 * code and token. */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "http.h"
#include "json.h"
#include "moor.h"

typedef struct app {
  lua_State *L;
  int host_ref;                /* registry ref: the prelude's table */
  moor_http *srv;
  moor_http_config cfg;
  char host[64];
  FILE *log;
  int log_newline;             /* the log ends in a partial line: end it first */
  long long n;                 /* requests so far, the log's earlier lines included */
  uv_signal_t sigterm, sigint;
  int exit_code;
} app;

/* The options, for the prelude. */
typedef struct options {
  const char *client_id, *client_secret;
  long long expires_in;
  int deny;
} options;

/* The Lua prelude: plain Lua, one C string per line, in pieces of under
 * 4095 bytes (the longest string literal ISO C promises; -Wpedantic). */
static const char *const PRELUDE[] = {
    "-- The provider: every endpoint, its state, the log line. Called with the C\n"
    "-- primitives and the options; returns the table the C side calls.\n"
    "local json = require 'moor.json'\n"
    "local prim, cfg = ...\n"
    "local host = {}\n"
    "local st -- codes, tokens, modes, counters: fresh() on start and on reset\n"
    "\n"
    "local function fresh()\n"
    "  st = { deny = cfg.deny, reject = false, codes = {}, access = {}, refresh = {},\n"
    "         stats = { authorize = 0, token_code = 0, token_refresh = 0, token_error = 0,\n"
    "                   resource = 0, resource_401 = 0 } }\n"
    "end\n"
    "fresh()\n"
    "\n"
    "local function encode(v)\n"
    "  local s, msg = json.encode(v, 0, 'response')\n"
    "  if not s then error(msg, 2) end\n"
    "  return s\n"
    "end\n"
    "\n"
    "local function unescape(s)\n"
    "  s = s:gsub('%+', ' ')\n"
    "  return (s:gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))\n"
    "end\n"
    "\n"
    "local function escape(s)\n"
    "  return (s:gsub('[^%w%-._~]', function(c) return string.format('%%%02X', c:byte()) end))\n"
    "end\n"
    "\n"
    "-- 'a=1&b=%20' -> { a = '1', b = ' ' }; nil and the name for a parameter\n"
    "-- given twice (RFC 6749 section 3.1 forbids it)\n"
    "local function form(s)\n"
    "  local t = {}\n"
    "  for pair in (s or ''):gmatch('[^&]+') do\n"
    "    local k, v = pair:match('^([^=]*)=?(.*)$')\n"
    "    k = unescape(k)\n"
    "    if t[k] ~= nil then return nil, k end\n"
    "    t[k] = unescape(v)\n"
    "  end\n"
    "  return t\n"
    "end\n"
    "\n"
    "local function reply(status, body, headers)\n"
    "  return { status = status, ctype = 'application/json', headers = headers or '', body = encode(body) }\n"
    "end\n"
    "\n"
    "local function oauth_error(status, code, desc, headers)\n"
    "  return reply(status, { error = code, error_description = desc }, headers)\n"
    "end\n"
    "\n"
    "local function redirect(uri, params)\n"
    "  local q = {}\n"
    "  for i, p in ipairs(params) do q[i] = p[1] .. '=' .. escape(p[2]) end\n"
    "  local to = uri .. (uri:find('?', 1, true) and '&' or '?') .. table.concat(q, '&')\n"
    "  return { status = 302, ctype = 'text/plain', headers = 'Location: ' .. to .. '\\r\\n', body = 'Found: ' .. to }\n"
    "end\n"
    "\n",
    "-- GET /authorize: a redirect back with a fresh code, or with an error. A bad\n"
    "-- client_id or redirect_uri is answered here: there is nowhere safe to send it.\n"
    "local function authorize(req)\n"
    "  st.stats.authorize = st.stats.authorize + 1\n"
    "  local p, dup = form(req.query)\n"
    "  if not p then return oauth_error(400, 'invalid_request', 'parameter ' .. dup .. ' given twice') end\n"
    "  if p.client_id ~= cfg.client_id then\n"
    "    return oauth_error(400, 'invalid_client', 'client_id ' .. (p.client_id and (\"'\" .. p.client_id .. \"'\") or 'missing')\n"
    "                       .. ': this server knows only ' .. cfg.client_id)\n"
    "  end\n"
    "  local uri = p.redirect_uri\n"
    "  if not uri or not uri:match(\"^https?://[%w%-._~:/?@!$&'()*+,;=%%%[%]]+$\") then\n"
    "    return oauth_error(400, 'invalid_request', 'redirect_uri must be an absolute http(s) URL with no fragment')\n"
    "  end\n"
    "  local function fail(code, desc)\n"
    "    local out = { { 'error', code }, { 'error_description', desc } }\n"
    "    if p.state then out[3] = { 'state', p.state } end\n"
    "    return redirect(uri, out)\n"
    "  end\n"
    "  if p.response_type ~= 'code' then return fail('unsupported_response_type', 'response_type must be code') end\n"
    "  if not p.state or p.state == '' then return fail('invalid_request', 'state is required') end\n"
    "  if p.code_challenge_method ~= 'S256' or not p.code_challenge then\n"
    "    return fail('invalid_request', 'PKCE is required: code_challenge and code_challenge_method=S256')\n"
    "  end\n"
    "  if not p.code_challenge:match('^[%w%-_]+$') or #p.code_challenge ~= 43 then\n"
    "    return fail('invalid_request', 'code_challenge must be the 43-character base64url SHA-256 of the verifier')\n"
    "  end\n"
    "  if st.deny then return fail('access_denied', 'The user denied the request') end\n"
    "  local login = p.login or 'alice'\n"
    "  if login == '' then return fail('invalid_request', 'login is empty') end\n"
    "  local code = 'ac_' .. prim.random_hex(16)\n"
    "  st.codes[code] = { client_id = p.client_id, redirect_uri = uri, challenge = p.code_challenge, login = login,\n"
    "                     scope = p.scope or '', expires = prim.now() + 60, code = code }\n"
    "  return redirect(uri, { { 'code', code }, { 'state', p.state } })\n"
    "end\n"
    "\n"
    "local NO_STORE = 'Cache-Control: no-store\\r\\nPragma: no-cache\\r\\n'\n"
    "local BASIC = 'WWW-Authenticate: Basic realm=\"fake_oauth\"\\r\\n'\n"
    "\n"
    "-- The client: client_id (and the secret when there is one) from the form or\n"
    "-- HTTP Basic (RFC 6749 section 2.3.1). Returns the id, or nil and the error.\n"
    "local function client(req, p)\n"
    "  local id, secret = p.client_id, p.client_secret\n"
    "  local auth = req.headers.authorization\n"
    "  if auth then\n"
    "    local b64 = auth:match('^[Bb]asic +(%S+)$')\n"
    "    local user, pass = (b64 and prim.b64decode(b64) or ''):match('^([^:]*):(.*)$')\n"
    "    if not user then\n"
    "      return nil, oauth_error(401, 'invalid_client', 'the Authorization header is not Basic client_id:secret', BASIC)\n"
    "    end\n"
    "    user, pass = unescape(user), unescape(pass)\n"
    "    if secret or (id and id ~= user) then\n"
    "      return nil, oauth_error(400, 'invalid_request', 'client credentials both in the header and the form')\n"
    "    end\n"
    "    id, secret = user, pass\n"
    "  end\n"
    "  if id ~= cfg.client_id then\n"
    "    return nil, oauth_error(401, 'invalid_client', 'unknown client_id (this server knows ' .. cfg.client_id .. ')',\n"
    "                            BASIC)\n"
    "  end\n"
    "  if cfg.client_secret and secret ~= cfg.client_secret then\n"
    "    return nil, oauth_error(401, 'invalid_client', secret and 'wrong client secret'\n"
    "                            or 'client authentication required: client_secret or HTTP Basic', BASIC)\n"
    "  end\n"
    "  return id\n"
    "end\n"
    "\n",
    "local function issue(g)\n"
    "  local at, rt = 'at_' .. prim.random_hex(16), 'rt_' .. prim.random_hex(16)\n"
    "  st.access[at] = { login = g.login, scope = g.scope, expires = prim.now() + cfg.expires_in, code = g.code }\n"
    "  st.refresh[rt] = { login = g.login, scope = g.scope, client_id = g.client_id, code = g.code }\n"
    "  return reply(200, { access_token = at, token_type = 'Bearer', expires_in = cfg.expires_in,\n"
    "                      refresh_token = rt, scope = g.scope }, NO_STORE)\n"
    "end\n"
    "\n"
    "-- RFC 6749 section 4.1.2: a code used twice revokes the tokens it gave.\n"
    "local function revoke(code)\n"
    "  for k, v in pairs(st.access) do if v.code == code then st.access[k] = nil end end\n"
    "  for k, v in pairs(st.refresh) do if v.code == code then st.refresh[k] = nil end end\n"
    "end\n"
    "\n"
    "local function grant(req, p)\n"
    "  if not (req.headers['content-type'] or ''):lower():match('^application/x%-www%-form%-urlencoded') then\n"
    "    return oauth_error(400, 'invalid_request', 'the body must be application/x-www-form-urlencoded')\n"
    "  end\n"
    "  local id, err = client(req, p)\n"
    "  if not id then return err end\n"
    "  if p.grant_type == 'authorization_code' then\n"
    "    local c = p.code and st.codes[p.code]\n"
    "    if not c then return oauth_error(400, 'invalid_grant', 'unknown authorization code') end\n"
    "    if c.used then\n"
    "      revoke(p.code)\n"
    "      return oauth_error(400, 'invalid_grant', 'authorization code already used (the tokens it gave are revoked)')\n"
    "    end\n"
    "    c.used = true -- one attempt only, even a failed one\n"
    "    if prim.now() >= c.expires then return oauth_error(400, 'invalid_grant', 'authorization code expired (60 s)') end\n"
    "    if c.client_id ~= id then return oauth_error(400, 'invalid_grant', 'the code was issued to another client') end\n"
    "    if p.redirect_uri ~= c.redirect_uri then\n"
    "      return oauth_error(400, 'invalid_grant', 'redirect_uri differs from the authorization request')\n"
    "    end\n"
    "    local v = p.code_verifier\n"
    "    if not v or not v:match('^[%w%-._~]+$') or #v < 43 or #v > 128 then\n"
    "      return oauth_error(400, 'invalid_request', 'code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~')\n"
    "    end\n"
    "    if prim.sha256_b64url(v) ~= c.challenge then\n"
    "      return oauth_error(400, 'invalid_grant', 'code_verifier does not match the code_challenge (S256)')\n"
    "    end\n"
    "    return issue(c)\n"
    "  elseif p.grant_type == 'refresh_token' then\n"
    "    local r = p.refresh_token and st.refresh[p.refresh_token]\n"
    "    if not r or r.client_id ~= id then\n"
    "      return oauth_error(400, 'invalid_grant', 'unknown, revoked or already used refresh token')\n"
    "    end\n"
    "    st.refresh[p.refresh_token] = nil -- rotated: the new one replaces it\n"
    "    return issue(r)\n"
    "  elseif p.grant_type == nil then\n"
    "    return oauth_error(400, 'invalid_request', 'grant_type missing')\n"
    "  end\n"
    "  return oauth_error(400, 'unsupported_grant_type', 'grant_type must be authorization_code or refresh_token')\n"
    "end\n"
    "\n"
    "local function token(req)\n"
    "  local p, dup = form(req.body)\n"
    "  local res\n"
    "  if not p then\n"
    "    res = oauth_error(400, 'invalid_request', 'parameter ' .. dup .. ' given twice')\n"
    "  else\n"
    "    if p.grant_type == 'authorization_code' then st.stats.token_code = st.stats.token_code + 1 end\n"
    "    if p.grant_type == 'refresh_token' then st.stats.token_refresh = st.stats.token_refresh + 1 end\n"
    "    res = grant(req, p)\n"
    "  end\n"
    "  if res.status ~= 200 then st.stats.token_error = st.stats.token_error + 1 end\n"
    "  return res\n"
    "end\n"
    "\n",
    "local function resource(req)\n"
    "  st.stats.resource = st.stats.resource + 1\n"
    "  local t = (req.headers.authorization or ''):match('^[Bb]earer +(%S+)$')\n"
    "  local a = t and st.access[t]\n"
    "  local why = not t and 'no bearer token' or not a and 'unknown or revoked token'\n"
    "              or prim.now() >= a.expires and 'token expired' or st.reject and 'rejected (control: reject)'\n"
    "  if why then\n"
    "    st.stats.resource_401 = st.stats.resource_401 + 1\n"
    "    return oauth_error(401, 'invalid_token', why, 'WWW-Authenticate: Bearer error=\"invalid_token\"\\r\\n')\n"
    "  end\n"
    "  return reply(200, { user = a.login, path = req.path:sub(11), scope = a.scope, ok = true })\n"
    "end\n"
    "\n"
    "local switches = { deny = true, reject = true, expire_all = true, reset = true }\n"
    "\n"
    "local function control(req)\n"
    "  local j = json.decode(req.body)\n"
    "  if type(j) ~= 'table' then return oauth_error(400, 'invalid_request', 'POST /control wants a JSON object') end\n"
    "  for k, v in pairs(j) do\n"
    "    if not switches[k] or type(v) ~= 'boolean' then\n"
    "      return oauth_error(400, 'invalid_request', 'control fields are deny, reject, expire_all, reset: booleans; not '\n"
    "                         .. tostring(k))\n"
    "    end\n"
    "  end\n"
    "  if j.reset then fresh() end\n"
    "  if j.deny ~= nil then st.deny = j.deny end\n"
    "  if j.reject ~= nil then st.reject = j.reject end\n"
    "  if j.expire_all then for _, a in pairs(st.access) do a.expires = 0 end end\n"
    "  return reply(200, { ok = true, deny = st.deny, reject = st.reject })\n"
    "end\n"
    "\n"
    "function host.handle(req)\n"
    "  local m, path = req.method, req.path\n"
    "  if m == 'GET' and path == '/authorize' then return authorize(req) end\n"
    "  if m == 'POST' and path == '/token' then return token(req) end\n"
    "  if m == 'GET' and path:sub(1, 10) == '/resource/' then return resource(req) end\n"
    "  if m == 'POST' and path == '/control' then return control(req) end\n"
    "  if m == 'GET' and path == '/stats' then return reply(200, st.stats) end\n"
    "  return oauth_error(404, 'not_found', 'no route for ' .. m .. ' ' .. path)\n"
    "end\n"
    "\n"
    "-- Invalid UTF-8 becomes U+FFFD, so every log line is valid JSON.\n"
    "local function valid_utf8(s)\n"
    "  if utf8.len(s) then return s end\n"
    "  local out, i = {}, 1\n"
    "  while i <= #s do\n"
    "    local ok, bad = utf8.len(s, i)\n"
    "    if ok then\n"
    "      out[#out + 1] = s:sub(i)\n"
    "      break\n"
    "    end\n"
    "    out[#out + 1] = s:sub(i, bad - 1) .. '\\u{FFFD}'\n"
    "    i = bad + 1\n"
    "  end\n"
    "  return table.concat(out)\n"
    "end\n"
    "\n"
    "local secret_header = { authorization = true, ['proxy-authorization'] = true, cookie = true }\n"
    "local secret_param = { code = true, code_verifier = true, client_secret = true, refresh_token = true,\n"
    "                       access_token = true, state = true }\n"
    "\n"
    "-- secret values in form fields (k=v) and in JSON members (\"k\": \"v\"), wherever they come\n"
    "local function redact(s)\n"
    "  s = s:gsub('([^&=]*)=([^&]*)', function(k, v)\n"
    "    if secret_param[unescape(k)] then return k .. '=<redacted:' .. #v .. '>' end\n"
    "  end)\n"
    "  return (s:gsub('\"([%w_]+)\"(%s*:%s*)\"([^\"]*)\"', function(k, sep, v)\n"
    "    if secret_param[k] then return '\"' .. k .. '\"' .. sep .. '\"<redacted:' .. #v .. '>\"' end\n"
    "  end))\n"
    "end\n"
    "\n"
    "function host.log_line(req)\n"
    "  local h = {}\n"
    "  for k, v in pairs(req.headers) do h[k] = secret_header[k] and ('<redacted:' .. #v .. '>') or valid_utf8(v) end\n"
    "  return encode({ n = req.n, method = req.method, path = valid_utf8(req.path),\n"
    "                  query = req.query and valid_utf8(redact(req.query)), headers = h,\n"
    "                  body = valid_utf8(redact(req.body)) })\n"
    "end\n"
    "\n"
    "return host\n",
  NULL};

/* ------------------------------------------------------------- primitives */

static const char HEX[] = "0123456789abcdef";

/* sha256_b64url(s): base64url of SHA-256(s), no padding (RFC 7636 S256). */
static int l_sha256_b64url(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  unsigned char md[EVP_MAX_MD_SIZE], out[48];
  unsigned int mdlen = 0;
  int n;
  if (EVP_Digest(s, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
    return luaL_error(L, "sha256: libcrypto failed");
  n = EVP_EncodeBlock(out, md, 32); /* 44 characters, the last one '=' */
  while (n > 0 && out[n - 1] == '=') n--;
  for (int i = 0; i < n; i++) {
    if (out[i] == '+') out[i] = '-';
    else if (out[i] == '/') out[i] = '_';
  }
  lua_pushlstring(L, (const char *)out, (size_t)n);
  return 1;
}

/* b64decode(s): the bytes, or nil when s is not padded base64. */
static int l_b64decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  unsigned char *out;
  int n;
  if (len == 0 || len % 4 || len > 4096) return 0;
  out = lua_newuserdatauv(L, len / 4 * 3, 0);
  n = EVP_DecodeBlock(out, (const unsigned char *)s, (int)len);
  if (n < 0) return 0;
  if (s[len - 1] == '=') n--; /* EVP_DecodeBlock counts the padding as zero bytes */
  if (s[len - 2] == '=') n--;
  lua_pushlstring(L, (const char *)out, (size_t)n);
  return 1;
}

/* random_hex(n): 2n hex digits from n random bytes. */
static int l_random_hex(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  unsigned char buf[64];
  char out[128];
  luaL_argcheck(L, n > 0 && n <= 64, 1, "1..64");
  if (RAND_bytes(buf, (int)n) != 1) return luaL_error(L, "random: libcrypto failed");
  for (lua_Integer i = 0; i < n; i++) {
    out[2 * i] = HEX[buf[i] >> 4];
    out[2 * i + 1] = HEX[buf[i] & 15];
  }
  lua_pushlstring(L, out, (size_t)(2 * n));
  return 1;
}

/* now(): seconds on a monotonic clock (expiry). */
static int l_now(lua_State *L) {
  lua_pushnumber(L, (lua_Number)uv_hrtime() / 1e9);
  return 1;
}

/* ------------------------------------------------------------- requests */

/* Protected: push the request table (the handler's strings are copied). */
static int l_push_request(lua_State *L) {
  const moor_http_request *r = lua_touserdata(L, 1);
  lua_createtable(L, 0, 7);
  lua_pushinteger(L, lua_tointeger(L, 2));
  lua_setfield(L, -2, "n");
  lua_pushstring(L, r->method);
  lua_setfield(L, -2, "method");
  lua_pushstring(L, r->path);
  lua_setfield(L, -2, "path");
  if (r->query) {
    lua_pushstring(L, r->query);
    lua_setfield(L, -2, "query");
  }
  lua_createtable(L, 0, (int)r->nheaders);
  for (size_t i = 0; i < r->nheaders; i++) {
    /* a repeated header is one value, joined as HTTP allows */
    if (lua_getfield(L, -1, r->names[i]) == LUA_TSTRING) {
      lua_pushliteral(L, ", ");
      lua_pushstring(L, r->values[i]);
      lua_concat(L, 3);
    } else {
      lua_pop(L, 1);
      lua_pushstring(L, r->values[i]);
    }
    lua_setfield(L, -2, r->names[i]);
  }
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, r->body, r->body_len);
  lua_setfield(L, -2, "body");
  return 1;
}

/* Call the prelude's host.NAME on the value at the top (popped); pushes its
 * result, or returns nonzero with the message pushed. */
static int call_host(app *a, const char *name) {
  lua_State *L = a->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->host_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_insert(L, -2);
  return lua_pcall(L, 1, 1, 0);
}

static void write_log(app *a, const char *line, size_t len) {
  if (!a->log) return;
  if (a->log_newline) fputc('\n', a->log);
  a->log_newline = 0;
  fwrite(line, 1, len, a->log);
  fputc('\n', a->log);
  if (fflush(a->log) || ferror(a->log)) fprintf(stderr, "fake_oauth: writing the log: %s\n", strerror(errno));
}

static const char INTERNAL_ERROR[] =
    "{\"error\":\"server_error\",\"error_description\":\"fake_oauth: internal error\"}";

static void on_request(moor_http *srv, const moor_http_request *r, void *ud) {
  app *a = ud;
  lua_State *L = a->L;
  int top = lua_gettop(L), status, isnum, rc;
  const char *ctype, *headers, *body;
  size_t len, llen;
  a->n++;
  if (!lua_checkstack(L, 8)) goto internal;
  lua_pushcfunction(L, l_push_request);
  lua_pushlightuserdata(L, (void *)r);
  lua_pushinteger(L, (lua_Integer)a->n);
  if (lua_pcall(L, 2, 1, 0)) goto internal; /* only out of memory */
  lua_pushvalue(L, top + 1);
  if (call_host(a, "log_line") == 0) {
    const char *line = lua_tolstring(L, -1, &llen);
    write_log(a, line, llen);
  } else {
    fprintf(stderr, "fake_oauth: request %lld: no log line: %s\n", a->n, lua_tostring(L, -1));
  }
  lua_pop(L, 1);
  if (call_host(a, "handle")) goto internal; /* the request table is the argument */
  /* the prelude's own table: plain reads */
  lua_getfield(L, -1, "status");
  status = (int)lua_tointegerx(L, -1, &isnum);
  lua_getfield(L, -2, "ctype");
  ctype = lua_tostring(L, -1);
  lua_getfield(L, -3, "headers");
  headers = lua_tostring(L, -1);
  lua_getfield(L, -4, "body");
  body = lua_tolstring(L, -1, &len);
  if (!isnum || !ctype || !headers || !body) goto internal;
  rc = moor_http_respond(srv, r->conn, status, ctype, *headers ? headers : NULL, body, len);
  /* MOOR_ENOTFOUND: the client is gone */
  if (rc && rc != MOOR_ENOTFOUND) fprintf(stderr, "fake_oauth: request %lld: cannot answer (code %d)\n", a->n, rc);
  lua_settop(L, top);
  return;
internal:
  fprintf(stderr, "fake_oauth: request %lld: %s\n", a->n,
          lua_gettop(L) > top && lua_isstring(L, -1) ? lua_tostring(L, -1) : "internal error");
  lua_settop(L, top);
  moor_http_respond(srv, r->conn, 500, "application/json", NULL, INTERNAL_ERROR, sizeof INTERNAL_ERROR - 1);
}

typedef struct prelude_reader {
  size_t i;
} prelude_reader;

static const char *read_prelude(lua_State *L, void *ud, size_t *size) {
  prelude_reader *pr = ud;
  const char *s = PRELUDE[pr->i];
  (void)L;
  if (!s) return NULL;
  pr->i++;
  *size = strlen(s);
  return s;
}

/* Protected: moor.json preloaded, the prelude run with the primitives and
 * the options; returns its table. */
static int l_setup(lua_State *L) {
  const options *o = lua_touserdata(L, 1);
  static const luaL_Reg prims[] = {{"sha256_b64url", l_sha256_b64url}, {"b64decode", l_b64decode},
                                   {"random_hex", l_random_hex}, {"now", l_now}, {NULL, NULL}};
  prelude_reader pr = {0};
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_moor_json);
  lua_setfield(L, -2, "moor.json");
  lua_pop(L, 1);
  if (lua_load(L, read_prelude, &pr, "=prelude", "t")) return lua_error(L);
  luaL_newlib(L, prims);
  lua_createtable(L, 0, 4);
  lua_pushstring(L, o->client_id);
  lua_setfield(L, -2, "client_id");
  if (o->client_secret) {
    lua_pushstring(L, o->client_secret);
    lua_setfield(L, -2, "client_secret");
  }
  lua_pushinteger(L, (lua_Integer)o->expires_in);
  lua_setfield(L, -2, "expires_in");
  lua_pushboolean(L, o->deny);
  lua_setfield(L, -2, "deny");
  lua_call(L, 2, 1);
  if (!lua_istable(L, -1)) return luaL_error(L, "the prelude returned no table");
  return 1;
}

static int setup_lua(app *a, const options *o) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "fake_oauth: out of memory\n");
    return -1;
  }
  a->L = L;
  lua_pushcfunction(L, l_setup);
  lua_pushlightuserdata(L, (void *)o);
  if (lua_pcall(L, 1, 1, 0)) {
    fprintf(stderr, "fake_oauth: %s\n", lua_tostring(L, -1));
    return -1;
  }
  a->host_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

/* ------------------------------------------------------------------ setup */

/* Open the log for appending and count its lines, so request numbers go on
 * across restarts. A last line cut short (a kill in mid-write) counts. */
static int open_log(app *a, const char *path) {
  FILE *f = fopen(path, "rb");
  char buf[65536];
  size_t got;
  int last = '\n';
  if (f) {
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
      for (size_t i = 0; i < got; i++)
        if (buf[i] == '\n') a->n++;
      last = (unsigned char)buf[got - 1];
    }
    fclose(f);
    if (last != '\n') {
      a->n++;
      a->log_newline = 1;
    }
  }
  a->log = fopen(path, "ab");
  if (!a->log) {
    fprintf(stderr, "fake_oauth: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* "HOST:PORT", "[V6]:PORT" */
static int parse_listen(app *a, const char *s) {
  const char *colon = strrchr(s, ':'), *h = s;
  size_t hlen;
  char *end;
  long port;
  if (!colon) return -1;
  hlen = (size_t)(colon - s);
  if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
    h++;
    hlen -= 2;
  }
  if (hlen == 0 || hlen >= sizeof a->host) return -1;
  memcpy(a->host, h, hlen);
  a->host[hlen] = '\0';
  errno = 0;
  port = strtol(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end || port < 0 || port > 65535) return -1;
  a->cfg.port = (int)port;
  return 0;
}

static void on_signal(uv_signal_t *h, int signum) {
  app *a = h->data;
  (void)signum;
  if (!a->srv) return;
  moor_http_stop(a->srv);
  a->srv = NULL;
  uv_close((uv_handle_t *)&a->sigterm, NULL);
  uv_close((uv_handle_t *)&a->sigint, NULL);
}

static int usage(void) {
  fprintf(stderr, "usage: fake_oauth [--listen 127.0.0.1:0] [--log FILE.jsonl] [--client-id ID]\n"
                  "                  [--client-secret S] [--expires-in SECONDS] [--deny]\n");
  return 2;
}

int main(int argc, char **argv) {
  static app a; /* zeroed; lives as long as the loop */
  options o = {"moor-test", NULL, 3600, 0};
  uv_loop_t loop;
  const char *log = NULL, *listen = "127.0.0.1:0";
  char err[256], *end;
  int rc = 1;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && !strcmp(argv[i], "--listen")) listen = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--log")) log = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--client-id")) o.client_id = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--client-secret")) o.client_secret = argv[++i];
    else if (!strcmp(argv[i], "--deny")) o.deny = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--expires-in")) {
      errno = 0;
      o.expires_in = strtoll(argv[++i], &end, 10);
      if (errno || end == argv[i] || *end || o.expires_in < 1) {
        fprintf(stderr, "fake_oauth: --expires-in wants whole seconds >= 1, not '%s'\n", argv[i]);
        return 2;
      }
    } else return usage();
  }
  if (parse_listen(&a, listen)) {
    fprintf(stderr, "fake_oauth: --listen wants HOST:PORT, not '%s'\n", listen);
    return 2;
  }
  a.cfg.host = a.host;
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error code, not a death */
  if (setup_lua(&a, &o) || (log && open_log(&a, log))) goto out;
  if (uv_loop_init(&loop)) goto out;
  uv_signal_init(&loop, &a.sigterm);
  uv_signal_init(&loop, &a.sigint);
  a.sigterm.data = a.sigint.data = &a;
  if (moor_http_start(&loop, &a.cfg, on_request, NULL, &a, &a.srv, err, sizeof err)) {
    fprintf(stderr, "fake_oauth: %s\n", err);
    uv_close((uv_handle_t *)&a.sigterm, NULL);
    uv_close((uv_handle_t *)&a.sigint, NULL);
    uv_run(&loop, UV_RUN_DEFAULT); /* frees what a failed start left closing */
    uv_loop_close(&loop);
    goto out;
  }
  uv_signal_start(&a.sigterm, on_signal, SIGTERM);
  uv_signal_start(&a.sigint, on_signal, SIGINT);
  printf(strchr(a.host, ':') ? "http://[%s]:%d\n" : "http://%s:%d\n", a.host, moor_http_port(a.srv));
  fflush(stdout);
  uv_run(&loop, UV_RUN_DEFAULT); /* until a signal has closed every handle */
  rc = 0;
  if (uv_loop_close(&loop)) {
    fprintf(stderr, "fake_oauth: handles left open at exit\n");
    rc = 1;
  }
out:
  if (a.L) lua_close(a.L);
  if (a.log && fclose(a.log)) rc = 1;
  return rc;
}
