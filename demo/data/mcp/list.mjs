#!/usr/bin/env node
// Lists the tools of real public MCP servers, installed from npm (package.json)
// and PyPI (requirements.txt, in .venv/), with the official MCP TypeScript SDK
// client over stdio, and writes them to catalogue.json exactly as listed.
//
//   npm ci && node list.mjs          # the catalogue's servers -> catalogue.json
//                                    # (first run makes .venv from requirements.txt)
//   node list.mjs --all              # also the `extra` servers
//   node list.mjs --only github,slack --out /tmp/x.json
//   node list.mjs --table            # also print the README's table
//
// No server is given a real credential: where one needs a token to start, a
// dummy one is passed. Nothing here calls a tool; only initialize + tools/list.
// A server that fails (or takes longer than its timeout) is skipped with the
// reason printed, and the catalogue is written from the others.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const NM = join(HERE, "node_modules");
const VENV = join(HERE, ".venv");
// Some servers need Node >= 22; the `node` npm package (a dependency) gives one.
const NODE22 = join(NM, "node", "bin", "node");
const NODE = existsSync(NODE22) ? NODE22 : process.execPath;
const DEFAULT_TIMEOUT_MS = 60_000;

// A scratch directory: each server's cwd and HOME, so that nothing a server
// writes (logs, memory files, config) lands in the repository or in ~. Its
// path is fixed (not mkdtemp) because one description (figma's image
// directory) quotes the server's cwd, and the catalogue should not change
// from run to run.
const SCRATCH = join(tmpdir(), "toolstack-mcp-catalogue");
rmSync(SCRATCH, { recursive: true, force: true });
mkdirSync(SCRATCH, { recursive: true });
const FS_ROOT = join(SCRATCH, "files");
mkdirSync(FS_ROOT, { recursive: true });

// Environment common to all servers: no telemetry, no update checks, no colour.
const COMMON_ENV = {
  HOME: SCRATCH,
  DO_NOT_TRACK: "1",
  NO_COLOR: "1",
  CI: "1",
  NO_UPDATE_NOTIFIER: "1",
  PUPPETEER_SKIP_DOWNLOAD: "1",
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: "1",
};

const DUMMY = "dummy-token-for-tools-list";

