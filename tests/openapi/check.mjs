// The OpenAPI document against a real `moor dev` (tests/e2e/test_openapi.sh):
// GET /v1/openapi.json must be a valid OpenAPI 3.1 document (by
// @seriousme/openapi-schema-validator), every operation in it is probed at
// least once, and each answer's status must be the one expected and one the
// document lists for that operation, its JSON body must match the schema the
// document gives for that status (error codes included), and the SSE data
// lines must match StreamEvent.
// Every route of lua/moor/http.lua's table must be in the document too.
//   node check.mjs BASE_URL API_TOKEN NODE_MODULES HTTP_LUA
import { pathToFileURL } from "node:url";
import path from "node:path";
import { request } from "node:http";
import { readFileSync } from "node:fs";

const [base, token, modules, httpLua] = process.argv.slice(2);
const load = async (name, file) => import(pathToFileURL(path.join(modules, name, file)).href);
const { Validator } = await load("@seriousme/openapi-schema-validator", "index.js");
const Ajv2020 = (await load("ajv", "dist/2020.js")).default;
const addFormats = (await load("ajv-formats", "dist/index.js")).default;

const problems = [];
const problem = (msg) => { problems.push(msg); console.error("FAIL: " + msg); };

// One request with node:http (fetch would not send a Host of our choosing);
// an open stream is read for a moment, then hung up on.
function http(method, url, { body, headers = {}, auth = true, stream = false } = {}) {
  const h = { ...headers };
  if (auth && token) h.authorization = `Bearer ${token}`;
  if (method === "POST" && !("content-type" in h)) h["content-type"] = "application/json";
  if (body !== undefined) h["content-length"] = Buffer.byteLength(body);
  return new Promise((resolve, reject) => {
    const req = request(base + url, { method, headers: h, timeout: 10000 }, (res) => {
      const chunks = [];
      let timer = null;
      const done = () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode, type: res.headers["content-type"] || "", text: Buffer.concat(chunks).toString() });
      };
      if (stream) timer = setTimeout(() => { req.destroy(); done(); }, 1500);
      res.on("data", (c) => chunks.push(c));
      res.on("end", done);
      res.on("error", () => {});
    });
    req.on("timeout", () => req.destroy(new Error(`${method} ${url}: no answer in 10 s`)));
    req.on("error", (e) => { if (!stream) reject(e); });
    if (body !== undefined) req.write(body);
    req.end();
  });
}

// 1. The document validates.
const doc = JSON.parse((await http("GET", "/v1/openapi.json")).text);
const validator = new Validator();
const res = await validator.validate(structuredClone(doc));
if (!res.valid) {
  console.error(JSON.stringify(res.errors, null, 2));
  throw new Error("GET /v1/openapi.json is not a valid OpenAPI document");
}
if (!String(validator.version).startsWith("3.1")) throw new Error(`OpenAPI version ${validator.version}, not 3.1`);
console.log(`ok: the document is valid OpenAPI ${validator.version}`);
const api = validator.resolveRefs();

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

// The operation a concrete path and method are, or null.
function operation(method, url) {
  const p = url.split("?")[0];
  for (const [tmpl, item] of Object.entries(api.paths)) {
    const re = new RegExp("^" + tmpl.replace(/[.]/g, "\\.").replace(/\{[^}]+\}/g, "[^/]+") + "$");
    if (re.test(p) && item[method.toLowerCase()]) return { tmpl, op: item[method.toLowerCase()] };
  }
  return null;
}

const covered = new Set();
let probes = 0;

