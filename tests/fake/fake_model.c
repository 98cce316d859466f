/* fake_model: a scripted OpenAI- and Anthropic-compatible model server, so
 * end-to-end tests drive moor's real provider clients (libcurl, retries,
 * timeouts, parse errors) with no hosted model.
 *
 *   fake_model --script FILE.lua [--listen 127.0.0.1:0] [--log FILE.jsonl]
 *
 * The first line of stdout is the base URL; SIGTERM or SIGINT stops it
 * cleanly (exit 0). POST /v1/chat/completions and POST /v1/messages go to the
 * script's respond(req); anything else is a 404. Every request is appended to
 * the log as one JSON line, secrets redacted, flushed at once: tests count
 * model calls across a host killed and restarted, so the numbering goes on
 * from the lines already in the log. See tests/fake/README.md.
 *
 * The C side is only transport: the server (host/http.c), timers for delayed
 * answers, the log file. What a request means, the helpers scripts use and
 * the JSON all live in Lua (the prelude below, the project's moor.json). */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "http.h"
#include "json.h"
#include "moor.h"

#define BODY_LIMIT ((size_t)32 << 20) /* whole conversations with images come in */

typedef struct pending pending;

typedef struct app {
  uv_loop_t *loop;
  lua_State *L;
  int respond_ref, host_ref;   /* registry refs: the script's respond, the prelude's table */
  moor_http *srv;
  moor_http_config cfg;        /* the port is the bound one after the first start */
  char host[64];
  FILE *log;
  int log_newline;             /* the log ends in a partial line: end it first */
  long long n;                 /* requests so far, the log's earlier lines included */
  uv_signal_t sigterm, sigint;
  pending *pend;               /* delayed answers */
  int stopping, exit_code;
} app;

/* An answer waiting for its delay. */
struct pending {
  uv_timer_t timer;
  app *a;
  unsigned long long conn;
  int status, drop;
  char *ctype, *headers, *body;
  size_t len;
  char **pieces;               /* a streamed answer: one write each, every interval ms */
  size_t *plens, npieces, sent;
  long long cut;               /* drop the connection after this many writes; -1: never */
  uint64_t interval;
  int started;                 /* the stream's head is sent */
  pending *prev, *next;
};

/* The Lua prelude: plain Lua, one C string per line, in pieces of under
 * 4095 bytes (the longest string literal ISO C promises; -Wpedantic). */
