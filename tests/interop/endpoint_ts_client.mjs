#!/usr/bin/env node
// Aggregation-endpoint interop (issue 25): the official MCP TypeScript SDK client (npm
// @modelcontextprotocol/sdk@1.32.2, 2025 eras only: initialize, Mcp-Session-Id, requests of the
// client on the call's SSE stream) through one `[endpoints.team]` over server-everything (stdio
// `ev`, streamableHttp `evh`), the Python SDK server (`py`, 2026) and a paginating 2026 demo
// child (`demo`); see .ci/interop-endpoint.sh.
//
// Usage: node endpoint_ts_client.mjs URL [GUARDED_URL]
//   GUARDED_URL: an endpoint whose [[policy]] confirms `*__echo`: the endpoint's own approval
//   question (elicitation/create on the call's stream) is answered, then the call runs.
// Env: INTEROP_NODE_MODULES  node_modules holding the SDK
//
// Checks: a 2025 session; the merged tools/list over every page; a call on every member;
// elicitation inside a member's tool (2025 `ev`: the member's own request, renamed; 2026 `py`
// and `demo`: their input rounds as elicitation/create); sampling inside `ev`'s tool; a
// resources/subscribe on an `ev` resource that sees its updates. Prints `PASS/FAIL ts-2025
// <check>: ...` per check and exactly `N passed, M failed` last; exit 1 on any failure.

import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = resolve(process.env.INTEROP_NODE_MODULES ?? join(here, '../../target/interop-eras-node/node_modules'));
const sdk = (p) => import(pathToFileURL(join(nodeModules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { ElicitRequestSchema, CreateMessageRequestSchema, ResourceUpdatedNotificationSchema } = await sdk('types.js');

const url = process.argv[2];
const guardedUrl = process.argv[3];
if (!url) {
  console.error('usage: node endpoint_ts_client.mjs URL');
  process.exit(2);
}
const MEMBERS = ['ev', 'evh', 'py', 'demo'];
const NAME = 'Grace \u2013 endpoint';
const SAMPLED = 'sampled by the typescript client';
let passed = 0;
let failed = 0;
function report(ok, name, detail) {
  console.log(`${ok ? 'PASS' : 'FAIL'} ts-2025 ${name}: ${detail}`);
  if (ok) passed++;
  else failed++;
  return ok;
}
async function check(name, fn, ms = 45000) {
  let timer;
  try {
    const timeout = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`no answer within ${ms / 1000}s`)), ms); });
    const [ok, detail] = await Promise.race([fn(), timeout]);
    return report(ok, name, detail);
  } catch (e) {
    return report(false, name, `${e?.name ?? 'Error'}: ${String(e?.message ?? e).slice(0, 400)}`);
  } finally {
    clearTimeout(timer);
  }
}
const text = (r) => (r.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('\n');

const client = new Client({ name: 'mcp-bridge-interop-endpoint', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} }, sampling: {} } });
const approvals = [];
const onElicit = async (req) => {
  const m = req.params.message ?? '';
  if (m.startsWith('Allow the call to')) {
    approvals.push(m);
    return { action: 'accept' };
  }
  if (m.startsWith('Please provide inputs')) return { action: 'accept', content: { name: NAME, check: true, integer: 7 } };
  if (m.startsWith('Who are you')) return { action: 'accept', content: { name: NAME, color: 'teal' } };
  return { action: 'accept', content: { name: NAME } };
};
client.setRequestHandler(ElicitRequestSchema, onElicit);
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: 'assistant', content: { type: 'text', text: SAMPLED }, model: 'interop-model', stopReason: 'endTurn',
}));
const updates = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { updates.push(n.params.uri); });
const transport = new StreamableHTTPClientTransport(new URL(url));