// One probe: the answer must have status `want` (and error code `code`),
// documented for the operation, with a body its schema allows.
async function probe(what, method, url, want, opts = {}) {
  probes++;
  const found = operation(method, url);
  if (!found) return problem(`${what}: ${method} ${url} is not in the document`);
  covered.add(`${method.toLowerCase()} ${found.tmpl}`);
  const r = await http(method, url, opts);
  if (r.status !== want) return problem(`${what}: ${method} ${url} answered ${r.status}, not ${want}: ${r.text}`);
  const doc_r = found.op.responses[String(r.status)] || found.op.responses.default;
  if (!doc_r) return problem(`${what}: ${method} ${url}: status ${r.status} is not documented for ${found.tmpl}`);
  const media = r.type.split(";")[0].trim();
  const content = doc_r.content && (doc_r.content[media] || doc_r.content["*/*"]);
  if (doc_r.content && !content) return problem(`${what}: content type ${media} is not documented: ${Object.keys(doc_r.content)}`);
  if (media === "application/json" && content && content.schema) {
    let value;
    try { value = JSON.parse(r.text); } catch { return problem(`${what}: the body is not JSON: ${r.text}`); }
    if (!ajv.validate(content.schema, value)) {
      return problem(`${what}: the body does not match the documented schema: ${ajv.errorsText()}: ${r.text}`);
    }
    if (opts.code && value?.error?.code !== opts.code) return problem(`${what}: error code ${value?.error?.code}, not ${opts.code}`);
  }
  if (media === "text/event-stream") {
    const schema = api.components.schemas.StreamEvent;
    const datas = r.text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6));
    if (!opts.textFormat) {
      if (opts.minEvents && datas.length < opts.minEvents) return problem(`${what}: ${datas.length} events: ${r.text}`);
      for (const d of datas) {
        if (!ajv.validate(schema, JSON.parse(d))) return problem(`${what}: an event does not match StreamEvent: ${ajv.errorsText()}: ${d}`);
      }
    }
  }
  console.log(`ok: ${what}: ${method} ${url} -> ${r.status}${opts.code ? " " + opts.code : ""}`);
  return r;
}

const json = (r) => JSON.parse(r.text);
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
async function until(what, fn) {
  for (let i = 0; i < 100; i++) { const v = await fn(); if (v) return v; await sleep(100); }
  throw new Error("timed out waiting for " + what);
}
async function runStatus(id) { return json(await http("GET", `/v1/runs/${id}`)).status; }

// 2. Every route, as documented.
await probe("the document", "GET", "/v1/openapi.json", 200);

// Tools and runs.
const wc = json(await probe("a call", "POST", "/v1/tools/word_count/calls", 201, { body: '{"text":"a b c"}' }));
await probe("an unknown tool", "POST", "/v1/tools/no_such_tool/calls", 404, { body: "{}", code: "not_found" });
await probe("a built-in tool", "POST", "/v1/tools/moor__session/calls", 404, { body: "{}", code: "not_found" });
await probe("bad JSON", "POST", "/v1/tools/word_count/calls", 400, { body: "{", code: "bad_json" });
await probe("invalid input", "POST", "/v1/tools/word_count/calls", 400, { body: '{"text":5}', code: "invalid_input" });
await probe("a POST not declared JSON", "POST", "/v1/tools/word_count/calls", 415,
  { body: "{}", headers: { "content-type": "text/plain" }, code: "unsupported_media_type" });
await probe("no API token", "POST", "/v1/tools/word_count/calls", 401, { body: "{}", auth: false, code: "unauthorized" });
await probe("a foreign Origin", "GET", "/v1/runs", 403, { headers: { origin: "https://evil.example" }, code: "forbidden_origin" });
await probe("a foreign Host", "GET", "/v1/runs", 421, { headers: { host: "evil.example" }, code: "misdirected_request" });
await until("word_count to complete", async () => (await runStatus(wc.runId)) === "completed");
await probe("the runs", "GET", "/v1/runs", 200);
await probe("a run", "GET", `/v1/runs/${wc.runId}`, 200);
await probe("an unknown run", "GET", "/v1/runs/run_nope", 404, { code: "not_found" });
await probe("a settled run's events", "GET", `/v1/runs/${wc.runId}/events`, 200, { minEvents: 2 });
await probe("events after seq 1", "GET", `/v1/runs/${wc.runId}/events?after=1`, 200, { minEvents: 1 });
await probe("a bad Last-Event-ID", "GET", `/v1/runs/${wc.runId}/events`, 400,
  { headers: { "last-event-id": "x" }, code: "bad_request" });