static const char *const PRELUDE[] = {
    "-- The prelude: the `fake` helpers scripts see, and the host's side of each\n"
    "-- request (log line, routing, checking what the script returned). Returns the\n"
    "-- private table the C side calls.\n"
    "local json = require 'moor.json'\n"
    "local null = json.null\n"
    "local fake = { json = json, null = null }\n"
    "local host = {}\n"
    "local current -- the request being answered: helpers echo its model and number\n"
    "\n"
    "local function nth() return current and current.n or 0 end\n"
    "\n"
    "local function model_of()\n"
    "  local j = current and current.json\n"
    "  if type(j) == 'table' and type(j.model) == 'string' then return j.model end\n"
    "  return 'fake-model'\n"
    "end\n"
    "\n"
    "local function encode(v, what)\n"
    "  local s, msg = json.encode(v, 0, what)\n"
    "  if not s then error(msg, 3) end\n"
    "  return s\n"
    "end\n"
    "\n"
    "local function openai(message, finish, usage)\n"
    "  usage = usage or {}\n"
    "  local pt, ct = usage.prompt_tokens or 10, usage.completion_tokens or 5\n"
    "  return { status = 200, json = {\n"
    "    id = 'chatcmpl-fake-' .. nth(), object = 'chat.completion', created = os.time(),\n"
    "    model = model_of(),\n"
    "    choices = { { index = 0, message = message, finish_reason = finish } },\n"
    "    usage = { prompt_tokens = pt, completion_tokens = ct, total_tokens = usage.total_tokens or pt + ct },\n"
    "  } }\n"
    "end\n"
    "\n"
    "function fake.openai_text(text, usage)\n"
    "  return openai({ role = 'assistant', content = text }, 'stop', usage)\n"
    "end\n"
    "\n"
    "function fake.openai_tool_calls(calls, text, usage)\n"
    "  local out = {}\n"
    "  for i, c in ipairs(calls) do\n"
    "    local args = c.arguments\n"
    "    -- a string goes as given, so a script can send broken arguments on purpose\n"
    "    if type(args) ~= 'string' then args = encode(args == nil and {} or args, 'arguments') end\n"
    "    out[i] = { id = c.id or ('call_' .. nth() .. '_' .. i), type = 'function',\n"
    "               ['function'] = { name = c.name, arguments = args } }\n"
    "  end\n"
    "  return openai({ role = 'assistant', content = text == nil and null or text, tool_calls = out },\n"
    "                'tool_calls', usage)\n"
    "end\n",
    "local function anthropic(content, stop, usage)\n"
    "  usage = usage or {}\n"
    "  return { status = 200, json = {\n"
    "    id = 'msg_fake_' .. nth(), type = 'message', role = 'assistant', model = model_of(),\n"
    "    content = json.array(content), stop_reason = stop, stop_sequence = null,\n"
    "    usage = { input_tokens = usage.input_tokens or 10, output_tokens = usage.output_tokens or 5 },\n"
    "  } }\n"
    "end\n"
    "\n"
    "function fake.anthropic_text(text, usage)\n"
    "  return anthropic({ { type = 'text', text = text } }, 'end_turn', usage)\n"
    "end\n"
    "\n"
    "function fake.anthropic_tool_use(uses, text, usage)\n"
    "  local content = {}\n"
    "  if text ~= nil then content[1] = { type = 'text', text = text } end\n"
    "  for i, u in ipairs(uses) do\n"
    "    content[#content + 1] = { type = 'tool_use', id = u.id or ('toolu_fake_' .. nth() .. '_' .. i),\n"
    "                              name = u.name, input = u.input or u.arguments or {} }\n"
    "  end\n"
    "  return anthropic(content, 'tool_use', usage)\n"
    "end\n"
    "\n"
    "-- The same answers in the format of the API the request came to.\n"
    "function fake.text(text, usage)\n"
    "  if current and current.api == 'anthropic' then return fake.anthropic_text(text, usage) end\n"
    "  return fake.openai_text(text, usage)\n"
    "end\n"
    "\n"
    "function fake.tool_calls(calls, text, usage)\n"
    "  if current and current.api == 'anthropic' then return fake.anthropic_tool_use(calls, text, usage) end\n"
    "  return fake.openai_tool_calls(calls, text, usage)\n"
    "end\n"
    "\n"
    "local error_types = {\n"
    "  [400] = 'invalid_request_error', [401] = 'authentication_error', [403] = 'permission_error',\n"
    "  [404] = 'not_found_error', [413] = 'request_too_large', [429] = 'rate_limit_error',\n"
    "  [500] = 'api_error', [529] = 'overloaded_error',\n"
    "}\n"
    "\n"
    "function fake.error(status, message)\n"
    "  local kind = error_types[status] or (status >= 500 and 'api_error' or 'invalid_request_error')\n"
    "  if current and current.api == 'anthropic' then\n"
    "    return { status = status, json = { type = 'error', error = { type = kind, message = message } } }\n"
    "  end\n"
    "  return { status = status, json = { error = { message = message, type = kind, param = null, code = null } } }\n"
    "end\n",
    "-- The text of a message's content: a string, or the text parts of a list.\n"
    "local function text_of(content)\n"
    "  if type(content) == 'string' then return content end\n"
    "  if type(content) ~= 'table' then return nil end\n"
    "  local parts = {}\n"
    "  for _, p in ipairs(content) do\n"
    "    if type(p) == 'table' and p.type == 'text' and type(p.text) == 'string' then parts[#parts + 1] = p.text end\n"
    "  end\n"
    "  if #parts == 0 then return nil end\n"
    "  return table.concat(parts)\n"
    "end\n"
    "\n"
    "local function messages(req)\n"
    "  req = req or current\n"
    "  local j = req and req.json\n"
    "  if type(j) == 'table' and type(j.messages) == 'table' then return j.messages end\n"
    "  return {}\n"
    "end\n"
    "\n"
    "function fake.last_user_text(req)\n"
    "  local msgs = messages(req)\n"
    "  for i = #msgs, 1, -1 do\n"
    "    local m = msgs[i]\n"
    "    if type(m) == 'table' and m.role == 'user' then\n"
    "      local t = text_of(m.content)\n"
    "      if t then return t end -- a user turn of tool results only has no text: look further back\n"
    "    end\n"
    "  end\n"
    "  return nil\n"
    "end\n"
    "\n"
    "-- Every tool result in the conversation, in order: { id, name, content, is_error }.\n"
    "-- name comes from the assistant turn that made the call.\n"
    "function fake.tool_results(req)\n"
    "  local names, out = {}, {}\n"
    "  for _, m in ipairs(messages(req)) do\n"
    "    if type(m) == 'table' and m.role == 'assistant' then\n"
    "      if type(m.tool_calls) == 'table' then\n"
    "        for _, c in ipairs(m.tool_calls) do\n"
    "          if type(c) == 'table' and c.id ~= nil and type(c['function']) == 'table' then\n"
    "            names[c.id] = c['function'].name\n"
    "          end\n"
    "        end\n"
    "      end\n"
    "      if type(m.content) == 'table' then\n"
    "        for _, b in ipairs(m.content) do\n"
    "          if type(b) == 'table' and b.type == 'tool_use' and b.id ~= nil then names[b.id] = b.name end\n"
    "        end\n"
    "      end\n"
    "    elseif type(m) == 'table' and m.role == 'tool' then\n"
    "      out[#out + 1] = { id = m.tool_call_id, name = names[m.tool_call_id] or m.name,\n"
    "                        content = text_of(m.content) or '', is_error = false }\n"
    "    elseif type(m) == 'table' and m.role == 'user' and type(m.content) == 'table' then\n"
    "      for _, b in ipairs(m.content) do\n"
    "        if type(b) == 'table' and b.type == 'tool_result' then\n"
    "          out[#out + 1] = { id = b.tool_use_id, name = names[b.tool_use_id],\n"
    "                            content = text_of(b.content) or '', is_error = b.is_error == true }\n"
    "        end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  return out\n"
    "end\n",
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
    "local secret = { authorization = true, ['proxy-authorization'] = true, ['x-api-key'] = true, ['api-key'] = true }\n"
    "\n"
    "function host.log_line(req)\n"
    "  local h = {}\n"
    "  for k, v in pairs(req.headers) do h[k] = secret[k] and ('<redacted:' .. #v .. '>') or valid_utf8(v) end\n"
    "  return encode({ n = req.n, method = req.method, path = valid_utf8(req.path),\n"
    "                  query = req.query and valid_utf8(req.query), headers = h, body = valid_utf8(req.body) }, 'log')\n"
    "end\n"
    "\n"
    "local routes = { ['/v1/chat/completions'] = 'openai', ['/v1/messages'] = 'anthropic' }\n"
    "\n"
    "-- Extra header lines, and the content type (passed apart: http.c writes that one).\n"
    "local function header_lines(h)\n"
    "  local names, ctype = {}, nil\n"
    "  for k, v in pairs(h) do\n"
    "    if type(k) ~= 'string' or not k:match(\"^[%w!#$%%&'*+.^_`|~-]+$\") then\n"
    "      error('bad header name ' .. tostring(k), 0)\n"
    "    end\n"
    "    if type(v) == 'number' then v = tostring(v); h[k] = v end\n"
    "    if type(v) ~= 'string' or v:find('[\\r\\n]') then error('header ' .. k .. ': not a one-line string', 0) end\n"
    "    if k:lower() == 'content-type' then ctype = v else names[#names + 1] = k end\n"
    "  end\n"
    "  table.sort(names)\n"
    "  local lines = {}\n"
    "  for i, k in ipairs(names) do lines[i] = k .. ': ' .. h[k] .. '\\r\\n' end\n"
    "  return table.concat(lines), ctype\n"
    "end\n",
    "-- Streaming: a request that asks for a stream (stream = true) gets the answer as\n"
    "-- server-sent events, one event per write: the text in pieces of `chunk`\n"
    "-- characters, each tool call's arguments in three pieces. A response may\n"
    "-- instead give `events` (raw strings, each written as it is: garbage too),\n"
    "-- `stream = false` (answer unstreamed anyway), `interval` (ms between writes,\n"
    "-- default 5), `cut = N` (drop the connection after N writes) and `truncate`\n"
    "-- (end the stream cleanly without its last event).\n"
    "local function pieces_of(s, n)\n"
    "  n = n or math.max(4, -(-(utf8.len(s) or #s) // 64))\n"
    "  local out, cur, k = {}, {}, 0\n"
    "  for _, c in utf8.codes(s) do\n"
    "    cur[#cur + 1] = utf8.char(c)\n"
    "    k = k + 1\n"
    "    if k == n then out[#out + 1] = table.concat(cur); cur, k = {}, 0 end\n"
    "  end\n"
    "  if k > 0 then out[#out + 1] = table.concat(cur) end\n"
    "  return out\n"
    "end\n"
    "\n"
    "local function thirds(s)\n"
    "  local n = #s\n"
    "  if n < 3 then return { s } end\n"
    "  local a, b = n // 3, 2 * n // 3\n"
    "  return { s:sub(1, a), s:sub(a + 1, b), s:sub(b + 1) }\n"
    "end\n"
    "\n"
    "local function sse(v, event)\n"
    "  local d = type(v) == 'string' and v or encode(v, 'event')\n"
    "  return (event and ('event: ' .. event .. '\\n') or '') .. 'data: ' .. d .. '\\n\\n'\n"
    "end\n"
    "\n"
    "local function openai_events(j, n)\n"
    "  local out, id, model = {}, j.id or 'chatcmpl-fake', j.model or model_of()\n"
    "  local function chunk(delta, finish)\n"
    "    out[#out + 1] = sse({ id = id, object = 'chat.completion.chunk', model = model,\n"
    "      choices = { { index = 0, delta = delta, finish_reason = finish or null } } })\n"
    "  end\n"
    "  local c = j.choices[1]\n"
    "  local m = c.message\n"
    "  if type(m.content) == 'string' then\n"
    "    for _, p in ipairs(pieces_of(m.content, n)) do chunk({ role = 'assistant', content = p }) end\n"
    "  end\n"
    "  for i, tc in ipairs(type(m.tool_calls) == 'table' and m.tool_calls or {}) do\n"
    "    local fn = tc['function'] or {}\n"
    "    chunk({ tool_calls = { { index = i - 1, id = tc.id, type = 'function',\n"
    "                             ['function'] = { name = fn.name, arguments = '' } } } })\n"
    "    for _, p in ipairs(thirds(fn.arguments or '')) do\n"
    "      chunk({ tool_calls = { { index = i - 1, ['function'] = { arguments = p } } } })\n"
    "    end\n"
    "  end\n"
    "  chunk({}, c.finish_reason)\n"
    "  out[#out + 1] = sse({ id = id, object = 'chat.completion.chunk', model = model, choices = json.array {},\n"
    "                        usage = j.usage })\n"
    "  out[#out + 1] = sse('[DONE]')\n"
    "  return out\n"
    "end\n"
    "\n"
    "local function anthropic_events(j, n)\n"
    "  local out = {}\n"
    "  local function ev(name, v) v.type = name; out[#out + 1] = sse(v, name) end\n"
    "  local usage = j.usage or {}\n"
    "  ev('message_start', { message = { id = j.id, type = 'message', role = 'assistant', model = j.model,\n"
    "    content = json.array {}, stop_reason = null, usage = { input_tokens = usage.input_tokens, output_tokens = 1 } } })\n"
    "  ev('ping', {})\n"
    "  for i, b in ipairs(j.content) do\n"
    "    if b.type == 'text' then\n"
    "      ev('content_block_start', { index = i - 1, content_block = { type = 'text', text = '' } })\n"
    "      for _, p in ipairs(pieces_of(b.text, n)) do\n"
    "        ev('content_block_delta', { index = i - 1, delta = { type = 'text_delta', text = p } })\n"
    "      end\n"
    "    else\n"
    "      ev('content_block_start', { index = i - 1, content_block = { type = 'tool_use', id = b.id, name = b.name,\n"
    "        input = {} } })\n"
    "      for _, p in ipairs(thirds(encode(b.input, 'input'))) do\n"
    "        ev('content_block_delta', { index = i - 1, delta = { type = 'input_json_delta', partial_json = p } })\n"
    "      end\n"
    "    end\n"
    "    ev('content_block_stop', { index = i - 1 })\n"
    "  end\n"
    "  ev('message_delta', { delta = { stop_reason = j.stop_reason, stop_sequence = null },\n"
    "                        usage = { output_tokens = usage.output_tokens } })\n"
    "  ev('message_stop', {})\n"
    "  return out\n"
    "end\n",
    "\n"
    "-- The writes of a streamed answer, or nil to answer whole.\n"
    "local function stream_of(req, res)\n"
    "  if res.events ~= nil then\n"
    "    if type(res.events) ~= 'table' then error('events must be a list of strings', 0) end\n"
    "    for i, e in ipairs(res.events) do\n"
    "      if type(e) ~= 'string' then error('events[' .. i .. '] is not a string', 0) end\n"
    "    end\n"
    "    return res.events\n"
    "  end\n"
    "  if res.stream == false or type(req.json) ~= 'table' or req.json.stream ~= true then return nil end\n"
    "  local status, j = res.status or 200, res.json\n"
    "  if status ~= 200 or type(j) ~= 'table' then return nil end\n"
    "  local n = res.chunk -- default: 4 characters, or more so that no text has over 64 pieces\n"
    "  local out\n"
    "  if type(j.choices) == 'table' and type(j.choices[1]) == 'table' and type(j.choices[1].message) == 'table' then\n"
    "    out = openai_events(j, n)\n"
    "  elseif j.type == 'message' and type(j.content) == 'table' then\n"
    "    out = anthropic_events(j, n)\n"
    "  end\n"
    "  if out and res.truncate then out[#out] = nil end -- a stream that ends cleanly before its end\n"
    "  return out\n"
    "end\n",
    "local function reply(res, req)\n"
    "  if type(res) ~= 'table' then error('respond returned ' .. type(res) .. ', not a response table', 0) end\n"
    "  local status = res.status or 200\n"
    "  if math.type(status) ~= 'integer' or status < 200 or status > 999 then\n"
    "    error('status must be an integer in 200..999, not ' .. tostring(status), 0)\n"
    "  end\n"
    "  local body = res.body\n"
    "  if res.json ~= nil then\n"
    "    if body ~= nil then error('a response has json or body, not both', 0) end\n"
    "    body = encode(res.json, 'json')\n"
    "  elseif body == nil then\n"
    "    body = ''\n"
    "  elseif type(body) ~= 'string' then\n"
    "    error('body must be a string, not ' .. type(body), 0)\n"
    "  end\n"
    "  local headers, ctype = '', nil\n"
    "  if res.headers ~= nil then\n"
    "    if type(res.headers) ~= 'table' then error('headers must be a table', 0) end\n"
    "    headers, ctype = header_lines(res.headers)\n"
    "  end\n"
    "  local delay = res.delay or 0\n"
    "  if type(delay) ~= 'number' or delay < 0 or delay > 86400000 then error('delay must be milliseconds >= 0', 0) end\n"
    "  local pieces = stream_of(req, res)\n"
    "  local interval, cut = res.interval or 5, res.cut\n"
    "  if type(interval) ~= 'number' or interval < 0 or interval > 600000 then error('interval must be milliseconds >= 0', 0) end\n"
    "  if cut ~= nil and math.type(cut) ~= 'integer' then error('cut must be a number of writes', 0) end\n"
    "  if pieces then ctype = ctype or 'text/event-stream' end\n"
    "  return { status = status, ctype = ctype or 'application/json', headers = headers, body = body,\n"
    "           delay = math.floor(delay), close = res.close == true, pieces = pieces,\n"
    "           interval = math.floor(interval), cut = cut }\n"
    "end\n"
    "\n"
    "local function failed(status, message)\n"
    "  return { status = status, ctype = 'application/json', headers = '', delay = 0, close = false,\n"
    "           body = encode({ error = { message = valid_utf8(message), type = 'fake_model' } }, 'error') }\n"
    "end\n"
    "\n"
    "-- The response for req, as plain fields for C; a second value is the\n"
    "-- script's error with its traceback, for stderr.\n"
    "function host.handle(respond, req)\n"
    "  req.api = routes[req.path]\n"
    "  if req.method ~= 'POST' or not req.api then\n"
    "    return failed(404, 'no route for ' .. req.method .. ' ' .. req.path)\n"
    "  end\n"
    "  if req.body ~= '' then req.json = json.decode(req.body) end\n"
    "  current = req\n"
    "  local err\n"
    "  local ok, res = xpcall(function() return reply(respond(req), req) end, function(e)\n"
    "    err = { message = tostring(e), trace = debug.traceback(tostring(e), 2) }\n"
    "  end)\n"
    "  current = nil\n"
    "  if ok then return res end\n"
    "  return failed(500, 'script error: ' .. err.message), err.trace\n"
    "end\n"
    "\n"
    "_G.fake = fake\n"
    "return host\n",
  NULL};

