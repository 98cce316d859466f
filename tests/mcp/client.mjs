// Drives a moor MCP server with the official MCP TypeScript SDK client
// (tests/e2e/test_mcp_sdk.sh installs @modelcontextprotocol/sdk):
//   node client.mjs NODE_MODULES WITNESS stdio MOOR ARGS...
//   node client.mjs NODE_MODULES WITNESS http URL [TOKEN]
// Each check prints "ok: ..." or "FAIL: ..."; the exit status is 1 on any failure.
import { pathToFileURL } from "node:url";
import path from "node:path";
import { readFileSync, existsSync } from "node:fs";

const [modules, witness, kind, ...rest] = process.argv.slice(2);
const sdk = (file) => import(pathToFileURL(path.join(modules, "@modelcontextprotocol/sdk/dist/esm", file)).href);
const { Client } = await sdk("client/index.js");
const { ElicitRequestSchema, McpError, LATEST_PROTOCOL_VERSION } = await sdk("types.js");

let failures = 0;
const ok = (cond, what, detail) => {
  if (cond) console.log("ok: " + what);
  else { failures++; console.log("FAIL: " + what + (detail !== undefined ? ": " + JSON.stringify(detail) : "")); }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let transport;
if (kind === "stdio") {
  const { StdioClientTransport } = await sdk("client/stdio.js");
  transport = new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "inherit" });
} else {
  const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
  const headers = rest[1] ? { authorization: `Bearer ${rest[1]}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(rest[0]), { requestInit: { headers } });
}

// What the elicitation handler answers next (a queue), and what it was asked.
const answers = [];
const asked = [];
const client = new Client({ name: "moor-test", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked.push(req.params);
  return answers.shift() ?? { action: "cancel" };
});

await client.connect(transport);
ok(client.getServerVersion()?.name === "moor", "initialize: the server is moor", client.getServerVersion());
if (kind === "http") ok(transport.sessionId, "streamable HTTP: the server gave an Mcp-Session-Id", transport.sessionId);
ok(LATEST_PROTOCOL_VERSION === "2025-11-25", "the SDK offers 2025-11-25", LATEST_PROTOCOL_VERSION);

// tools/list: schemas as declared, annotations, no internals
const { tools } = await client.listTools();
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
ok(!tools.some((t) => t.name.startsWith("moor__")), "tools/list: no moor__ internals", tools.map((t) => t.name));
const echo = byName.echo;
ok(echo && echo.description === "Echo a message back, shouted.", "tools/list: echo's description", echo);
const canon = (v) => Array.isArray(v) ? v.map(canon) : v && typeof v === "object"
  ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])])) : v;
const same = (a, b) => JSON.stringify(canon(a)) === JSON.stringify(canon(b));
ok(echo && same(echo.inputSchema, { properties: { message: { minLength: 1, type: "string" },
  times: { minimum: 1, type: "integer" } }, required: ["message"], type: "object" }), "tools/list: echo's inputSchema as declared", echo?.inputSchema);
ok(echo && echo.outputSchema?.properties?.shout?.type === "string", "tools/list: echo's outputSchema", echo?.outputSchema);
ok(echo && echo.annotations?.readOnlyHint === true && echo.annotations?.idempotentHint === true
  && echo.annotations?.openWorldHint === false && echo.annotations?.destructiveHint === undefined,
  "tools/list: echo's annotations as declared", echo?.annotations);
ok(byName.counted && !byName.counted.outputSchema && byName.counted.annotations?.destructiveHint === false,
  "tools/list: counted (no outputSchema, destructiveHint false)", byName.counted);

// a plain tool (it prints to stdout: the stream must survive it)
let r = await client.callTool({ name: "echo", arguments: { message: "hi" } });
ok(!r.isError && r.structuredContent?.shout === "HI" && JSON.parse(r.content[0].text).shout === "HI",
  "tools/call echo: the result as text and structuredContent", r);
r = await client.callTool({ name: "echo", arguments: { message: "again", times: 2 } });
ok(r.structuredContent?.times === 2, "tools/call echo again: the stream survived the tool's stray stdout", r);

// invalid arguments: an isError result naming the field
r = await client.callTool({ name: "echo", arguments: { message: 5 } });
ok(r.isError && /message/.test(r.content[0].text) && /string/.test(r.content[0].text),
  "tools/call with invalid arguments: isError with the field path", r);

// a failing tool
r = await client.callTool({ name: "broken", arguments: {} });
ok(r.isError && /it broke on purpose/.test(r.content[0].text), "tools/call of a failing tool: isError with the message", r);

// an unknown tool: a protocol error
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
  ok(false, "an unknown tool is refused");
} catch (e) {
  ok(e instanceof McpError && e.code === -32602 && /no_such_tool/.test(e.message), "an unknown tool: error -32602", e.message);
}

// toModelOutput with an image part
r = await client.callTool({ name: "photo", arguments: {} });
ok(r.content?.[0]?.type === "text" && r.content?.[1]?.type === "image" && r.content[1].mimeType === "image/png"
  && r.content[1].data === "iVBORw0KGgo=", "toModelOutput's parts as MCP content (an image)", r);

// progress
const progress = [];
r = await client.callTool({ name: "counted", arguments: {} }, undefined, { onprogress: (p) => progress.push(p) });
ok(JSON.parse(r.content[0].text).total === 60, "tools/call counted: its result", r);
ok(progress.length === 3 && progress.every((p, i) => p.progress === i + 1)
  && JSON.parse(progress[2].message).done === 3, "notifications/progress: one per snapshot, increasing", progress);

// elicitation: accept (an option, then free text), decline, cancel
answers.push({ action: "accept", content: { choice: "blue" } });
r = await client.callTool({ name: "pick", arguments: {} });
ok(JSON.parse(r.content[0].text).optionId === "blue", "ctx.ask as elicitation: accept with an option", r);
const form = asked[0];
ok(form && form.message === "Which colour?" && JSON.stringify(form.requestedSchema.properties.choice.enum) === '["red","blue"]'
  && form.requestedSchema.properties.text?.type === "string", "elicitation/create: options as an enum, free text as a string", form);
answers.push({ action: "accept", content: { text: "green, please" } });
r = await client.callTool({ name: "pick", arguments: {} });
ok(JSON.parse(r.content[0].text).text === "green, please", "ctx.ask as elicitation: accept with text", r);
answers.push({ action: "decline" });
r = await client.callTool({ name: "pick", arguments: {} });
ok(JSON.parse(r.content[0].text).status === "cancelled", "ctx.ask as elicitation: decline resolves it cancelled", r);
answers.push({ action: "cancel" });
r = await client.callTool({ name: "pick", arguments: {} });
ok(JSON.parse(r.content[0].text).status === "cancelled", "ctx.ask as elicitation: cancel resolves it cancelled", r);

// cancellation: the run's cleanup step runs once
const ac = new AbortController();
const pending = client.callTool({ name: "wait_cleanup", arguments: { witness } }, undefined, { signal: ac.signal });
await sleep(1000);
ac.abort("the test cancels it");
try { await pending; ok(false, "a cancelled call rejects"); } catch { ok(true, "a cancelled call rejects"); }
let lines = [];
for (let i = 0; i < 100; i++) {
  lines = existsSync(witness) ? readFileSync(witness, "utf8").split("\n").filter(Boolean) : [];
  if (lines.length) break;
  await sleep(100);
}
await sleep(500);
lines = existsSync(witness) ? readFileSync(witness, "utf8").split("\n").filter(Boolean) : [];
ok(lines.length === 1 && lines[0] === "cleanup", "notifications/cancelled: the cleanup step ran once", lines);

// tasks: a task tool offered with taskSupport, run through the tasks API
ok(byName.report?.execution?.taskSupport === "optional" && !byName.echo.execution,
  "tools/list: a task tool has execution.taskSupport optional", byName.report);
answers.push({ action: "accept", content: { choice: "html" } });
const seen = [];
let final;
for await (const m of client.experimental.tasks.callToolStream({ name: "report", arguments: { n: 21 } })) {
  seen.push(m.type === "taskStatus" || m.type === "taskCreated" ? m.task.status : m.type);
  if (m.type === "result") final = m.result;
  if (m.type === "error") final = { error: String(m.error) };
}
ok(seen[0] === "working" && seen.includes("input_required") && final?.structuredContent?.format === "html"
  && final.structuredContent.value === 42, "a task tool through the tasks API (working, input_required, completed)",
  { seen, final });
// the same tool called without a task: run to completion as an ordinary call
answers.push({ action: "accept", content: { choice: "pdf" } });
r = await client.callTool({ name: "report", arguments: { n: 1 } });
ok(r.structuredContent?.format === "pdf" && !r.task, "a task tool called without a task: an ordinary call", r);
// tasks/get, tasks/list, tasks/cancel
const { CreateTaskResultSchema } = await sdk("types.js");
const created = await client.request({ method: "tools/call", params: { name: "report", arguments: { n: 2, hold: true },
  task: { ttl: 60000 } } }, CreateTaskResultSchema);
const tid = created.task.taskId;
ok(created.task.status === "working", "task-augmented tools/call answers with the task", created);
const got = await client.experimental.tasks.getTask(tid);
ok(got.taskId === tid && got.status === "working", "tasks/get", got);
const listed = await client.experimental.tasks.listTasks();
ok(listed.tasks.some((t) => t.taskId === tid), "tasks/list has it", listed);
const cancelled = await client.experimental.tasks.cancelTask(tid);
ok(cancelled.status === "cancelled", "tasks/cancel", cancelled);
let after;
for (let i = 0; i < 50; i++) {
  after = await client.experimental.tasks.getTask(tid);
  if (after.status === "cancelled") break;
  await sleep(100);
}
ok(after.status === "cancelled", "the cancelled task stays cancelled", after);
try {
  await client.experimental.tasks.getTask("run_nope");
  ok(false, "tasks/get of an unknown task is refused");
} catch (e) {
  ok(e.code === -32602, "tasks/get of an unknown task: -32602", e.message);
}

// a serve tool: offered as a task tool; its first reply is the result, as a task and as a plain call
ok(byName.desk?.execution?.taskSupport === "optional" && !byName.desk.inputSchema.properties.taskId,
  "tools/list: a serve tool, as a task tool with its own inputSchema", byName.desk);
final = undefined;
for await (const m of client.experimental.tasks.callToolStream({ name: "desk", arguments: { q: "why?" } })) {
  if (m.type === "result") final = m.result;
}
ok(final && JSON.parse(final.content[0].text).answer === "you asked: why?", "a serve tool through the tasks API", final);
r = await client.callTool({ name: "desk", arguments: { q: "how?" } });
ok(JSON.parse(r.content[0].text).answer === "you asked: how?", "a serve tool as an ordinary call", r);

// still serving after all that
r = await client.callTool({ name: "echo", arguments: { message: "last" } });
ok(r.structuredContent?.shout === "LAST", "still serving at the end", r);

await client.close();
console.log(failures ? `${failures} FAILED` : "all MCP checks passed");
process.exit(failures ? 1 : 0);
