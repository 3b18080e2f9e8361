// The TypeScript SDK's Client (what Claude Code, Cursor and VS Code build on) against a real
// `hitl-mcp serve` over stdio. Run by tests/e2e/test_ts_client.py as `node client.mjs <scenario>`;
// prints one JSON line with what it saw, and exits non-zero on an unexpected error.
//
// Environment: HITL_PYTHON (interpreter), HITL_CONFIG (config file), HITL_STATE_DIR, HITL_WEB_TOKEN,
// HITL_API (base URL of the server's side HTTP port, for answering through the JSON API), HITL_ROOT
// (repository root, the server's working directory).

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CreateTaskResultSchema,
  ElicitationCompleteNotificationSchema,
  ElicitRequestSchema,
  TaskStatusNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const TIMEOUT_MS = 4000; // the client's request timeout in the timing scenarios

async function connect(name, capabilities = {}) {
  const transport = new StdioClientTransport({
    command: env("HITL_PYTHON"),
    args: ["-m", "hitl_mcp", "serve", "--config", env("HITL_CONFIG")],
    env: { ...process.env, PYTHONUNBUFFERED: "1" },
    cwd: env("HITL_ROOT"),
    stderr: "inherit",
  });
  const client = new Client({ name, version: "1.0.0" }, { capabilities });
  await client.connect(transport);
  const { tools } = await client.listTools(); // also arms the SDK's outputSchema validation
  return { client, tools: tools.map((t) => t.name) };
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

/** Answer the one pending request through the JSON API, as a person in the web inbox would. */
async function answerPending(reply) {
  const { requests } = await api("/api/requests?status=pending");
  if (requests.length !== 1) throw new Error(`expected one pending request, got ${requests.length}`);
  await api(`/api/requests/${requests[0].id}/reply`, { method: "POST", body: JSON.stringify(reply) });
  return requests[0].id;
}

// Heartbeats keep the call alive: a 4 s timeout that progress resets, and a call that waits three
// times that long. The answer is given once the server's heartbeat says 3 × 4 s have passed.
async function heartbeat() {
  const { client } = await connect("ts-heartbeat");
  const progress = [];
  let answering = null;
  const started = Date.now();
  try {
    const result = await client.callTool(
      { name: "ask_user", arguments: { question: "Ship it?", choices: ["yes", "no"] } },
      undefined,
      {
        timeout: TIMEOUT_MS,
        resetTimeoutOnProgress: true,
        onprogress: (p) => {
          progress.push({ progress: p.progress, message: p.message });
          if (answering === null && p.progress >= (3 * TIMEOUT_MS) / 1000) {
            answering = answerPending({ choice: "yes" });
          }
        },
      },
    );
    await answering;
    return { elapsed_ms: Date.now() - started, progress, result: result.structuredContent };
  } finally {
    await client.close();
  }
}

// Budget without progress: no onprogress, so no progress token and nothing resets the timeout.
// The server must return "pending" within its budget (lowered to 2 s for this client by the
// test's config), before the client's 4 s timeout.
async function budget() {
  const { client } = await connect("ts-budget");
  const started = Date.now();
  try {
    const result = await client.callTool(
      { name: "ask_user", arguments: { question: "Still there?" } },
      undefined,
      { timeout: TIMEOUT_MS },
    );
    return { elapsed_ms: Date.now() - started, result: result.structuredContent };
  } finally {
    await client.close();
  }
}

// Elicitation: the client declares forms and its handler answers a question and denies an approval.
async function elicitation() {
  const { client } = await connect("ts-elicit", { elicitation: { form: {} } });
  const shown = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    const { message, requestedSchema } = request.params;
    shown.push({ message, requestedSchema });
    if ("decision" in requestedSchema.properties) {
      return { action: "accept", content: { decision: "deny", comment: "not today" } };
    }
    return { action: "accept", content: { choice: requestedSchema.properties.choice.enum[1] } };
  });
  try {
    const question = await client.callTool({
      name: "ask_user",
      arguments: { question: "Which colour?", choices: ["red", "blue"], wait_seconds: 30 },
    });
    const approval = await client.callTool({
      name: "request_approval",
      arguments: { action: "Drop the staging database", risk: "high", wait_seconds: 30 },
    });
    return { shown, question: question.structuredContent, approval: approval.structuredContent };
  } finally {
    await client.close();
  }
}

/** The person opens the link in their browser: signed in to the inbox (its login link), they land
 * on the request's page and answer there. The link alone is refused (it is not a credential). */