await probe("an unknown run's events", "GET", "/v1/runs/run_nope/events", 404, { code: "not_found" });
await probe("cancel a settled run", "POST", `/v1/runs/${wc.runId}/cancel`, 409, { body: "{}", code: "already_settled" });
await probe("cancel an unknown run", "POST", "/v1/runs/run_nope/cancel", 404, { body: "{}", code: "not_found" });

// Questions.
const refund = json(await probe("a call that asks", "POST", "/v1/tools/refund_order/calls", 201,
  { body: '{"orderId":"OA-1","amount":3}' }));
const input = await until("a pending question", async () =>
  json(await http("GET", "/v1/inputs")).inputs.find((i) => i.runId === refund.runId));
await probe("the pending questions", "GET", "/v1/inputs", 200);
await probe("a live run's events", "GET", `/v1/runs/${refund.runId}/events`, 200, { stream: true, minEvents: 1 });
const rq = `/v1/inputs/${input.requestId}`;
await probe("an option never offered", "POST", rq, 400, { body: '{"optionId":"nope"}', code: "invalid_option" });
await probe("an answer that is not JSON", "POST", rq, 400, { body: "{", code: "bad_json" });
await probe("an unknown request", "POST", "/v1/inputs/req_nope", 404, { body: '{"optionId":"x"}', code: "not_found" });
await probe("an answer", "POST", rq, 200, { body: JSON.stringify({ optionId: input.request.options[0].id }) });
await probe("an answer again", "POST", rq, 409, { body: JSON.stringify({ optionId: input.request.options[0].id }),
  code: "already_resolved" });
const asker = json(await http("POST", "/v1/tools/refund_order/calls", { body: '{"orderId":"OA-2","amount":4}' }));
await until("a second question", async () =>
  json(await http("GET", "/v1/inputs")).inputs.find((i) => i.runId === asker.runId));
await probe("cancel a running run", "POST", `/v1/runs/${asker.runId}/cancel`, 202, { body: "{}" });

// Hooks and webhooks.
const hk = json(await http("POST", "/v1/tools/hook_wait/calls", { body: '{"token":"openapi-hook-1"}' }));
await until("the hook", async () => (await http("GET", `/v1/runs/${hk.runId}/events`, { stream: true })).text.includes("hook.waiting"));
await probe("a hook delivery", "POST", "/v1/hooks/openapi-hook-1", 202, { body: '{"n":1}' });
await probe("a hook delivery that is not JSON", "POST", "/v1/hooks/openapi-hook-1", 400, { body: "{", code: "bad_json" });
await probe("an unknown hook", "POST", "/v1/hooks/no-such-token", 404, { body: "{}", code: "not_found" });
const wq = json(await http("POST", "/v1/tools/webhook_queue/calls", { body: "{}" }));
const ev = await until("the webhook", async () => {
  const t = (await http("GET", `/v1/runs/${wq.runId}/events`, { stream: true })).text;
  return t.match(/"url":"[^"]*(\/\.well-known\/workflow\/v1\/webhook\/[A-Za-z0-9_-]+)"/);
});
const wpath = ev[1];
for (const m of ["GET", "PUT", "PATCH", "DELETE"]) await probe(`a webhook ${m}`, m, wpath, 202, { auth: false });
await probe("a webhook POST of any type", "POST", wpath, 202, { auth: false, body: "a=1",
  headers: { "content-type": "application/x-www-form-urlencoded", origin: "https://elsewhere.example" } });
const wr = json(await http("POST", "/v1/tools/webhook_respond/calls", { body: '{"headers":{"X-A":"1"},"status":299}' }));
const ev2 = await until("the respondWith webhook", async () => {
  const t = (await http("GET", `/v1/runs/${wr.runId}/events`, { stream: true })).text;
  return t.match(/"url":"[^"]*(\/\.well-known\/workflow\/v1\/webhook\/[A-Za-z0-9_-]+)"/);
});
await probe("a webhook's respondWith", "POST", ev2[1], 299, { auth: false, body: "{}" });
await probe("an unknown webhook", "POST", "/.well-known/workflow/v1/webhook/nope", 404, { auth: false, body: "{}", code: "not_found" });