static int start_server(app *a);

/* ---------------------------------------------------------------- pending */

static void on_pending_closed(uv_handle_t *h) {
  pending *p = h->data;
  free(p->ctype);
  free(p->headers);
  free(p->body);
  for (size_t i = 0; i < p->npieces; i++) free(p->pieces[i]);
  free(p->pieces);
  free(p->plens);
  free(p);
}

static void pending_unlink(pending *p) {
  if (p->prev) p->prev->next = p->next;
  else p->a->pend = p->next;
  if (p->next) p->next->prev = p->prev;
  p->prev = p->next = NULL;
}

static void pending_free(pending *p) {
  pending_unlink(p);
  uv_close((uv_handle_t *)&p->timer, on_pending_closed);
}

/* Every pending answer belongs to the current server: drop them before it
 * stops, as a new server reuses connection ids. */
static void pending_clear(app *a) {
  while (a->pend) pending_free(a->pend);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* ------------------------------------------------------------- answering */

static void shutdown_app(app *a, int code) {
  if (a->stopping) return;
  a->stopping = 1;
  a->exit_code = code;
  pending_clear(a);
  if (a->srv) moor_http_stop(a->srv);
  a->srv = NULL;
  uv_close((uv_handle_t *)&a->sigterm, NULL);
  uv_close((uv_handle_t *)&a->sigint, NULL);
}

/* close = true: http.c can close no single connection, so close them all by
 * stopping the server (its sockets are closed at once, the client sees the
 * connection end with no response) and listen again on the same port. */
static void drop_connections(app *a) {
  pending_clear(a);
  moor_http_stop(a->srv);
  a->srv = NULL;
  if (start_server(a)) shutdown_app(a, 1);
}

static void answer(app *a, unsigned long long conn, int status, const char *ctype, const char *headers,
                   const char *body, size_t len, int drop) {
  int rc;
  if (drop) {
    drop_connections(a);
    return;
  }
  rc = moor_http_respond(a->srv, conn, status, ctype, headers && *headers ? headers : NULL, body, len);
  /* MOOR_ENOTFOUND: the client gave up (a delay longer than its timeout) */
  if (rc && rc != MOOR_ENOTFOUND) fprintf(stderr, "fake_model: cannot answer (code %d)\n", rc);
}

static void on_pending_due(uv_timer_t *t);

/* The next write of a streamed answer: the head first, then one piece per
 * interval; after the last, the end of the body, or a drop at `cut`. */
static void stream_step(pending *p) {
  app *a = p->a;
  int rc = 0;
  if (!p->started) {
    rc = moor_http_stream_start(a->srv, p->conn, p->status, p->ctype, *p->headers ? p->headers : NULL);
    p->started = 1;
  }
  if (!rc && p->cut >= 0 && (long long)p->sent >= p->cut) {
    pending_unlink(p);
    uv_close((uv_handle_t *)&p->timer, on_pending_closed);
    drop_connections(a); /* a stream cut in the middle: the client sees the connection end */
    return;
  }
  if (!rc && p->sent < p->npieces) {
    rc = moor_http_stream_write(a->srv, p->conn, p->pieces[p->sent], p->plens[p->sent]);
    p->sent++;
    if (!rc && (p->sent < p->npieces || p->cut >= 0)) {
      uv_timer_start(&p->timer, on_pending_due, p->interval, 0);
      return;
    }
  }
  if (!rc) rc = moor_http_stream_end(a->srv, p->conn);
  /* MOOR_ENOTFOUND: the client went away mid-stream (a kill -9) */
  if (rc && rc != MOOR_ENOTFOUND) fprintf(stderr, "fake_model: cannot stream (code %d)\n", rc);
  pending_unlink(p);
  uv_close((uv_handle_t *)&p->timer, on_pending_closed);
}

static void on_pending_due(uv_timer_t *t) {
  pending *p = t->data;
  app *a = p->a;
  if (p->pieces) {
    stream_step(p);
    return;
  }
  pending_unlink(p); /* before answering: a drop clears the list */
  answer(a, p->conn, p->status, p->ctype, p->headers, p->body, p->len, p->drop);
  uv_close((uv_handle_t *)&p->timer, on_pending_closed);
}

/* Copy the strings of the list at index idx as p's stream pieces. */
static int take_pieces(pending *p, lua_State *L, int idx) {
  size_t n = (size_t)lua_rawlen(L, idx);
  p->pieces = calloc(n ? n : 1, sizeof *p->pieces);
  p->plens = calloc(n ? n : 1, sizeof *p->plens);
  if (!p->pieces || !p->plens) return MOOR_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    size_t len;
    lua_rawgeti(L, idx, (lua_Integer)i + 1);
    const char *s = lua_tolstring(L, -1, &len); /* strings: the prelude checked */
    p->pieces[i] = malloc(len + 1);
    if (!s || !p->pieces[i]) {
      lua_pop(L, 1);
      return MOOR_ENOMEM;
    }
    memcpy(p->pieces[i], s, len);
    p->plens[i] = len;
    p->npieces = i + 1;
    lua_pop(L, 1);
  }
  return 0;
}

