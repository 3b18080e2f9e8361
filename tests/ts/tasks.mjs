// MCP tasks against a real `hitl-mcp serve`, through the tasks extension's own client:
// @modelcontextprotocol/ext-tasks on @modelcontextprotocol/client 2.x, negotiating 2026-07-28 with the
// server/discover probe. Run by tests/e2e/test_ts_client.py as `node tasks.mjs <scenario> <stdio|http>`;
// prints one JSON line with what it saw, and exits non-zero on an unexpected error.
//
// Scenarios: `answer` (a call answered as a task, polled, answered by a person through the JSON API),
// `cancel` (the host cancels the task: the request is withdrawn), `restart` (the server stops in the
// middle; a new one, knowing nothing, completes the task), `form` (the host's form inside the task,
// answered with tasks/update), `immediate` (a legacy client: no task).
//
// Through `hitl-mcp proxy` (HITL_SERVE_ARGS: the proxy's arguments, as JSON, in place of `serve`'s; stdio):
// `gate` (a gated call of HITL_TOOL with HITL_TOOL_ARGS, answered HITL_DECISION once polled: the task's
// result is the upstream's), `gate-cancel` (cancelled while the approval is pending), `gate-restart`
// (the proxy restarts mid-task; the new one calls the upstream once approved).
//
// Environment: as client.mjs (HITL_PYTHON, HITL_CONFIG, HITL_STATE_DIR, HITL_WEB_TOKEN, HITL_API, HITL_ROOT).

import { spawn } from "node:child_process";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const clientInfo = { name: "ts-tasks", version: "1.0.0" };
const clientCapabilities = { extensions: { "io.modelcontextprotocol/tasks": {} } };
const ENDPOINT = "hitl-mcp-under-test"; // one endpoint identity across restarts: the task is resumable
const serveArgs = process.env.HITL_SERVE_ARGS
  ? JSON.parse(process.env.HITL_SERVE_ARGS)
  : ["-m", "hitl_mcp", "serve", "--config", env("HITL_CONFIG")];

/** `hitl-mcp serve --transport http`, started as a host's launcher would; resolves once it listens. */
function startHttpServer() {
  const child = spawn(env("HITL_PYTHON"), [...serveArgs, "--transport", "http"], {
    cwd: env("HITL_ROOT"),
    env: { ...process.env, PYTHONUNBUFFERED: "1" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  return new Promise((resolve, reject) => {
    let seen = "";
    child.stderr.on("data", (chunk) => {
      seen += chunk;
      process.stderr.write(chunk);
      const match = seen.match(/MCP \(streamable HTTP\) at (\S+)/);
      if (match) resolve({ child, url: match[1] });
    });
    child.on("exit", (code) => reject(new Error(`server exited ${code}: ${seen}`)));
  });
}

function stopped(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.on("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

/** A client and an ext-tasks session on it, over `kind` ("stdio" or "http"). */
async function connect(kind, negotiation = "auto", { capabilities = clientCapabilities, onInputRequest } = {}) {
  let server = null;
  let transport;
  if (kind === "http") {
    server = await startHttpServer();
    // MCP over HTTP needs a credential: the web token (the operator) here
    const headers = { Authorization: `Bearer ${env("HITL_WEB_TOKEN")}` };
    transport = new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers } });
  } else {
    transport = new StdioClientTransport({
      command: env("HITL_PYTHON"),
      args: serveArgs,
      env: { ...process.env, PYTHONUNBUFFERED: "1" },
      cwd: env("HITL_ROOT"),
      stderr: "inherit",
    });
  }
  const client = new Client(clientInfo, {
    capabilities,
    versionNegotiation: { mode: negotiation },
  });
  await client.connect(transport);
  // ext-tasks' V2 session needs a raw dispatcher on the same transport (its README's recipe): the
  // host owns request ids and catches the replies to its own requests
  const pending = new Map();
  let next = 0;
  const sdk = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (message?.id !== undefined && pending.has(message.id) && ("result" in message || "error" in message)) {
      pending.get(message.id)(message);
      pending.delete(message.id);
    } else {
      sdk?.call(transport, message, extra);
    }
  };
  const rawDispatch = async (request, options = {}) => {
    const id = `tasks-${++next}`;
    const reply = new Promise((resolve) => pending.set(id, resolve));
    await transport.send(
      { jsonrpc: "2.0", id, ...request },
      { requestSignal: options.signal, headers: options.context?.headers },
    );
    const message = await reply;
    return "error" in message ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
  };
  const session = createTaskSessionFromClient(client, {
    endpointId: ENDPOINT,
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: client.getNegotiatedProtocolVersion(),
      clientInfo,
      clientCapabilities: capabilities,
    },
    onInputRequest,
  });
  const close = async () => {
    await client.close();
    if (server) await stopped(server.child);
  };
  return { client, session, close, version: client.getNegotiatedProtocolVersion() };
}