// One entry per server. `package` is the npm package (PyPI with `pypi: true`),
// `bin` the executable it declares (default: its only one). `extra: true`
// servers are installed and work too but are left out of the default
// catalogue to keep it near 400 tools without one service dominating; `--all`
// lists them as well.
const SERVERS = [
  // --- files, memory, reasoning, time ---
  { server: "filesystem", package: "@modelcontextprotocol/server-filesystem", args: [FS_ROOT] },
  { server: "git", package: "mcp-server-git", pypi: true },
  { server: "memory", package: "@modelcontextprotocol/server-memory", env: { MEMORY_FILE_PATH: join(SCRATCH, "memory.jsonl") } },
  { server: "sequential-thinking", package: "@modelcontextprotocol/server-sequential-thinking" },
  { server: "time", package: "mcp-server-time", pypi: true, args: ["--local-timezone", "UTC"] },
  // --- code hosting, CI ---
  { server: "github", package: "@modelcontextprotocol/server-github", env: { GITHUB_PERSONAL_ACCESS_TOKEN: DUMMY } },
  { server: "gitlab", package: "@modelcontextprotocol/server-gitlab", env: { GITLAB_PERSONAL_ACCESS_TOKEN: DUMMY, GITLAB_API_URL: "https://gitlab.example.invalid/api/v4" } },
  { server: "circleci", package: "@circleci/mcp-server-circleci", env: { CIRCLECI_TOKEN: DUMMY } },
  // --- chat, telephony, calendar, CRM ---
  { server: "slack", package: "@modelcontextprotocol/server-slack", env: { SLACK_BOT_TOKEN: "xoxb-" + DUMMY, SLACK_TEAM_ID: "T00000000" } },
  // Twilio checks the shape of the SIDs: "AC"/"SK" and 32 hex digits. By default
  // it loads all 197 endpoints of the 2010 REST API; take the messaging and voice
  // ones (its README: pass "--services ''" to filter by --tags only).
  { server: "twilio", package: "@twilio-alpha/mcp", args: ["AC" + "0".repeat(32) + "/SK" + "0".repeat(32) + ":" + DUMMY,
    "--services", "", "--tags", "Api20100401Message,Api20100401Call,Api20100401Recording,Api20100401Conference,Api20100401IncomingPhoneNumber,Api20100401AvailablePhoneNumberCountry"] },
  // Reads an OAuth client file at start (never used to list tools): a dummy one.
  { server: "google-calendar", package: "@cocal/google-calendar-mcp", env: { GOOGLE_OAUTH_CREDENTIALS: join(SCRATCH, "gcp-oauth.keys.json") },
    files: { "gcp-oauth.keys.json": JSON.stringify({ installed: { client_id: DUMMY + ".apps.googleusercontent.com", client_secret: DUMMY, project_id: "dummy", redirect_uris: ["http://localhost"] } }) } },
  { server: "hubspot", package: "@hubspot/mcp-server", env: { PRIVATE_APP_ACCESS_TOKEN: DUMMY } },
  // --- docs, notes, design ---
  { server: "notion", package: "@notionhq/notion-mcp-server", env: { NOTION_TOKEN: "ntn_" + DUMMY } },
  { server: "context7", package: "@upstash/context7-mcp" },
  { server: "figma", package: "figma-developer-mcp", args: ["--stdio"], env: { FIGMA_API_KEY: DUMMY } },
  // --- payments, commerce ---
  { server: "stripe", package: "@stripe/mcp", args: ["--tools=all", "--api-key=sk_test_" + DUMMY] },
  { server: "shopify-dev", package: "@shopify/dev-mcp", env: { OPT_OUT_INSTRUMENTATION: "true" } },
  // --- databases, search indexes ---
  { server: "postgres", package: "@modelcontextprotocol/server-postgres", args: ["postgresql://localhost:5432/dummy"] },
  // Its "docs" feature fetches a schema from the Supabase docs API while
  // listing tools; every other feature is listed.
  { server: "supabase", package: "@supabase/mcp-server-supabase", args: ["--access-token", "sbp_" + DUMMY, "--features", "account,database,debugging,development,functions,branching,storage"] },
  { server: "pinecone", package: "@pinecone-database/mcp", env: { PINECONE_API_KEY: DUMMY } },
  { server: "elasticsearch", package: "@elastic/mcp-server-elasticsearch", env: { ES_URL: "http://localhost:9200", ES_API_KEY: DUMMY } },
  // --- cloud, infrastructure, feature flags ---
  { server: "kubernetes", package: "mcp-server-kubernetes" },
  { server: "heroku", package: "@heroku/mcp-server", env: { HEROKU_API_KEY: DUMMY } },
  { server: "aws-kb-retrieval", package: "@modelcontextprotocol/server-aws-kb-retrieval", env: { AWS_ACCESS_KEY_ID: "AKIADUMMY", AWS_SECRET_ACCESS_KEY: DUMMY, AWS_REGION: "us-east-1" } },
  { server: "launchdarkly", package: "@launchdarkly/mcp-server", args: ["start", "--api-key", DUMMY] },
  // --- monitoring ---
  { server: "sentry", package: "@sentry/mcp-server", args: ["--access-token=" + DUMMY] },
  { server: "datadog", package: "@winor30/mcp-server-datadog", env: { DATADOG_API_KEY: DUMMY, DATADOG_APP_KEY: DUMMY } },
  // --- web search, fetch ---
  { server: "brave-search", package: "@brave/brave-search-mcp-server", env: { BRAVE_API_KEY: DUMMY } },
  { server: "brave-search-ref", package: "@modelcontextprotocol/server-brave-search", env: { BRAVE_API_KEY: DUMMY } },
  { server: "tavily", package: "tavily-mcp", env: { TAVILY_API_KEY: "tvly-" + DUMMY } },
  { server: "exa", package: "exa-mcp-server", env: { EXA_API_KEY: DUMMY } },
  { server: "perplexity", package: "@perplexity-ai/mcp-server", env: { PERPLEXITY_API_KEY: DUMMY } },
  { server: "fetch", package: "mcp-server-fetch", pypi: true },
  // --- browsers ---
  { server: "playwright", package: "@playwright/mcp", args: ["--headless"] },
  { server: "puppeteer", package: "@modelcontextprotocol/server-puppeteer" },
  { server: "browserbase", package: "@browserbasehq/mcp-server-browserbase", env: { BROWSERBASE_API_KEY: DUMMY, BROWSERBASE_PROJECT_ID: DUMMY, GEMINI_API_KEY: DUMMY } },
  // --- maps, images ---
  { server: "google-maps", package: "@modelcontextprotocol/server-google-maps", env: { GOOGLE_MAPS_API_KEY: DUMMY } },
  { server: "everart", package: "@modelcontextprotocol/server-everart", env: { EVERART_API_KEY: DUMMY } },

  // --- extra: listed only with --all ---
  { extra: true, server: "everything", package: "@modelcontextprotocol/server-everything", args: ["stdio"] },
  { extra: true, server: "mongodb", package: "mongodb-mcp-server", env: { MDB_MCP_TELEMETRY: "disabled", MDB_MCP_LOG_PATH: join(SCRATCH, "mongodb-logs") } },
  { extra: true, server: "neon", package: "@neondatabase/mcp-server-neon", args: ["start", DUMMY] },
  { extra: true, server: "mapbox", package: "@mapbox/mcp-server", env: { MAPBOX_ACCESS_TOKEN: "pk." + DUMMY } },
  { extra: true, server: "firecrawl", package: "firecrawl-mcp", env: { FIRECRAWL_API_KEY: "fc-" + DUMMY } },
  { extra: true, server: "chrome-devtools", package: "chrome-devtools-mcp", bin: "chrome-devtools-mcp", args: ["--headless", "--isolated"] },
  { extra: true, server: "antv-chart", package: "@antv/mcp-server-chart" },
  // Without --tools it fetches Actor definitions from the Apify API at start;
  // these tool categories are defined in the package itself.
  { extra: true, server: "apify", package: "@apify/actors-mcp-server", args: ["--tools", "actors,docs,runs,storage,tasks,schedules", "--telemetry-enabled=false"], env: { APIFY_TOKEN: DUMMY } },
  { extra: true, server: "shortcut", package: "@shortcut/mcp", env: { SHORTCUT_API_TOKEN: DUMMY } },
  { extra: true, server: "monday", package: "@mondaydotcomorg/monday-api-mcp", args: ["-t", DUMMY] },
  { extra: true, server: "gitlab-zereight", package: "@zereight/mcp-gitlab", bin: "mcp-gitlab", env: { GITLAB_PERSONAL_ACCESS_TOKEN: DUMMY, GITLAB_API_URL: "https://gitlab.example.invalid/api/v4" } },
  { extra: true, server: "azure-devops", package: "@azure-devops/mcp", args: ["dummy-org"] },
  // Reads the wrangler login file at start: a dummy one that does not expire.
  { extra: true, server: "cloudflare", package: "@cloudflare/mcp-server-cloudflare", args: ["run", "0".repeat(32)],
    files: { ".config/.wrangler/config/default.toml": `oauth_token = "${DUMMY}"\nrefresh_token = "${DUMMY}"\nexpiration_time = "2099-01-01T00:00:00.000Z"\nscopes = ["account:read"]\n` } },
  { extra: true, server: "azure", package: "@azure/mcp", args: ["server", "start"], timeoutMs: 120_000 },
];

