// The official TypeScript MCP client driving toolstack's MCP server (the
// `mcp_server` example, over streamable HTTP): `node ts-client.mjs v1|v2 URL
// [ELICITATION_URL]`; with the third, the client also answers a server's
// elicitation (the conformance harness's `test_elicitation` tool there).
// v1 is @modelcontextprotocol/sdk 1.32.2 (revision 2025-11-25), v2
// @modelcontextprotocol/client 2.4.0 (which speaks 2026-07-28). One line
// per check; exits 1 on the first failure. `tests/it/mcp_interop.rs` runs it.

const [, , sdk, url, elicitationUrl] = process.argv;
if (!["v1", "v2", "v2-stateless"].includes(sdk) || !url) {
  console.error("usage: node ts-client.mjs v1|v2|v2-stateless URL [ELICITATION_URL]");
  process.exit(2);
}

const { Client, StreamableHTTPClientTransport } =
  sdk === "v1"
    ? {
        Client: (await import("@modelcontextprotocol/sdk/client/index.js")).Client,
        StreamableHTTPClientTransport: (
          await import("@modelcontextprotocol/sdk/client/streamableHttp.js")
        ).StreamableHTTPClientTransport,
      }
    : await import("@modelcontextprotocol/client");

const name = `ts-sdk-${sdk}`;
// The 2026-07-28 era, pinned: a client that cannot have it fails.
const era = sdk === "v2-stateless" ? { versionNegotiation: { mode: { pin: "2026-07-28" } } } : {};
let failed = false;
async function check(what, run) {
  try {
    const said = await run();
    console.log(`ok: ${name} ${what}${said ? `: ${said}` : ""}`);
  } catch (err) {
    failed = true;
    console.log(`FAILED: ${name} ${what}: ${err?.stack ?? err}`);
  }
}
function assert(condition, message) {
  if (!condition) throw new Error(message);
}

// v1 takes (params, resultSchema, options); v2 (params, options).
function call(client, params, options) {
  return sdk === "v1"
    ? client.callTool(params, undefined, options)
    : client.callTool(params, options);
}
function text(result) {
  return (result.content ?? [])
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("\n");
}

async function connect(token) {
  const client = new Client({ name: "toolstack-interop", version: "1.0.0" }, era);
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

const guest = await connect("guest-token");

await check("lists the tools a guest may see", async () => {
  const { tools } = await guest.listTools();
  const names = tools.map((tool) => tool.name).sort();
  assert(JSON.stringify(names) === JSON.stringify(["add", "count"]), `got ${names}`);
  const revision = guest.getNegotiatedProtocolVersion?.();
  if (sdk === "v2-stateless") {
    assert(revision === "2026-07-28", `negotiated ${revision}`);
  }
  return `${names.join(", ")}${revision ? ` (revision ${revision})` : ""}`;
});

await check("calls add, with structured content", async () => {
  const result = await call(guest, { name: "add", arguments: { a: 2, b: 3 } });
  assert(!result.isError, text(result));
  assert(text(result).includes("5"), `got ${text(result)}`);
  return text(result);
});

await check("streams progress", async () => {
  const seen = [];
  const result = await call(
    guest,
    { name: "count", arguments: { to: 4 } },
    { onprogress: (progress) => seen.push(progress.progress) },
  );
  assert(text(result) === "counted to 4", `got ${text(result)}`);
  assert(seen.length >= 2, `progress ${JSON.stringify(seen)}`);
  return `${seen.length} reports, then "${text(result)}"`;
});

await check("cancels a call, and the server goes on", async () => {
  const abort = new AbortController();
  let reports = 0;
  const pending = call(
    guest,
    { name: "count", arguments: { to: 1000 } },
    {
      signal: abort.signal,
      onprogress: () => {
        reports += 1;
        if (reports === 2) abort.abort("enough");
      },
    },
  );
  let rejected = false;
  try {
    await pending;
  } catch {
    rejected = true;
  }
  assert(rejected, "the cancelled call resolved");
  const after = await call(guest, { name: "add", arguments: { a: 1, b: 1 } });
  assert(text(after).includes("2"), `got ${text(after)}`);
  return `cancelled after ${reports} reports`;
});

await check("bad arguments name the field", async () => {
  let message;
  try {
    const result = await call(guest, { name: "add", arguments: { a: "two", b: 1 } });
    assert(result.isError, "bad arguments were accepted");
    message = text(result);
  } catch (err) {
    message = String(err?.message ?? err);
  }
  assert(message.includes("`a`") || message.includes('"a"') || message.includes(" a"), message);
  return message.slice(0, 120);
});

await check("an unknown tool is an error", async () => {
  let message;
  try {
    const result = await call(guest, { name: "no_such_tool", arguments: {} });
    assert(result.isError, "an unknown tool answered");
    message = text(result);
  } catch (err) {
    message = String(err?.message ?? err);
  }
  assert(/unknown tool|not found/i.test(message), message);
  return message.slice(0, 120);
});

await check("a tool hidden from a guest cannot be called", async () => {
  let refused = false;
  try {
    const result = await call(guest, { name: "shutdown_reactor", arguments: { reason: "x" } });
    refused = result.isError === true;
  } catch {
    refused = true;
  }
  assert(refused, "a guest called the admin's tool");
});

await check("an admin sees and calls the admin's tool", async () => {
  const admin = await connect("admin-token");
  const { tools } = await admin.listTools();
  assert(tools.some((tool) => tool.name === "shutdown_reactor"), "not listed");
  const result = await call(admin, {
    name: "shutdown_reactor",
    arguments: { reason: "the test" },
  });
  assert(text(result).includes("the test"), text(result));
  await admin.close();
});

await guest.close();

if (elicitationUrl) {
  await check("answers the server's elicitation", async () => {
    const client = new Client(
      { name: "toolstack-interop", version: "1.0.0" },
      { capabilities: { elicitation: { form: {} } }, ...era },
    );
    const answer = async () => ({
      action: "accept",
      content: { username: "ada", email: "ada@example.com" },
    });
    if (sdk === "v1") {
      const { ElicitRequestSchema } = await import("@modelcontextprotocol/sdk/types.js");
      client.setRequestHandler(ElicitRequestSchema, answer);
    } else {
      client.setRequestHandler("elicitation/create", answer);
    }
    await client.connect(new StreamableHTTPClientTransport(new URL(elicitationUrl)));
    const result = await call(client, {
      name: "test_elicitation",
      arguments: { message: "Who are you?" },
    });
    assert(!result.isError, text(result));
    assert(text(result).includes("ada@example.com"), text(result));
    await client.close();
    return text(result);
  });
}

process.exit(failed ? 1 : 0);