async function api(path, init = {}) {
  const response = await fetch(env("HITL_API") + path, {
    ...init,
    headers: {
      Authorization: `Bearer ${env("HITL_WEB_TOKEN")}`,
      "Content-Type": "application/json",
      ...(init.headers ?? {}),
    },
  });
  const body = await response.json();
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status} ${JSON.stringify(body)}`);
  return body;
}

const reply = (id, body) => api(`/api/requests/${id}/reply`, { method: "POST", body: JSON.stringify(body) });

/** Records each event; calls `onPolled` once the client has seen the task working twice (it polls). */
function eventLog(events, onPolled) {
  return async (event) => {
    if (event.type === "task") {
      events.push({ status: event.task.status, statusMessage: event.task.statusMessage });
      if (events.filter((e) => e.status === "working").length >= 2) await onPolled?.(event.task);
    } else {
      events.push({ outcome: event.outcome.status });
    }
  };
}

// A call answered as a task; once the client has polled it, a person answers in the web inbox.
async function answer(kind) {
  const { session, close, version } = await connect(kind);
  const events = [];
  let answered = null;
  try {
    const execution = await session.callTool("ask_user", { question: "Ship it?", choices: ["yes", "no"] });
    const taskId = execution.handle?.taskId;
    const { outcome } = await execution.settle({
      onEvent: eventLog(events, (task) => {
        answered ??= reply(task.taskId, { choice: "yes" });
      }),
    });
    await answered;
    const result = resultFromTaskOutcome(outcome);
    return { version, kind: execution.kind, taskId, events, result: result.structuredContent };
  } finally {
    await session.close();
    await close();
  }
}

// The host cancels the task: the request is withdrawn, and the person can no longer answer it.
async function cancel(kind) {
  const { session, close, version } = await connect(kind);
  try {
    const execution = await session.callTool("request_approval", { action: "Drop the staging database" });
    const taskId = execution.handle?.taskId;
    await execution.cancel();
    const snapshot = await session.task(taskId).snapshot();
    const request = await api(`/api/requests/${taskId}`);
    return { version, kind: execution.kind, taskId, task: snapshot.status, request: request.status };
  } finally {
    await session.close();
    await close();
  }
}

// The server stops in the middle of a task; a new server (a new process, nothing in memory) answers
// tasks/get from the store, and the task completes once a person answers. The first session hands the
// task off (a host that keeps its tasks) rather than closing, which would cancel what it tracks.
async function restart(kind) {
  const first = await connect(kind);
  const execution = await first.session.callTool("ask_user", { question: "Still there after a restart?" });
  let reference = null;
  await execution.handoff((ref) => {
    reference = ref;
  });
  await first.close();

  const second = await connect(kind);
  const events = [];
  let answered = null;
  try {
    const resumed = await second.session.resumeTask(reference);
    const { outcome } = await resumed.settle({
      onEvent: eventLog(events, (task) => {
        answered ??= reply(task.taskId, { text: "yes" });
      }),
    });
    await answered;
    const result = resultFromTaskOutcome(outcome);
    return { version: second.version, kind: execution.kind, taskId: reference.taskId, events, result: result.structuredContent };
  } finally {
    await second.session.close();
    await second.close();
  }
}

// The host's own form inside a task: the client shows forms, so tasks/get asks for input
// (input_required); the handler answers, ext-tasks sends tasks/update, and the task completes.
async function form(kind) {
  const shown = [];
  const { session, close, version } = await connect(kind, "auto", {
    capabilities: { ...clientCapabilities, elicitation: { form: {} } },
    onInputRequest: async (request) => {
      shown.push({ kind: request.kind, message: request.params.message, schema: request.params.requestedSchema });
      return { action: "accept", content: { choice: "blue" } };
    },
  });
  const events = [];
  try {
    const execution = await session.callTool("ask_user", { question: "Which colour?", choices: ["red", "blue"] });
    const { outcome } = await execution.settle({ onEvent: eventLog(events) });
    return { version, kind: execution.kind, shown, events, result: resultFromTaskOutcome(outcome).structuredContent };
  } finally {
    await session.close();
    await close();
  }
}

// A client on the legacy handshake declares no tasks: the call is answered as before.
async function immediate(kind) {
  const { session, close, version } = await connect(kind, "legacy");
  try {
    const execution = await session.callTool("ask_user", { question: "Plain?", wait_seconds: 0 });
    const { outcome } = await execution.settle();
    return { version, kind: execution.kind, result: resultFromTaskOutcome(outcome).structuredContent };
  } finally {
    await session.close();
    await close();
  }
}

// --- through the proxy ------------------------------------------------------------------------

const gateCall = () => [env("HITL_TOOL"), JSON.parse(env("HITL_TOOL_ARGS"))];

// A gated call answered as a task; once the client has polled it, the person decides in the inbox.
async function gate(kind) {
  const { session, close, version } = await connect(kind);
  const events = [];
  let answered = null;
  try {
    const execution = await session.callTool(...gateCall());
    const taskId = execution.handle?.taskId;
    const { outcome } = await execution.settle({
      onEvent: eventLog(events, (task) => {
        answered ??= reply(task.taskId, { decision: env("HITL_DECISION") });
      }),
    });
    await answered;
    return { version, kind: execution.kind, taskId, events, result: resultFromTaskOutcome(outcome) };
  } finally {
    await session.close();
    await close();
  }
}

// The host cancels the task while the approval is pending: withdrawn, and the upstream never called.
async function gateCancel(kind) {
  const { session, close, version } = await connect(kind);
  try {
    const execution = await session.callTool(...gateCall());
    const taskId = execution.handle?.taskId;
    await execution.cancel();
    const snapshot = await session.task(taskId).snapshot();
    const request = await api(`/api/requests/${taskId}`);
    return { version, kind: execution.kind, taskId, task: snapshot.status, request: request.status };
  } finally {
    await session.close();
    await close();
  }
}

// The proxy stops mid-task (the host hands the task off); a new proxy process polls it, and once the
// person approves, calls the upstream and completes the task with its result.
async function gateRestart(kind) {
  const first = await connect(kind);
  const execution = await first.session.callTool(...gateCall());
  let reference = null;
  await execution.handoff((ref) => {
    reference = ref;
  });
  await first.close();

  const second = await connect(kind);
  const events = [];
  let answered = null;
  try {
    const resumed = await second.session.resumeTask(reference);
    const { outcome } = await resumed.settle({
      onEvent: eventLog(events, (task) => {
        answered ??= reply(task.taskId, { decision: "approve" });
      }),
    });
    await answered;
    const result = resultFromTaskOutcome(outcome);
    return { version: second.version, kind: execution.kind, taskId: reference.taskId, events, result };
  } finally {
    await second.session.close();
    await second.close();
  }
}

const scenarios = {
  answer,
  cancel,
  restart,
  form,
  immediate,
  gate,
  "gate-cancel": gateCancel,
  "gate-restart": gateRestart,
};
const [name, kind = "stdio"] = process.argv.slice(2);
if (!scenarios[name]) throw new Error(`unknown scenario ${name}`);
const seen = await scenarios[name](kind);
console.log(JSON.stringify(seen));