/* An answer later (after delay ms), or a streamed one: pieces (stack index,
 * 0 for none) written every interval ms, the connection dropped after cut
 * writes (cut < 0: never). */
static int answer_later(app *a, unsigned long long conn, int status, const char *ctype, const char *headers,
                        const char *body, size_t len, int drop, uint64_t delay, lua_State *L, int pieces,
                        uint64_t interval, long long cut) {
  pending *p = calloc(1, sizeof *p);
  if (!p) return MOOR_ENOMEM;
  p->interval = interval;
  p->cut = cut;
  if (pieces && take_pieces(p, L, pieces)) {
    for (size_t i = 0; i < p->npieces; i++) free(p->pieces[i]);
    free(p->pieces);
    free(p->plens);
    free(p);
    return MOOR_ENOMEM;
  }
  p->a = a;
  p->conn = conn;
  p->status = status;
  p->drop = drop;
  p->len = len;
  p->ctype = dup_str(ctype);
  p->headers = dup_str(headers);
  p->body = malloc(len + 1);
  if (!p->ctype || !p->headers || !p->body) {
    free(p->ctype);
    free(p->headers);
    free(p->body);
    for (size_t i = 0; i < p->npieces; i++) free(p->pieces[i]);
    free(p->pieces);
    free(p->plens);
    free(p);
    return MOOR_ENOMEM;
  }
  memcpy(p->body, body, len);
  uv_timer_init(a->loop, &p->timer); /* cannot fail */
  p->timer.data = p;
  p->next = a->pend;
  if (a->pend) a->pend->prev = p;
  a->pend = p;
  uv_timer_start(&p->timer, on_pending_due, delay, 0);
  return 0;
}