async function answerThroughLink(url, answer) {
  const bare = await fetch(url, { redirect: "manual" });
  if (bare.status !== 401) throw new Error(`link without a session: HTTP ${bare.status}, not 401`);
  const login = await fetch(`${env("HITL_API")}/login?token=${env("HITL_WEB_TOKEN")}`, {
    redirect: "manual",
  });
  const cookie = login.headers.get("set-cookie").split(";")[0];
  const opened = await fetch(url, { redirect: "manual", headers: { Cookie: cookie } });
  if (opened.status !== 303) throw new Error(`link: HTTP ${opened.status}`);
  const page = new URL(opened.headers.get("location"), url);
  const html = await (await fetch(page, { headers: { Cookie: cookie } })).text();
  const csrf = html.match(/<meta name="csrf-token" content="([^"]+)">/)[1];
  const sent = await fetch(`${page}/answer`, {
    method: "POST",
    redirect: "manual",
    headers: { Cookie: cookie, "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ ...answer, csrf }),
  });
  if (sent.status !== 303) throw new Error(`answer: HTTP ${sent.status}`);
  return html;
}

// URL-mode elicitation: a client that opens links but shows no forms. The server offers the
// request's inbox page; the person opens it, signs in, approves there; the server says it is complete.
async function link() {
  const { client } = await connect("ts-link", { elicitation: { url: {} } });
  const shown = [];
  const completed = [];
  let answering = null;
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    shown.push(request.params);
    answering = answerThroughLink(request.params.url, { decision: "approve", comment: "go" });
    return { action: "accept" }; // the person agreed to open the link
  });
  client.setNotificationHandler(ElicitationCompleteNotificationSchema, (notification) => {
    completed.push(notification.params.elicitationId);
  });
  try {
    const approval = await client.callTool({
      name: "request_approval",
      arguments: { action: "Rotate the signing keys", wait_seconds: 30 },
    });
    const page = await answering;
    return {
      shown,
      completed,
      approval: approval.structuredContent,
      page_names_action: page.includes("Rotate the signing keys"),
    };
  } finally {
    await client.close();
  }
}

// 2025-11-25 tasks (the design VS Code implements), through this SDK's experimental tasks client: the
// tools are marked task-capable, so callToolStream sends `task`, polls tasks/get, then tasks/result.
// A person answers once the client has polled the task working; a second task is cancelled.
async function tasks() {
  const { client } = await connect("ts-core-tasks");
  const told = [];
  client.setNotificationHandler(TaskStatusNotificationSchema, (n) => {
    told.push([n.params.taskId, n.params.status]);
  });
  try {
    const taskTools = (await client.listTools()).tools
      .filter((t) => t.execution?.taskSupport === "optional")
      .map((t) => t.name);
    const messages = [];
    let answering = null;
    let result = null;
    const stream = client.experimental.tasks.callToolStream({
      name: "ask_user",
      arguments: { question: "Ship it?", choices: ["yes", "no"] },
    });
    for await (const message of stream) {
      messages.push({ type: message.type, status: message.task?.status, error: message.error?.message });
      if (message.type === "taskStatus" && message.task.status === "working" && answering === null) {
        answering = api(`/api/requests/${message.task.taskId}/reply`, {
          method: "POST",
          body: JSON.stringify({ choice: "yes" }),
        });
      }
      if (message.type === "result") result = message.result;
    }
    await answering;
    const created = await client.request(
      { method: "tools/call", params: { name: "request_approval", arguments: { action: "Reboot" } } },
      CreateTaskResultSchema,
      { task: {} },
    );
    const cancelled = await client.experimental.tasks.cancelTask(created.task.taskId);
    const listed = await client.experimental.tasks.listTasks();
    const request = await api(`/api/requests/${created.task.taskId}`);
    return {
      capabilities: client.getServerCapabilities().tasks,
      taskTools,
      messages,
      result: result?.structuredContent,
      related: result?._meta?.["io.modelcontextprotocol/related-task"],
      cancelled: cancelled.status,
      request: request.status,
      listed: listed.tasks.map((t) => [t.taskId, t.status]),
      told,
    };
  } finally {
    await client.close();
  }
}

const scenarios = { heartbeat, budget, elicitation, link, tasks };
const name = process.argv[2];
if (!(name in scenarios)) {
  console.error(`usage: node client.mjs ${Object.keys(scenarios).join("|")}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await scenarios[name]()));
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}