// Sign-in callbacks.
await probe("a callback for no sign-in", "GET", "/v1/auth/callback?state=nope&code=x", 404, { auth: false });

// Sessions.
await probe("a bad session start", "POST", "/v1/sessions", 400, { body: '{"message":5}', code: "bad_request" });
await probe("a session start that is not JSON", "POST", "/v1/sessions", 400, { body: "{", code: "bad_json" });
const sid = json(await probe("a session", "POST", "/v1/sessions", 201, { body: "{}" })).sessionId;
await probe("the session", "GET", `/v1/sessions/${sid}`, 200);
await probe("an unknown session", "GET", "/v1/sessions/nope", 404, { code: "not_found" });
await probe("its tasks", "GET", `/v1/sessions/${sid}/tasks`, 200);
await probe("an unknown session's tasks", "GET", "/v1/sessions/nope/tasks", 404, { code: "not_found" });
await probe("its stream", "GET", `/v1/sessions/${sid}/stream`, 200, { stream: true, minEvents: 1 });
await probe("its stream as text", "GET", `/v1/sessions/${sid}/stream?format=text`, 200, { stream: true, textFormat: true });
await probe("an unknown session's stream", "GET", "/v1/sessions/nope/stream", 404, { code: "not_found" });
await probe("neither message nor answers", "POST", `/v1/sessions/${sid}`, 400, { body: "{}", code: "bad_request" });
await probe("a message that is not JSON", "POST", `/v1/sessions/${sid}`, 400, { body: "{", code: "bad_json" });
await probe("a message to no session", "POST", "/v1/sessions/nope", 404, { body: '{"message":"hi"}', code: "not_found" });
await probe("a message", "POST", `/v1/sessions/${sid}`, 202, { body: '{"message":"hi"}' });
await probe("cancel the session", "POST", `/v1/sessions/${sid}/cancel`, 202, { body: "{}" });
await probe("cancel no session", "POST", "/v1/sessions/nope/cancel", 404, { body: "{}", code: "not_found" });

// 3. Every operation of the document was probed.
for (const [tmpl, item] of Object.entries(api.paths)) {
  for (const m of ["get", "put", "post", "delete", "patch", "head", "options"]) {
    if (item[m] && !covered.has(`${m} ${tmpl}`)) problem(`${m.toUpperCase()} ${tmpl} is documented but no probe tried it`);
  }
}
// 4. Every route http.lua serves is documented: its table's { "METHOD", "^pattern$" }
// lines, and the two it answers before the table (the callback, webhooks).
const norm = (p) => p.replace(/\{[^}]+\}/g, "{}");
const documented = new Set();
for (const [tmpl, item] of Object.entries(api.paths)) for (const m of Object.keys(item)) documented.add(`${m} ${norm(tmpl)}`);
const src = readFileSync(httpLua, "utf8");
let routes = 0;
for (const [, method, pattern] of src.matchAll(/\{ "(GET|POST|PUT|PATCH|DELETE)", "\^([^"]+)\$"/g)) {
  routes++;
  const tmpl = pattern.replace(/\(\[\^\/\]\+\)/g, "{}").replace(/%\./g, ".");
  if (!documented.has(`${method.toLowerCase()} ${tmpl}`)) problem(`http.lua serves ${method} ${tmpl}, which the document lacks`);
}
if (routes < 10) problem(`found only ${routes} routes in ${httpLua}`);
if (!src.includes('path == "/v1/auth/callback"') || !documented.has("get /v1/auth/callback")) problem("the sign-in callback");
if (!src.includes("/%.well%-known/workflow/v1/webhook/") || !documented.has("post /.well-known/workflow/v1/webhook/{}")) {
  problem("webhooks");
}
console.log(`ok: the ${routes} routes of http.lua's table are all documented`);

if (problems.length) {
  console.error(`${problems.length} problem(s)`);
  process.exit(1);
}
console.log(`ok: ${probes} probes, every documented operation answered as documented`);