/* ------------------------------------------------------------------ Lua */

/* Protected: push the request table (the handler's strings are copied). */
static int l_push_request(lua_State *L) {
  const moor_http_request *r = lua_touserdata(L, 1);
  lua_Integer n = lua_tointeger(L, 2);
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, n);
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

/* Call the prelude's host.NAME with nargs arguments on the stack (popped);
 * pushes nret results, or returns nonzero with the message pushed. */
static int call_host(app *a, const char *name, int nargs, int nret) {
  lua_State *L = a->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->host_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  lua_insert(L, -(nargs + 1));
  return lua_pcall(L, nargs, nret, 0);
}

static void write_log(app *a, const char *line, size_t len) {
  if (!a->log) return;
  if (a->log_newline) fputc('\n', a->log);
  a->log_newline = 0;
  fwrite(line, 1, len, a->log);
  fputc('\n', a->log);
  if (fflush(a->log) || ferror(a->log)) fprintf(stderr, "fake_model: writing the log: %s\n", strerror(errno));
}

static const char INTERNAL_ERROR[] =
    "{\"error\":{\"message\":\"fake_model: internal error\",\"type\":\"fake_model\"}}";

static void on_request(moor_http *srv, const moor_http_request *r, void *ud) {
  app *a = ud;
  lua_State *L = a->L;
  int top = lua_gettop(L), status, isnum, rc;
  lua_Integer delay;
  const char *ctype, *headers, *body;
  size_t len, llen;
  (void)srv;
  a->n++;
  if (!lua_checkstack(L, 8)) goto internal;
  lua_pushcfunction(L, l_push_request);
  lua_pushlightuserdata(L, (void *)r);
  lua_pushinteger(L, (lua_Integer)a->n);
  if (lua_pcall(L, 2, 1, 0)) goto internal; /* only out of memory */
  /* log first, so a request whose script fails or hangs is still counted */
  lua_pushvalue(L, top + 1);
  if (call_host(a, "log_line", 1, 1) == 0) {
    const char *line = lua_tolstring(L, -1, &llen);
    write_log(a, line, llen);
  } else {
    fprintf(stderr, "fake_model: request %lld: no log line: %s\n", a->n, lua_tostring(L, -1));
  }
  lua_pop(L, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->respond_ref);
  lua_pushvalue(L, top + 1);
  if (call_host(a, "handle", 2, 2)) goto internal;
  if (lua_isstring(L, -1)) fprintf(stderr, "fake_model: request %lld: %s\n", a->n, lua_tostring(L, -1));
  lua_pop(L, 1);
  /* the table is the prelude's own, with every field checked: plain reads */
  lua_getfield(L, -1, "status");
  status = (int)lua_tointegerx(L, -1, &isnum);
  lua_getfield(L, -2, "ctype");
  ctype = lua_tostring(L, -1);
  lua_getfield(L, -3, "headers");
  headers = lua_tostring(L, -1);
  lua_getfield(L, -4, "body");
  body = lua_tolstring(L, -1, &len);
  lua_getfield(L, -5, "delay");
  delay = lua_tointeger(L, -1);
  lua_getfield(L, -6, "close");
  int drop = lua_toboolean(L, -1);
  lua_getfield(L, -7, "interval");
  lua_Integer interval = lua_tointeger(L, -1);
  lua_getfield(L, -8, "cut");
  long long cut = lua_isinteger(L, -1) ? (long long)lua_tointeger(L, -1) : -1;
  int pieces = lua_getfield(L, -9, "pieces") == LUA_TTABLE ? lua_gettop(L) : 0;
  if (!isnum || !ctype || !headers || !body) goto internal;
  if (delay > 0 || pieces) {
    rc = answer_later(a, r->conn, status, ctype, headers, body, len, drop, (uint64_t)(delay > 0 ? delay : 0), L,
                      pieces, (uint64_t)(interval > 0 ? interval : 0), cut);
    if (rc) goto internal;
  } else {
    answer(a, r->conn, status, ctype, headers, body, len, drop);
  }
  lua_settop(L, top);
  return;
internal:
  fprintf(stderr, "fake_model: request %lld: %s\n", a->n,
          lua_gettop(L) > top && lua_isstring(L, -1) ? lua_tostring(L, -1) : "internal error");
  lua_settop(L, top);
  answer(a, r->conn, 500, "application/json", NULL, INTERNAL_ERROR, sizeof INTERNAL_ERROR - 1, 0);
}

