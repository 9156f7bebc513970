// The official TypeScript MCP clients calling toolstack's tools as tasks,
// in both task schemes, against the conformance harness's server (the
// `mcp_conformance` example): `node ts-tasks.mjs v1|v2|v2-legacy URL`.
//
// * v1: @modelcontextprotocol/sdk 1.32.2 on a 2025-11-25 session, with its
//   own task API (`experimental.tasks.callToolStream`): a `task` in
//   `tools/call`, `tasks/get`, `tasks/result`, `tasks/cancel`.
// * v2: @modelcontextprotocol/client 2.4.0 in the 2026-07-28 era, with
//   @modelcontextprotocol/ext-tasks 0.2.2 (the tasks extension: a task as
//   the call's answer, `tasks/get`, `tasks/update`, `tasks/cancel`).
// * v2-legacy: the same client and ext-tasks on a 2025-11-25 session (the
//   2025-11-25 scheme, ext-tasks' "v1" protocol).
//
// Tools: slow_compute (optional task), failing_job (required; the tool
// fails), protocol_error_job (required; the tool panics, the task fails),
// test_tool_with_task (required; asks a name first), confirm_delete
// (optional; asks for a confirmation while it runs). One line per check;
// exits 1 if any failed. `tests/it/mcp_interop.rs` runs it.

const [, , mode, url] = process.argv;
if (!["v1", "v2", "v2-legacy"].includes(mode) || !url) {
  console.error("usage: node ts-tasks.mjs v1|v2|v2-legacy URL");
  process.exit(2);
}

const name = `ts-sdk-${mode} tasks`;
let failed = false;
async function check(what, run) {
  try {
    const said = await run();
    console.log(`ok: ${name}: ${what}${said ? `: ${said}` : ""}`);
  } catch (err) {
    failed = true;
    console.log(`FAILED: ${name}: ${what}: ${err?.stack ?? err}`);
  }
}
function assert(condition, message) {
  if (!condition) throw new Error(message);
}
function text(result) {
  return (result?.content ?? [])
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("\n");
}

// Answers every form: a name for a string field, yes for a boolean one.
const asked = [];
async function answer(params) {
  asked.push(params.message);
  const properties = params.requestedSchema?.properties ?? {};
  const content = Object.fromEntries(
    Object.entries(properties).map(([field, schema]) => [
      field,
      schema.type === "boolean" ? true : "Ada",
    ]),
  );
  return { action: "accept", content };
}

const capabilities = { elicitation: { form: {} } };
const clientInfo = { name: "toolstack-interop", version: "1.0.0" };