const connected = await check('connect', async () => {
  await client.connect(transport);
  const pv = transport.protocolVersion;
  return [!!transport.sessionId && pv !== '2026-07-28' && client.getServerVersion()?.name === 'team',
    `protocol ${pv}, session ${transport.sessionId ? 'yes' : 'none'}, server ${client.getServerVersion()?.name}`];
});
if (connected) {
  await check('tools/list, every page', async () => {
    const names = [];
    let cursor;
    let pages = 0;
    do {
      const r = await client.listTools(cursor ? { cursor } : {});
      pages++;
      names.push(...r.tools.map((t) => t.name));
      cursor = r.nextCursor;
    } while (cursor && pages < 50);
    const by = Object.fromEntries(MEMBERS.map((m) => [m, names.filter((n) => n.startsWith(`${m}__`)).length]));
    const ok = pages > 1 && MEMBERS.every((m) => by[m] > 0) && new Set(names).size === names.length &&
      names.every((n) => MEMBERS.some((m) => n.startsWith(`${m}__`)));
    return [ok, `${names.length} tools in ${pages} pages, per member ${JSON.stringify(by)}`];
  });
  const calls = {
    ev: ['ev__echo', { message: 'hi ev' }, 'Echo: hi ev'],
    evh: ['evh__echo', { message: 'hi evh' }, 'Echo: hi evh'],
    py: ['py__echo', { text: 'hi py' }, 'hi py'],
    demo: ['demo__echo', { text: 'hi demo' }, 'hi demo'],
  };
  for (const [m, [tool, args, want]] of Object.entries(calls)) {
    await check(`call ${m}`, async () => {
      const r = await client.callTool({ name: tool, arguments: args });
      return [!r.isError && text(r).includes(want), `${tool} -> ${JSON.stringify(text(r).slice(0, 120))}`];
    });
  }
  const elicits = {
    ev: ['ev__trigger-elicitation-request', {}, `- Name: ${NAME}`],
    py: ['py__ask', { question: 'Who are you? (endpoint, ts)' }, `answer: action=accept name=${NAME} color=teal`],
    demo: ['demo__elicit', { message: 'name? (endpoint, ts)' }, 'elicited: action=accept'],
  };
  for (const [m, [tool, args, want]] of Object.entries(elicits)) {
    await check(`elicitation inside ${m}`, async () => {
      const r = await client.callTool({ name: tool, arguments: args });
      return [!r.isError && text(r).includes(want), `${tool} -> ${JSON.stringify(text(r).slice(0, 160))}`];
    });
  }
  await check('sampling inside ev', async () => {
    const r = await client.callTool({ name: 'ev__trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 20 } });
    return [!r.isError && text(r).includes(SAMPLED), `-> ${JSON.stringify(text(r).slice(0, 160))}`];
  });
  await check('resource subscription on ev', async () => {
    const res = await client.listResources();
    const uris = res.resources.map((r) => r.uri);
    const uri = uris.find((u) => u.includes('static')) ?? uris[0];
    if (!uri) return [false, 'no resources listed'];
    await client.subscribeResource({ uri });
    await client.callTool({ name: 'ev__toggle-subscriber-updates', arguments: {} });
    try {
      const t0 = Date.now();
      while (!updates.includes(uri) && Date.now() - t0 < 20000) await new Promise((r) => setTimeout(r, 200));
    } finally {
      await client.callTool({ name: 'ev__toggle-subscriber-updates', arguments: {} });
      await client.unsubscribeResource({ uri });
    }
    return [updates.includes(uri), `notifications/resources/updated for ${uri}: ${updates.length} seen`];
  }, 60000);
  if (guardedUrl) {
    const g = new Client({ name: 'mcp-bridge-interop-endpoint', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
    g.setRequestHandler(ElicitRequestSchema, onElicit);
    const gt = new StreamableHTTPClientTransport(new URL(guardedUrl));
    await g.connect(gt);
    for (const [tool, args, want] of [['ev__echo', { message: 'guarded' }, 'Echo: guarded'], ['demo__echo', { text: 'guarded' }, 'guarded']]) {
      await check(`confirm: approved, then ${tool.split('__')[0]} runs it`, async () => {
        const before = approvals.length;
        const r = await g.callTool({ name: tool, arguments: args });
        const asked = approvals.slice(before);
        const ok = !r.isError && text(r) === want && asked.length === 1 && asked[0].includes(`tool "${tool}"`);
        return [ok, `asked ${JSON.stringify(asked)}, then ${tool} -> ${JSON.stringify(text(r).slice(0, 80))}`];
      });
    }
    await gt.terminateSession();
    await g.close();
  }
  await check('disconnect', async () => {
    await transport.terminateSession();
    await client.close();
    return [true, 'DELETE session, closed'];
  });
} else {
  failed += 1;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