/* The peer hung up on a request still waiting for its delay. */
static void on_closed(moor_http *srv, unsigned long long conn, void *ud) {
  app *a = ud;
  if (srv != a->srv) return;
  for (pending *p = a->pend; p; p = p->next) {
    if (p->conn == conn) {
      pending_free(p);
      return;
    }
  }
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

/* Protected: the Lua state's contents. moor.json is preloaded, the prelude
 * run (it sets the global `fake`), then the script, which must return its
 * respond function. The script's folder is on package.path. */
static int l_setup(lua_State *L) {
  const char *script = lua_tostring(L, 1);
  const char *slash = strrchr(script, '/');
  prelude_reader pr = {0};
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_moor_json);
  lua_setfield(L, -2, "moor.json");
  lua_pop(L, 1);
  lua_getglobal(L, "package");
  if (slash) lua_pushlstring(L, script, (size_t)(slash - script));
  else lua_pushliteral(L, ".");
  lua_pushliteral(L, "/?.lua;");
  lua_getfield(L, -3, "path");
  lua_concat(L, 3);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  if (lua_load(L, read_prelude, &pr, "=prelude", "t")) return lua_error(L);
  lua_call(L, 0, 1);
  if (!lua_istable(L, -1)) return luaL_error(L, "the prelude returned no table");
  if (luaL_loadfilex(L, script, "t")) return lua_error(L);
  lua_call(L, 0, 1);
  if (!lua_isfunction(L, -1))
    return luaL_error(L, "%s must return a function respond(req), not a %s", script, luaL_typename(L, -1));
  return 2;
}

