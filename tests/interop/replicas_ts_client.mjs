#!/usr/bin/env node
// Replicas interop (issue 14): several official MCP TypeScript SDK clients (npm
// @modelcontextprotocol/sdk@1.32.2, 2025 eras only: initialize, Mcp-Session-Id, GET stream,
// server->client requests on SSE) at once against mcp-bridge replicas behind a plain
// round-robin balancer (.ci/replicas.sh), normally replicas of `serve --demo --demo-era modern`.
//
// Usage: node replicas_ts_client.mjs URL [--clients N] [--rounds R] [--duration S] [--pause S]
//                                        [--elicit] [--reconnect] [--tag T]
//                                        [--call-timeout S]
// Env: INTEROP_NODE_MODULES  node_modules holding the SDK (default: target/interop-eras-node/node_modules)
//
// Each client opens a 2025 session (minted, sealed, by whichever replica got the initialize),
// checks tools/list, then repeats rounds of
//   - tools/call echo {text: <unique>}: the answer must be exactly that text;
//   - with --elicit, tools/call elicit {message: <unique>}: in front of a 2026-era child the
//     bridge turns the child's input_required into a real elicitation/create on the call's SSE
//     stream (from the session's owner); the handler must see a message of a call this client has
//     in flight (else: foreign elicitation) and answers {name: "ans-<unique>"} with a POST that
//     lands on any replica and must be forwarded to the owner; the final text must be
//     `elicited: action=accept content={"name":"ans-<unique>"}`.
// Every request of a session after the initialize goes through the balancer to any replica, so
// most of them are forwarded.
//
// Without --reconnect any error fails. With --reconnect (replica killed mid-run) errors are
// counted by kind, and a client whose session is gone (404) or whose connection broke opens a
// new session and carries on; checks: no misdelivery, no foreign elicitation, only expected
// error kinds, every client ends with a successful round.
//
// Prints `FIGURES {...}`, PASS/FAIL lines, then exactly `N passed, M failed`; exit 1 on failure.

