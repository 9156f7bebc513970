// An MCP server built with the official v2 TypeScript server SDK
// (@modelcontextprotocol/server 2.4.0, mounted on node:http with
// @modelcontextprotocol/node 2.1.2), for toolstack's MCP client to talk to:
// `node ts-server.mjs stateful|stateless [PORT]` (or PORT from the
// environment) serves streamable HTTP at http://127.0.0.1:PORT/mcp and
// prints `listening on http://127.0.0.1:PORT/mcp` to stderr once ready.
//
// `stateless` is the 2026-07-28 revision only: no sessions, every request
// carries its revision and client capabilities in `_meta`, `server/discover`
// instead of `initialize`. It is the SDK's `createMcpHandler` with
// `legacy: 'reject'`, so a 2025-era request gets the unsupported-version error.
// `stateful` also serves 2025-11-25 clients that `initialize`, each on its own
// session (`Mcp-Session-Id`), and still answers 2026-07-28 requests.
//
// Tools: `echo {text}` (text plus structuredContent {echoed}), `count {to}`
// (a progress notification per step, 50 ms apart, when the call has a
// progress token; stops when cancelled), `ask_name {}` (a form elicitation
// for `name`: an `input_required` result on 2026-07-28, an
// `elicitation/create` request on a 2025-11-25 session), and `fail {}` (a
// tool error result). Nothing is written to stdout; a cancelled `count`
// says so on stderr.

import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import {
  McpServer,
  WebStandardStreamableHTTPServerTransport,
  createMcpHandler,
  isLegacyRequest,
  inputRequired,
  inputResponse,
} from "@modelcontextprotocol/server";
import { toNodeHandler } from "@modelcontextprotocol/node";
import * as z from "zod";

const mode = process.argv[2];
const port = Number(process.argv[3] ?? process.env.PORT);
if (!["stateful", "stateless"].includes(mode) || !Number.isInteger(port)) {
  console.error("usage: node ts-server.mjs stateful|stateless PORT");
  process.exit(2);
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const stop = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", stop);
      resolve();
    }, ms);
    signal.addEventListener("abort", stop, { once: true });
  });

// One definition of the tools for both eras: the SDK builds a fresh instance
// per request (2026-07-28) or per session (2025-11-25) from it.
function makeServer() {
  const server = new McpServer({ name: "ts-sdk-v2-server", version: "1.0.0" });

  server.registerTool(
    "echo",
    {
      description: "Echoes the text back.",
      inputSchema: z.object({ text: z.string() }),
      outputSchema: z.object({ echoed: z.string() }),
    },
    async ({ text }) => ({
      content: [{ type: "text", text: `echo: ${text}` }],
      structuredContent: { echoed: text },
    }),
  );

  server.registerTool(
    "count",
    {
      description: "Counts to `to`, one progress notification per step.",
      inputSchema: z.object({ to: z.number().int().min(0) }),
    },
    async ({ to }, ctx) => {
      const token = ctx.mcpReq._meta?.progressToken;
      const signal = ctx.mcpReq.signal;
      let reached = 0;
      for (let step = 1; step <= to; step++) {
        await sleep(50, signal);
        if (signal.aborted) break;
        reached = step;
        if (token !== undefined) {
          await ctx.mcpReq.notify({
            method: "notifications/progress",
            params: { progressToken: token, progress: step, total: to },
          });
        }
      }
      if (signal.aborted) {
        console.error(`ts-server: count cancelled after ${reached} of ${to}`);
        return { content: [{ type: "text", text: `cancelled at ${reached}` }], isError: true };
      }
      return { content: [{ type: "text", text: `counted to ${to}` }] };
    },
  );

  // Written once as a multi-round-trip handler: 2026-07-28 clients get the
  // input_required result and retry with `inputResponses`; on a 2025-11-25
  // session the SDK's legacy shim sends `elicitation/create` itself and
  // re-enters the handler with the answer.
  server.registerTool(
    "ask_name",
    { description: "Asks the user for their name.", inputSchema: z.object({}) },
    async (_args, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, "name");
      if (answer.kind === "missing") {
        return inputRequired({
          inputRequests: {
            name: inputRequired.elicit({
              message: "What is your name?",
              requestedSchema: {
                type: "object",
                properties: { name: { type: "string", description: "Your name" } },
                required: ["name"],
              },
            }),
          },
        });
      }
      if (answer.kind === "elicit" && answer.action === "accept" && typeof answer.content?.name === "string") {
        return { content: [{ type: "text", text: `Hello, ${answer.content.name}` }] };
      }
      return { content: [{ type: "text", text: "declined" }] };
    },
  );

  server.registerTool(
    "fail",
    { description: "Always fails.", inputSchema: z.object({}) },
    async () => ({ content: [{ type: "text", text: "it failed on purpose" }], isError: true }),
  );

  return server;
}

const onerror = (err) => console.error(`ts-server: ${err?.message ?? err}`);
const modern = createMcpHandler(makeServer, { legacy: "reject", onerror });

// 2025-11-25 sessions: one server and transport per `initialize`, found again
// by the `Mcp-Session-Id` header.
const sessions = new Map();
async function legacy(request) {
  const id = request.headers.get("mcp-session-id");
  if (id) {
    const transport = sessions.get(id);
    if (!transport) {
      return Response.json(
        { jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null },
        { status: 404 },
      );
    }
    return transport.handleRequest(request);
  }
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (sid) => sessions.set(sid, transport),
    onsessionclosed: (sid) => sessions.delete(sid),
  });
  transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
  await makeServer().connect(transport);
  return transport.handleRequest(request);
}

const handler =
  mode === "stateless"
    ? modern
    : {
        fetch: async (request, options) =>
          (await isLegacyRequest(request)) ? legacy(request) : modern.fetch(request, options),
      };
const serve = toNodeHandler(handler, { onerror });

const http = createServer((req, res) => {
  if (new URL(req.url ?? "/", "http://x").pathname !== "/mcp") {
    res.writeHead(404).end();
    return;
  }
  serve(req, res).catch((err) => {
    onerror(err);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  });
});
http.listen(port, "127.0.0.1", () => {
  console.error(`listening on http://127.0.0.1:${port}/mcp`);
});
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    modern.close().finally(() => process.exit(0));
  });
}