// ---------------------------------------------------------------------------

function npmPackageJson(pkg) {
  return JSON.parse(readFileSync(join(NM, pkg, "package.json"), "utf8"));
}

function npmLaunch(s) {
  const pj = npmPackageJson(s.package);
  let binPath;
  if (typeof pj.bin === "string") binPath = pj.bin;
  else if (pj.bin && s.bin) binPath = pj.bin[s.bin];
  else if (pj.bin && Object.keys(pj.bin).length === 1) binPath = Object.values(pj.bin)[0];
  if (!binPath) throw new Error(`cannot pick a bin of ${s.package}: ${JSON.stringify(pj.bin)}`);
  return {
    command: NODE,
    args: [resolve(NM, s.package, binPath), ...(s.args ?? [])],
    version: pj.version,
    license: typeof pj.license === "string" ? pj.license : pj.license?.type ?? null,
  };
}

// The Python servers live in .venv, made here on first use from the pinned
// requirements.txt (PyPI), so that `npm ci && node list.mjs` is all it takes.
function ensureVenv() {
  if (existsSync(join(VENV, "bin", "python"))) return;
  console.log("making .venv from requirements.txt ...");
  for (const [cmd, args] of [["python3", ["-m", "venv", VENV]],
    [join(VENV, "bin", "pip"), ["install", "--quiet", "--disable-pip-version-check", "-r", join(HERE, "requirements.txt")]]]) {
    const r = spawnSync(cmd, args, { stdio: "inherit" });
    if (r.status !== 0) { rmSync(VENV, { recursive: true, force: true }); throw new Error(`${cmd} ${args.join(" ")} failed`); }
  }
}