import { dirname, join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = resolve(process.env.INTEROP_NODE_MODULES ?? join(here, '../../target/interop-eras-node/node_modules'));
const sdk = (p) => import(pathToFileURL(join(nodeModules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { ElicitRequestSchema } = await sdk('types.js');

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const url = argv.find((a, i) => !a.startsWith('--') && (i === 0 || !['--clients', '--rounds', '--duration', '--pause', '--tag', '--call-timeout'].includes(argv[i - 1])));
const CLIENTS = Number(opt('--clients', '5'));
const ROUNDS = Number(opt('--rounds', '3'));
const DURATION = opt('--duration') !== undefined ? Number(opt('--duration')) : undefined;
const PAUSE = Number(opt('--pause', '0'));
const TAG = opt('--tag', 'ts');
const TIMEOUT_MS = Number(opt('--call-timeout', '30')) * 1000;
const ELICIT = argv.includes('--elicit');
const RECONNECT = argv.includes('--reconnect');
if (!url) {
  console.error('usage: node replicas_ts_client.mjs URL [--clients N] [--rounds R] [--duration S] [--pause S] [--elicit] [--reconnect] [--tag T]');
  process.exit(2);
}
const EXPECTED_KINDS = new Set(['session_gone_404', 'http_502', 'http_503', 'http_504', 'connection', 'timeout', 'stream_broken', 'mcp_error']);

const stats = {
  calls_ok: 0, elicitations_ok: 0, lists_ok: 0, connects: 0, reconnects: 0,
  errors: {}, samples: {}, mismatches: [], foreign: [], versions: {}, healthyAtEnd: 0,
};
const clip = (s, n = 300) => {
  s = String(s).replace(/\n/g, '\\n');
  return s.length <= n ? s : `${s.slice(0, n)}...`;
};
const classify = (e) => {
  const msg = String(e?.message ?? e);
  const code = e?.code;
  if (code === 404 || /\b404\b/.test(msg) || /session not found/i.test(msg)) return 'session_gone_404';
  for (const c of [502, 503, 504]) if (code === c || msg.includes(String(c))) return `http_${c}`;
  if (/timed? ?out|timeout/i.test(msg) || code === -32001) return 'timeout';
  if (/fetch failed|ECONNREFUSED|ECONNRESET|socket|other side closed|network/i.test(msg + String(e?.cause?.code ?? '') + String(e?.cause?.message ?? ''))) return 'connection';
  if (/terminated|aborted|stream/i.test(msg)) return 'stream_broken';
  if (typeof code === 'number' && code < 0) return 'mcp_error';
  return e?.name ?? 'Error';
};
const countError = (kind, detail) => {
  stats.errors[kind] = (stats.errors[kind] ?? 0) + 1;
  stats.samples[kind] ??= clip(detail);
};

async function oneClient(idx, deadline) {
  const tag = `${TAG}-c${idx}`;
  const pending = new Set();
  let rnd = 0;
  let healthy = false;
  let attempts = 0;
  const more = () => (deadline !== undefined ? performance.now() < deadline : rnd < ROUNDS);
  while (more()) {
    if (++attempts > ROUNDS * 4 + 200) {
      countError('gave_up', `${tag}: too many attempts`);
      break;
    }
    const client = new Client({ name: `mcp-bridge-replicas-${tag}`, version: '1.0.0' }, { capabilities: ELICIT ? { elicitation: { form: {} } } : {} });
    if (ELICIT) {
      client.setRequestHandler(ElicitRequestSchema, async (request) => {
        const m = request.params.message;
        if (!pending.has(m)) {
          stats.foreign.push(`${tag} got ${JSON.stringify(m)}, has ${JSON.stringify([...pending])}`);
          return { action: 'decline' };
        }
        return { action: 'accept', content: { name: `ans-${m}` } };
      });
    }
    // Stream reconnection off: a GET stream that breaks with its replica is not retried for long.
    const transport = new StreamableHTTPClientTransport(new URL(url), {
      reconnectionOptions: { initialReconnectionDelay: 200, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1.5, maxRetries: 1 },
    });
    let lastErr = null;
    client.onerror = (e) => {
      lastErr = e;
    };
    try {
      await client.connect(transport, { timeout: TIMEOUT_MS });
      stats.connects++;
      if (stats.connects > CLIENTS) stats.reconnects++;
      const pv = transport.protocolVersion ?? 'none';
      stats.versions[pv] = (stats.versions[pv] ?? 0) + 1;
      const names = (await client.listTools(undefined, { timeout: TIMEOUT_MS })).tools.map((t) => t.name);
      if (!names.includes('echo') || (ELICIT && !names.includes('elicit'))) stats.mismatches.push(`${tag} tools/list: ${JSON.stringify(names)}`);
      else stats.lists_ok++;
      while (more()) {
        rnd++;
        healthy = false;
        const text = `${tag}-r${rnd}-${randomUUID()}`;
        const res = await client.callTool({ name: 'echo', arguments: { text } }, undefined, { timeout: TIMEOUT_MS });
        const got = (res.content ?? []).filter((b) => b.type === 'text').map((b) => b.text);
        if (res.isError || got.length !== 1 || got[0] !== text) stats.mismatches.push(`${tag} echo ${text} -> ${JSON.stringify(got)}`);
        else stats.calls_ok++;
        if (ELICIT) {
          const m = `q-${tag}-r${rnd}-${randomUUID().slice(0, 12)}`;
          pending.add(m);
          let r;
          try {
            r = await client.callTool({ name: 'elicit', arguments: { message: m } }, undefined, { timeout: TIMEOUT_MS });
          } finally {
            pending.delete(m);
          }
          const t = (r.content ?? []).filter((b) => b.type === 'text').map((b) => b.text);
          const prefix = 'elicited: action=accept content=';
          let ok = false;
          if (!r.isError && t.length === 1 && t[0].startsWith(prefix)) {
            try {
              ok = JSON.stringify(JSON.parse(t[0].slice(prefix.length))) === JSON.stringify({ name: `ans-${m}` });
            } catch {}
          }
          if (ok) stats.elicitations_ok++;
          else stats.mismatches.push(`${tag} elicit ${m} -> ${JSON.stringify(t)} isError=${!!r.isError}`);
        }
        healthy = true;
        if (PAUSE) await new Promise((res2) => setTimeout(res2, PAUSE * 1000));
      }
      try {
        await transport.terminateSession();
      } catch (e) {
        // The session's owner may be gone by now; not a call error.
        if (!RECONNECT) countError(`delete_${classify(e)}`, `${tag}: DELETE: ${e?.message}`);
      }
      await client.close();
    } catch (e) {
      healthy = false;
      countError(classify(e), `${tag}: ${e?.name} ${e?.code ?? ''}: ${e?.message}${lastErr ? ` (transport: ${lastErr?.message})` : ''}`);
      try {
        await client.close();
      } catch {}
      if (!RECONNECT) break;
      await new Promise((res2) => setTimeout(res2, 200));
    }
  }
  if (healthy) stats.healthyAtEnd++;
}

const started = performance.now();
const deadline = DURATION !== undefined ? started + DURATION * 1000 : undefined;
await Promise.all(Array.from({ length: CLIENTS }, (_, i) => oneClient(i, deadline)));
const secs = (performance.now() - started) / 1000;

console.log(`FIGURES ${JSON.stringify({
  client: 'ts/2025', tag: TAG, clients: CLIENTS, seconds: Number(secs.toFixed(2)), calls_ok: stats.calls_ok,
  elicitations_ok: stats.elicitations_ok, lists_ok: stats.lists_ok, connects: stats.connects, reconnects: stats.reconnects,
  errors: stats.errors, mismatches: stats.mismatches.length, foreign_elicitations: stats.foreign.length, protocol_versions: stats.versions,
})}`);
for (const [k, v] of Object.entries(stats.samples)) console.log(`  error sample [${k}]: ${v}`);

let passed = 0;
let failed = 0;
const report = (ok, name, detail) => {
  console.log(`${ok ? 'PASS' : 'FAIL'} ts/2025/${TAG} ${name}: ${detail}`);
  if (ok) passed++;
  else failed++;
};
const pvs = Object.keys(stats.versions);
report(pvs.length > 0 && pvs.every((v) => v.startsWith('2025-')), 'era', `protocol versions ${JSON.stringify(stats.versions)} (want 2025 sessions)`);
report(stats.mismatches.length === 0, 'no misdelivery',
  stats.mismatches.length ? `${stats.mismatches.length} wrong answers; first: ${JSON.stringify(stats.mismatches.slice(0, 3))}` :
    `0 wrong answers over ${stats.calls_ok} echo + ${stats.elicitations_ok} elicit calls`);
if (ELICIT) report(stats.foreign.length === 0, 'no foreign elicitation', `${stats.foreign.length}${stats.foreign.length ? `; first: ${JSON.stringify(stats.foreign.slice(0, 3))}` : ''}`);
if (RECONNECT) {
  const unexpected = Object.fromEntries(Object.entries(stats.errors).filter(([k]) => !EXPECTED_KINDS.has(k)));
  report(Object.keys(unexpected).length === 0, 'errors of expected kinds only', `errors=${JSON.stringify(stats.errors)} unexpected=${JSON.stringify(unexpected)}`);
  report(stats.healthyAtEnd === CLIENTS && stats.calls_ok > 0, 'every client ends healthy',
    `${stats.healthyAtEnd}/${CLIENTS} clients' last round succeeded; ${stats.reconnects} reconnects; ${stats.calls_ok} echo + ${stats.elicitations_ok} elicit calls ok`);
} else {
  const want = CLIENTS * ROUNDS;
  report(Object.keys(stats.errors).length === 0, 'no errors', `errors=${JSON.stringify(stats.errors)}`);
  report(stats.calls_ok === want && (!ELICIT || stats.elicitations_ok === want) && stats.lists_ok === CLIENTS, 'all calls ok',
    `${stats.lists_ok} lists, ${stats.calls_ok} echo, ${stats.elicitations_ok} elicit (want ${CLIENTS}, ${want}, ${ELICIT ? want : 0})`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