if (mode === "v1") {
  const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = await import(
    "@modelcontextprotocol/sdk/client/streamableHttp.js"
  );
  const { CallToolResultSchema, ElicitRequestSchema } = await import(
    "@modelcontextprotocol/sdk/types.js"
  );
  const client = new Client(clientInfo, { capabilities });
  client.setRequestHandler(ElicitRequestSchema, (request) => answer(request.params));
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));

  // The task's life as the client saw it: statuses, then the end.
  async function run(tool, args, onCreated) {
    const seen = [];
    let result;
    let error;
    let task;
    for await (const message of client.experimental.tasks.callToolStream(
      { name: tool, arguments: args },
      undefined,
      { task: { ttl: 60000 } },
    )) {
      if (message.type === "taskCreated") {
        task = message.task;
        seen.push(message.task.status);
        await onCreated?.(message.task);
      } else if (message.type === "taskStatus") {
        seen.push(message.task.status);
      } else if (message.type === "result") {
        result = message.result;
      } else if (message.type === "error") {
        error = message.error;
      }
    }
    return { seen, result, error, task };
  }

  await check("the server declares tasks, and which tools run as one", async () => {
    assert(client.getServerCapabilities()?.tasks?.requests?.tools?.call, "no tasks capability");
    const { tools } = await client.listTools();
    const support = Object.fromEntries(
      tools.filter((t) => t.execution).map((t) => [t.name, t.execution.taskSupport]),
    );
    assert(support.slow_compute === "optional", JSON.stringify(support));
    assert(support.failing_job === "required", JSON.stringify(support));
    return JSON.stringify(support);
  });

  await check("an optional tool as a task: made, polled, its result", async () => {
    const { seen, result, error, task } = await run("slow_compute", { seconds: 1, label: "sum" });
    assert(!error, error?.message);
    assert(text(result) === "sum: computed in 1s", text(result));
    // The server keeps a task its own time to live, and says how long.
    assert(task.ttl > 0 && task.pollInterval > 0, JSON.stringify(task));
    assert(seen.at(-1) === "completed", seen.join(">"));
    return `${seen.join(" > ")}: "${text(result)}"`;
  });

  await check("a required tool whose tool fails: failed, its error result kept", async () => {
    // 2025-11-25: a tool's error fails the task. The SDK's stream then says
    // only "Task … failed"; `tasks/result` has the tool's own words.
    const { seen, error, task } = await run("failing_job", {});
    assert(seen.at(-1) === "failed", seen.join(">"));
    assert(error, "no error");
    const got = await client.experimental.tasks.getTask(task.taskId);
    assert(/always does/.test(got.statusMessage ?? ""), JSON.stringify(got));
    const result = await client.experimental.tasks.getTaskResult(
      task.taskId,
      CallToolResultSchema,
    );
    assert(result.isError && /always does/.test(text(result)), text(result));
    return `${seen.join(" > ")}; statusMessage and tasks/result: ${text(result)}`;
  });

  await check("a required tool whose tool panics: the task failed", async () => {
    const { seen, error } = await run("protocol_error_job", {});
    assert(seen.at(-1) === "failed", seen.join(">"));
    assert(error, "no error");
    return `${seen.join(" > ")}: ${error.message}`;
  });

  await check("a task that asks first, answered on the session", async () => {
    const before = asked.length;
    const { seen, result, error } = await run("test_tool_with_task", {});
    assert(!error, error?.message);
    assert(text(result) === "Hello, Ada, from a task", text(result));
    assert(asked.length === before + 1, `asked ${asked.slice(before)}`);
    return `asked "${asked.at(-1)}", ${seen.join(" > ")}: "${text(result)}"`;
  });

  await check("a task that asks while it runs", async () => {
    const { seen, result, error } = await run("confirm_delete", { filename: "report.pdf" });
    assert(!error, error?.message);
    assert(text(result) === "Deleted report.pdf", text(result));
    return `asked "${asked.at(-1)}", ${seen.join(" > ")}: "${text(result)}"`;
  });

  await check("a task cancelled", async () => {
    let cancelled;
    const { seen, error, task } = await run("slow_compute", { seconds: 30 }, async (made) => {
      cancelled = await client.experimental.tasks.cancelTask(made.taskId);
    });
    assert(cancelled?.status === "cancelled", JSON.stringify(cancelled));
    const after = await client.experimental.tasks.getTask(task.taskId);
    assert(after.status === "cancelled", after.status);
    assert(error && /cancelled/.test(error.message), error?.message);
    return `${seen.join(" > ")}; tasks/get: ${after.status}`;
  });

  await check("a required tool called without a task is refused", async () => {
    // The SDK refuses before sending (it read `execution`); the server's
    // own refusal is in tests/it/mcp_legacy_tasks.rs.
    let message;
    try {
      await client.callTool({ name: "failing_job", arguments: {} });
    } catch (err) {
      message = err.message;
    }
    assert(message && /task/.test(message), String(message));
    return message;
  });
  await client.close();
} else {
  const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
  const { createTaskSessionFromClient, createApplicationInputHandler, resultFromTaskOutcome } =
    await import("@modelcontextprotocol/ext-tasks/client");
  const modern = mode === "v2";
  const client = new Client(clientInfo, {
    capabilities,
    // The 2026-07-28 era (server/discover, a stateless request each);
    // without it, a session opened with initialize (2025-11-25).
    ...(modern ? { versionNegotiation: { mode: { pin: "2026-07-28" } } } : {}),
  });
  client.setRequestHandler("elicitation/create", (request) => answer(request.params));
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  const session = createTaskSessionFromClient(client, {
    endpointId: `toolstack-interop:${url}`,
    ...(modern
      ? {
          rawDispatch: new RawChannel(transport).dispatch,
          v2RequestFraming: {
            protocolVersion: client.getNegotiatedProtocolVersion(),
            clientInfo,
            clientCapabilities: capabilities,
          },
        }
      : {}),
    onInputRequest: createApplicationInputHandler({
      elicitation: (request) => answer(request.params),
      sampling: async () => {
        throw new Error("no sampling here");
      },
      roots: async () => ({ roots: [] }),
    }),
  });

  async function run(tool, args, options) {
    const execution = await session.callTool(tool, args, options);
    const seen = [];
    const { outcome } = await execution.settle({
      onEvent: (event) => event.type === "task" && seen.push(event.task.status),
    });
    return { execution, outcome, seen };
  }

  await check(`the ${client.getNegotiatedProtocolVersion()} session runs tasks`, async () => {
    assert(session.capabilities.execution, JSON.stringify(session.capabilities));
    assert(
      client.getNegotiatedProtocolVersion() === (modern ? "2026-07-28" : "2025-11-25"),
      client.getNegotiatedProtocolVersion(),
    );
    return JSON.stringify(session.capabilities);
  });

  await check("an optional tool as a task: made, polled, its result", async () => {
    const { execution, outcome, seen } = await run(
      "slow_compute",
      { seconds: 1, label: "sum" },
      { task: { preference: "require" } },
    );
    assert(execution.kind === "task", execution.kind);
    const result = resultFromTaskOutcome(outcome);
    assert(text(result) === "sum: computed in 1s", text(result));
    return `${seen.join(" > ")}: "${text(result)}"`;
  });

  await check("a required tool whose tool fails: its error result", async () => {
    const { execution, outcome, seen } = await run("failing_job", {});
    assert(execution.kind === "task", execution.kind);
    // The extension: `completed` with `isError`; 2025-11-25: `failed`.
    if (modern) {
      assert(outcome.status === "completed" && outcome.result.isError, JSON.stringify(outcome));
      return `${seen.join(" > ")}: ${text(outcome.result)}`;
    }
    assert(outcome.status === "failed", JSON.stringify(outcome));
    return `${seen.join(" > ")}: ${JSON.stringify(outcome).slice(0, 160)}`;
  });

  await check("a required tool whose tool panics: the task failed", async () => {
    const { execution, outcome, seen } = await run("protocol_error_job", {});
    assert(execution.kind === "task", execution.kind);
    assert(outcome.status === "failed", JSON.stringify(outcome));
    return `${seen.join(" > ")}: ${outcome.error?.message}`;
  });

  await check("a task that asks first", async () => {
    const before = asked.length;
    const { execution, outcome, seen } = await run("test_tool_with_task", {});
    assert(execution.kind === "task", execution.kind);
    const result = resultFromTaskOutcome(outcome);
    assert(text(result) === "Hello, Ada, from a task", text(result));
    assert(asked.length === before + 1, `asked ${asked.slice(before)}`);
    return `asked "${asked.at(-1)}", ${seen.join(" > ")}: "${text(result)}"`;
  });

  await check("a task that asks while it runs", async () => {
    const before = asked.length;
    const { execution, outcome, seen } = await run(
      "confirm_delete",
      { filename: "report.pdf" },
      { task: { preference: "require" } },
    );
    assert(execution.kind === "task", execution.kind);
    const result = resultFromTaskOutcome(outcome);
    assert(text(result) === "Deleted report.pdf", text(result));
    assert(asked.length === before + 1, `asked ${asked.slice(before)}`);
    return `asked "${asked.at(-1)}", ${seen.join(" > ")}: "${text(result)}"`;
  });

  await check("a task cancelled", async () => {
    const execution = await session.callTool(
      "slow_compute",
      { seconds: 30 },
      { task: { preference: "require" } },
    );
    assert(execution.kind === "task", execution.kind);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await execution.cancel();
    const { outcome } = await execution.settle();
    assert(outcome.status === "cancelled", JSON.stringify(outcome));
    const after = await session.task(execution.handle.taskId).snapshot();
    assert(after.status === "cancelled", after.status);
    return `tasks/get: ${after.status}`;
  });

  await session.close();
  await client.close();
}

process.exit(failed ? 1 : 0);

// ext-tasks sends its 2026-07-28 requests itself (`rawDispatch`): the
// client's own request path refuses a `resultType: "task"` answer. This
// sends them on the client's transport under ids of their own and takes
// their answers before the client sees them.
function RawChannel(transport) {
  const pending = new Map();
  let next = 0;
  const theirs = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const waiting =
      typeof message?.id === "string" && !("method" in message) && pending.get(message.id);
    if (!waiting) return theirs?.(message, extra);
    pending.delete(message.id);
    waiting(
      "error" in message
        ? { kind: "error", error: message.error }
        : { kind: "result", result: message.result },
    );
  };
  this.dispatch = (request, options = {}) =>
    new Promise((resolve, reject) => {
      const id = `raw-${++next}`;
      pending.set(id, resolve);
      options.signal?.addEventListener(
        "abort",
        () => pending.delete(id) && reject(options.signal.reason),
        { once: true },
      );
      transport
        .send(
          { jsonrpc: "2.0", id, method: request.method, params: request.params },
          options.context?.headers ? { headers: options.context.headers } : undefined,
        )
        .catch((err) => pending.delete(id) && reject(err));
    });
}
