// Interop check: the official TypeScript SDK (npm @modelcontextprotocol/sdk@1.32.2) stdio
// client as a 2025 *host* of `mcp-bridge connect` (spawned as its stdio server).
//
// Usage: node ts_connect_host.mjs [--remote-log FILE --cancel-needle TEXT] -- CMD ARGS...
// Needs NODE_PATH (or a node_modules beside it) holding the SDK.
// Checks: initialize, tools/list, echo, progress, cancel (AbortSignal; with --remote-log the
// remote must log TEXT), a call after the cancel. Prints PASS/FAIL lines and `N passed, M failed`.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url + "/../");
const resolve = (p) => require.resolve(p, { paths: (process.env.NODE_PATH || "").split(":").filter(Boolean) });
const { Client } = await import(resolve("@modelcontextprotocol/sdk/client/index.js"));
const { StdioClientTransport } = await import(resolve("@modelcontextprotocol/sdk/client/stdio.js"));

const argv = process.argv.slice(2);
let remoteLog = null, needle = "cancelled";
while (argv.length && argv[0] !== "--") {
  const a = argv.shift();
  if (a === "--remote-log") remoteLog = argv.shift();
  else if (a === "--cancel-needle") needle = argv.shift();
}
argv.shift();
const [command, ...args] = argv;

let passed = 0, failed = 0;
const report = (ok, name, detail) => {
  console.log(`${ok ? "PASS" : "FAIL"} ts ${name}: ${detail}`);
  ok ? passed++ : failed++;
};
const count = () => {
  if (!remoteLog) return 0;
  try { return readFileSync(remoteLog, "utf8").split(needle).length - 1; } catch { return 0; }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (res) => (res.content || []).find((c) => c.type === "text")?.text;

const overall = setTimeout(() => { report(false, "run", "did not finish within 120s"); finish(); }, 120000);
function finish() {
  clearTimeout(overall);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

try {
  const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
  const client = new Client({ name: "ts-connect-host", version: "0" }, { capabilities: {} });
  await client.connect(transport);
  const sv = client.getServerVersion();
  report(!!sv, "initialize", `server=${JSON.stringify(sv)}`);

  const tools = (await client.listTools()).tools.map((t) => t.name);
  report(tools.includes("echo") && tools.includes("slow"), "tools/list", `tools=${tools}`);

  const e = await client.callTool({ name: "echo", arguments: { text: "hi from ts ✓" } });
  report(text(e) === "hi from ts ✓", "echo", `text=${JSON.stringify(text(e))}`);

  const seen = [];
  const s = await client.callTool({ name: "slow", arguments: { seconds: 1, steps: 4 } }, undefined,
    { onprogress: (p) => seen.push(p.progress) });
  report(text(s) === "done" && seen.length >= 1, "progress", `result=${text(s)} progress=${seen}`);

  const before = count();
  const ac = new AbortController();
  const t0 = Date.now();
  setTimeout(() => ac.abort("test cancels"), 1500);
  let aborted = false;
  try {
    await client.callTool({ name: "slow", arguments: { seconds: 30, steps: 30 } }, undefined, { signal: ac.signal, timeout: 60000 });
  } catch { aborted = true; }
  report(aborted && Date.now() - t0 < 4000, "cancel", `aborted=${aborted} after ${(Date.now() - t0) / 1000}s`);
  if (remoteLog) {
    const until = Date.now() + 8000;
    while (count() <= before && Date.now() < until) await sleep(100);
    report(count() > before, "cancel reached the remote", `${needle} lines: ${before} -> ${count()}`);
  }
  const a = await client.callTool({ name: "echo", arguments: { text: "after" } });
  report(text(a) === "after", "call after cancel", `text=${text(a)}`);
  await client.close();
} catch (err) {
  report(false, "run", `aborted: ${err?.stack || err}`.slice(0, 500));
}
finish();