function pypiLaunch(s) {
  const exe = join(VENV, "bin", s.bin ?? s.package);
  if (!existsSync(exe)) throw new Error(`${exe} not found (create .venv from requirements.txt)`);
  const py = spawnSync(join(VENV, "bin", "python"), ["-c",
    "import sys, json, importlib.metadata as m; d = m.metadata(sys.argv[1]); " +
    "print(json.dumps({'version': d['Version'], 'license': d.get('License') or d.get('License-Expression') or " +
    "next((c.split(' :: ')[-1] for c in (d.get_all('Classifier') or []) if c.startswith('License ::')), None)}))",
    s.package], { encoding: "utf8" });
  if (py.status !== 0) throw new Error(`cannot read metadata of ${s.package}: ${py.stderr}`);
  const meta = JSON.parse(py.stdout);
  return { command: exe, args: s.args ?? [], version: meta.version, license: meta.license };
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out after ${ms / 1000}s (${what})`)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

async function listServer(s) {
  for (const [rel, content] of Object.entries(s.files ?? {})) {
    mkdirSync(dirname(join(SCRATCH, rel)), { recursive: true });
    writeFileSync(join(SCRATCH, rel), content);
  }
  const launch = s.pypi ? pypiLaunch(s) : npmLaunch(s);
  const cwd = join(SCRATCH, "cwd-" + s.server);
  mkdirSync(cwd, { recursive: true });
  const transport = new StdioClientTransport({
    command: launch.command,
    args: launch.args,
    env: { ...getDefaultEnvironment(), ...COMMON_ENV, PATH: `${dirname(NODE)}:${process.env.PATH}`, ...(s.env ?? {}) },
    cwd,
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (chunk) => { stderr = (stderr + chunk.toString()).slice(-4000); });
  const client = new Client({ name: "toolstack-catalogue", version: "0.1.0" });
  const timeoutMs = s.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  try {
    const work = (async () => {
      await client.connect(transport);
      const tools = [];
      let cursor;
      const seen = new Set();
      do {
        const page = await client.listTools(cursor ? { cursor } : undefined);
        tools.push(...page.tools);
        cursor = page.nextCursor;
        if (cursor && seen.has(cursor)) throw new Error(`pagination loops on cursor ${cursor}`);
        if (cursor) seen.add(cursor);
      } while (cursor);
      return tools;
    })();
    const tools = await withTimeout(work, timeoutMs, "initialize + tools/list");
    if (tools.length === 0) throw new Error("listed no tools");
    return {
      entry: {
        server: s.server,
        package: s.package,
        registry: s.pypi ? "pypi" : "npm",
        version: launch.version,
        tools: tools.map((t) => {
          const out = { name: t.name, description: t.description, inputSchema: t.inputSchema };
          if (t.annotations && Object.keys(t.annotations).length) out.annotations = t.annotations;
          return out;
        }),
      },
      license: launch.license,
    };
  } catch (e) {
    const tail = stderr.trim().split("\n").slice(-6).join("\n    ");
    throw new Error(`${e.message}${tail ? `\n    stderr: ${tail}` : ""}`);
  } finally {
    await client.close().catch(() => {});
    await transport.close().catch(() => {});
  }
}

async function main() {
  const argv = process.argv.slice(2);
  const only = argv.includes("--only") ? argv[argv.indexOf("--only") + 1].split(",") : null;
  const out = argv.includes("--out") ? resolve(argv[argv.indexOf("--out") + 1]) : join(HERE, "catalogue.json");
  const concurrency = argv.includes("--jobs") ? Number(argv[argv.indexOf("--jobs") + 1]) : 3;
  const all = argv.includes("--all");
  const chosen = only ? SERVERS.filter((s) => only.includes(s.server)) : SERVERS.filter((s) => all || !s.extra);

  if (chosen.some((s) => s.pypi)) {
    try { ensureVenv(); } catch (e) { console.log(`cannot make .venv: ${e.message}`); }
  }

  const results = new Array(chosen.length);
  let next = 0;
  async function worker() {
    while (next < chosen.length) {
      const i = next++;
      const s = chosen[i];
      const t0 = Date.now();
      try {
        results[i] = await listServer(s);
        const r = results[i];
        console.log(`ok    ${s.server.padEnd(20)} ${String(r.entry.tools.length).padStart(4)} tools  ${s.package}@${r.entry.version}  (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
      } catch (e) {
        results[i] = null;
        console.log(`SKIP  ${s.server.padEnd(20)} ${s.package}: ${e.message}`);
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, chosen.length) }, worker));

  const ok = results.filter(Boolean);
  const catalogue = ok.map((r) => r.entry);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(catalogue, null, 2) + "\n");
  if (argv.includes("--table")) {
    // The README's table: server, package, version, licence, tool count.
    console.log("\n| server | package | version | licence | tools |\n| --- | --- | --- | --- | ---: |");
    for (const r of ok) {
      const e = r.entry;
      console.log(`| ${e.server} | \`${e.package}\` (${e.registry}) | ${e.version} | ${r.license ?? "?"} | ${e.tools.length} |`);
    }
  }
  const total = catalogue.reduce((n, s) => n + s.tools.length, 0);
  console.log(`\n${catalogue.length}/${chosen.length} servers, ${total} tools -> ${out}`);
  const skipped = chosen.filter((_, i) => !results[i]).map((s) => s.server);
  if (skipped.length) console.log(`WARNING: skipped ${skipped.join(", ")} (see above); the catalogue lacks their tools`);
  rmSync(SCRATCH, { recursive: true, force: true });
  process.exit(0);
}

main().catch((e) => { console.error(e); process.exit(1); });