static int setup_lua(app *a, const char *script) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "fake_model: out of memory\n");
    return -1;
  }
  a->L = L;
  lua_pushcfunction(L, l_setup);
  lua_pushstring(L, script);
  if (lua_pcall(L, 1, 2, 0)) {
    fprintf(stderr, "fake_model: %s\n", lua_tostring(L, -1));
    return -1;
  }
  a->respond_ref = luaL_ref(L, LUA_REGISTRYINDEX);
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
    fprintf(stderr, "fake_model: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

static int start_server(app *a) {
  char err[256];
  if (moor_http_start(a->loop, &a->cfg, on_request, on_closed, a, &a->srv, err, sizeof err)) {
    fprintf(stderr, "fake_model: %s\n", err);
    return -1;
  }
  a->cfg.port = moor_http_port(a->srv); /* a restart after a drop takes the same port */
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
  (void)signum;
  shutdown_app(h->data, 0);
}

static int usage(void) {
  fprintf(stderr, "usage: fake_model --script FILE.lua [--listen 127.0.0.1:0] [--log FILE.jsonl]\n");
  return 2;
}

int main(int argc, char **argv) {
  static app a; /* zeroed; lives as long as the loop */
  uv_loop_t loop;
  const char *script = NULL, *log = NULL, *listen = "127.0.0.1:0";
  int rc = 1;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && !strcmp(argv[i], "--script")) script = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--listen")) listen = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--log")) log = argv[++i];
    else return usage();
  }
  if (!script) return usage();
  if (parse_listen(&a, listen)) {
    fprintf(stderr, "fake_model: --listen wants HOST:PORT, not '%s'\n", listen);
    return 2;
  }
  a.cfg.host = a.host;
  a.cfg.body_limit = BODY_LIMIT;
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error code, not a death */
  if (setup_lua(&a, script) || (log && open_log(&a, log))) goto out;
  if (uv_loop_init(&loop)) goto out;
  a.loop = &loop;
  uv_signal_init(&loop, &a.sigterm);
  uv_signal_init(&loop, &a.sigint);
  a.sigterm.data = a.sigint.data = &a;
  if (start_server(&a)) {
    uv_close((uv_handle_t *)&a.sigterm, NULL);
    uv_close((uv_handle_t *)&a.sigint, NULL);
    uv_run(&loop, UV_RUN_DEFAULT); /* frees what a failed start left closing */
    uv_loop_close(&loop);
    goto out;
  }
  uv_signal_start(&a.sigterm, on_signal, SIGTERM);
  uv_signal_start(&a.sigint, on_signal, SIGINT);
  printf(strchr(a.host, ':') ? "http://[%s]:%d\n" : "http://%s:%d\n", a.host, a.cfg.port);
  fflush(stdout);
  uv_run(&loop, UV_RUN_DEFAULT); /* until shutdown_app has closed every handle */
  rc = a.exit_code;
  if (uv_loop_close(&loop)) {
    fprintf(stderr, "fake_model: handles left open at exit\n");
    rc = 1;
  }
out:
  if (a.L) lua_close(a.L);
  if (a.log && fclose(a.log)) rc = 1;
  return rc;
}
