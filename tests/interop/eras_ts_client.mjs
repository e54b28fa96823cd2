#!/usr/bin/env node
// Era-translation interop: the official MCP TypeScript SDK client (npm
// @modelcontextprotocol/sdk@1.32.2, which speaks only the 2025 eras: initialize, Mcp-Session-Id,
// server->client requests on SSE) completes a form-mode elicitation through `mcp-bridge serve`
// in front of a 2026-era stdio server. The child answers `tools/call` with
// `resultType: "input_required"`; the bridge must turn each `inputRequests` entry into a real
// `elicitation/create` request on the call's SSE stream, take the client's JSON-RPC response
// (POST, 202), retry the child with `inputResponses` + the exact `requestState`, and deliver
// the final result on the same stream.
//
// Usage: node eras_ts_client.mjs URL --target python|demo|everything [--trace]
//   python  child = tests/interop/eras_modern_server.py (Python SDK MCPServer on stdio, 2026):
//           tool `ask {question}` -> `answer: action=accept name=<name> color=<color>`
//   demo    child = `serve --demo --demo-era modern`: tool `elicit {message}`
//           -> `elicited: action=accept content=<content as JSON>`
// Env: INTEROP_NODE_MODULES  node_modules holding the SDK (default: target/interop-eras-node/node_modules)
//
// Prints `PASS/FAIL <target> <check>: ...` per check and exactly `N passed, M failed` last;
// exit 1 on any failure. A failing check dumps its HTTP exchange to stderr (--trace: live).

import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = resolve(process.env.INTEROP_NODE_MODULES ?? join(here, '../../target/interop-eras-node/node_modules'));
const sdk = (p) => import(pathToFileURL(join(nodeModules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { ElicitRequestSchema, LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } = await sdk('types.js');
const sdkVersion = (await import(pathToFileURL(join(nodeModules, '@modelcontextprotocol/sdk/package.json')).href, { with: { type: 'json' } })).default.version;

const args = process.argv.slice(2);
const url = args.find((a) => !a.startsWith('--'));
const ti = args.indexOf('--target');
const target = ti >= 0 ? args[ti + 1] : undefined;
const live = args.includes('--trace');
const NAME = 'Grace Hopper \u2013 \u00e9re 2025';
const TARGETS = {
  python: {
    tool: 'ask',
    args: { question: 'Who are you? (typescript sdk, 2025)' },
    message: 'Who are you? (typescript sdk, 2025)',
    content: { name: NAME, color: 'teal' },
    expect: (t) => t === `answer: action=accept name=${NAME} color=teal`,
  },
  // npm @modelcontextprotocol/server-everything (2025-era) over its own streamableHttp
  // transport, behind `serve --upstream` (.ci/interop-upstream.sh).
  everything: {
    tool: 'trigger-elicitation-request',
    args: {},
    message: 'Please provide inputs for the following fields:',
    content: { name: NAME, check: true, integer: 7 },
    expect: (t) => t.includes('User provided the requested information') && t.includes(`- Name: ${NAME}`),
  },
  demo: {
    tool: 'elicit',
    args: { message: 'What is your name? (typescript sdk, 2025)' },
    message: 'What is your name? (typescript sdk, 2025)',
    content: { name: NAME },
    expect: (t) => {
      const prefix = 'elicited: action=accept content=';
      if (!t.startsWith(prefix)) return false;
      try {
        return JSON.stringify(JSON.parse(t.slice(prefix.length))) === JSON.stringify({ name: NAME });
      } catch {
        return false;
      }
    },
  },
};
if (!url || !TARGETS[target]) {
  console.error('usage: node eras_ts_client.mjs URL --target python|demo|everything [--trace]');
  process.exit(2);
}
const spec = TARGETS[target];

// ------------------------------------------------------------------ HTTP trace (custom fetch)
const T0 = performance.now();
const lines = [];
const requests = []; // {n, method, msg, status, contentType, body}
const clip = (s, n = 700) => {
  s = String(s).replace(/\r/g, '\\r').replace(/\n/g, '\\n');
  return s.length <= n ? s : `${s.slice(0, n)}...(+${s.length - n} chars)`;
};
const note = (line) => {
  line = `[${((performance.now() - T0) / 1000).toFixed(3).padStart(7)}] ${line}`;
  lines.push(line);
  if (live) console.error(line);
};
const SHOWN = ['content-type', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id'];
const showHeaders = (h) => SHOWN.filter((k) => h.get(k)).map((k) => `${k}=${JSON.stringify(h.get(k))}`).join(' ');

async function tracingFetch(input, init = {}) {
  const n = requests.length + 1;
  const method = init.method ?? 'GET';
  const body = typeof init.body === 'string' ? init.body : '';
  let msg = null;
  try {
    msg = body ? JSON.parse(body) : null;
  } catch {}
  const rec = { n, method, msg, status: null, contentType: null, body: '' };
  requests.push(rec);
  note(`#${n} >>> ${method} ${new URL(String(input)).pathname} ${showHeaders(new Headers(init.headers))} ${clip(body)}`);
  let resp;
  try {
    resp = await fetch(input, init);
  } catch (e) {
    note(`#${n} !!! ${e?.name}: ${e?.message}`);
    throw e;
  }
  rec.status = resp.status;
  rec.contentType = resp.headers.get('content-type');
  note(`#${n} <<< HTTP ${resp.status} ${showHeaders(resp.headers)}`);
  if (!resp.body) return resp;
  const [mine, theirs] = resp.body.tee();
  (async () => {
    const dec = new TextDecoder();
    const reader = mine.getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const s = dec.decode(value, { stream: true });
        rec.body += s;
        note(`#${n} <<< ${clip(s)}`);
      }
      note(`#${n} <<< (server ended the body)`);
    } catch (e) {
      note(`#${n} --- body ended: ${e?.name}`);
    }
  })();
  return new Response(theirs, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
}

const sseMessages = (text) => {
  const out = [];
  for (const ev of text.replace(/\r\n/g, '\n').split('\n\n')) {
    const data = ev.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
    if (data) {
      try {
        out.push(JSON.parse(data));
      } catch {}
    }
  }
  return out;
};
const messagesOf = (rec) => {
  if ((rec.contentType ?? '').includes('text/event-stream')) return sseMessages(rec.body);
  try {
    const v = JSON.parse(rec.body);
    return Array.isArray(v) ? v : [v];
  } catch {
    return [];
  }
};

// ------------------------------------------------------------------ checks
let passed = 0;
let failed = 0;
const report = (ok, name, detail, mark) => {
  console.log(`${ok ? 'PASS' : 'FAIL'} ts2025/${target} ${name}: ${detail}`);
  if (ok) passed++;
  else {
    failed++;
    if (mark !== undefined && !live) {
      console.error(`---- HTTP exchange during '${name}' (${target}) ----`);
      for (const l of lines.slice(mark).slice(-80)) console.error(`    ${l}`);
      console.error('---- end ----');
    }
  }
  return ok;
};
const check = async (name, fn, timeoutMs = 30000) => {
  const mark = lines.length;
  let ok;
  let detail;
  let timer;
  try {
    [ok, detail] = await Promise.race([
      fn(),
      new Promise((_, rej) => (timer = setTimeout(() => rej(new Error(`no answer within ${timeoutMs / 1000}s (hung)`)), timeoutMs))),
    ]);
  } catch (e) {
    ok = false;
    detail = `${e?.name ?? 'Error'}${e?.code !== undefined ? ` ${e.code}` : ''}: ${clip(e?.message ?? e, 500)}`;
  } finally {
    clearTimeout(timer);
  }
  return report(ok, name, detail, mark);
};

const asked = [];
const client = new Client({ name: 'mcp-bridge-interop-eras', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  note(`--- elicitation handler: ${clip(JSON.stringify(request.params), 300)}`);
  return { action: 'accept', content: spec.content };
});
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: tracingFetch });

const connected = await check('connect', async () => {
  await client.connect(transport);
  const pv = transport.protocolVersion;
  const ok = SUPPORTED_PROTOCOL_VERSIONS.includes(pv) && !!transport.sessionId && pv !== '2026-07-28';
  return [ok, `sdk ${sdkVersion}; protocolVersion=${pv} (latest 2025 offered: ${LATEST_PROTOCOL_VERSION}) ` +
    `session=${transport.sessionId ? `${transport.sessionId.length} chars` : 'none'} ` +
    `server=${JSON.stringify(client.getServerVersion()?.name)}`];
});

if (connected) {
  await check('tools/list', async () => {
    const names = (await client.listTools()).tools.map((t) => t.name);
    return [names.includes(spec.tool), `${JSON.stringify(spec.tool)} in tools=${JSON.stringify(names)}`];
  });

  const first = requests.length;
  const callMark = lines.length;
  const roundTrip = await check('elicitation round trip', async () => {
    const res = await client.callTool({ name: spec.tool, arguments: spec.args });
    const texts = (res.content ?? []).filter((b) => b.type === 'text').map((b) => b.text);
    const ok = !res.isError && texts.length >= 1 && spec.expect(texts.join('\n'));
    return [ok, `final result reflects the answer: isError=${!!res.isError} text=${JSON.stringify(texts.join('\n'))}`];
  });
  report(
    asked.length === 1 && asked[0].message === spec.message,
    'elicitation handler',
    `called ${asked.length}x (want 1) message=${JSON.stringify(asked[0]?.message)} mode=${JSON.stringify(asked[0]?.mode)} ` +
      `requestedSchema.properties=${JSON.stringify(Object.keys(asked[0]?.requestedSchema?.properties ?? {}))}` +
      (roundTrip ? '' : ' (round trip failed)'),
  );

  // On the wire: the tools/call POST got an SSE stream carrying an elicitation/create request
  // (bridge-minted id) before the final response; the client's answer was POSTed and got 202.
  await new Promise((r) => setTimeout(r, 200));
  const calls = requests.slice(first).filter((q) => q.msg?.method === 'tools/call');
  const call = calls[0];
  let detail = `${calls.length} tools/call POST(s)`;
  let ok = false;
  if (call) {
    const msgs = messagesOf(call);
    const reqs = msgs.filter((m) => m.method === 'elicitation/create' && m.id !== undefined);
    const finalIdx = msgs.findIndex((m) => m.id === call.msg.id && (m.result || m.error));
    const reqIdx = msgs.findIndex((m) => m.method === 'elicitation/create');
    const answers = requests.slice(first).filter((q) => q.msg && q.msg.method === undefined && reqs.some((r) => r.id === q.msg.id));
    ok = calls.length === 1 && call.status === 200 && (call.contentType ?? '').includes('text/event-stream') &&
      reqs.length === 1 && reqIdx >= 0 && finalIdx > reqIdx && answers.length === 1 && answers[0].status === 202 &&
      answers[0].msg.result?.action === 'accept' && msgs[finalIdx].result?.resultType !== 'input_required';
    detail = `POST tools/call id=${JSON.stringify(call.msg.id)} -> HTTP ${call.status} ${call.contentType}; stream: ` +
      `${msgs.map((m) => m.method ?? (m.id === call.msg.id ? 'final response' : `response id=${JSON.stringify(m.id)}`)).join(' -> ')}; ` +
      `elicitation/create id(s)=${JSON.stringify(reqs.map((r) => r.id))}; answer POST(s) -> ` +
      `${JSON.stringify(answers.map((a) => a.status))} (want [202]); final resultType=${JSON.stringify(msgs[finalIdx]?.result?.resultType)}`;
  }
  report(ok, 'on the wire', detail, callMark);

  await check('disconnect', async () => {
    await transport.terminateSession();
    const del = requests.filter((q) => q.method === 'DELETE');
    await client.close();
    const st = del.map((d) => d.status);
    return [st.length === 1 && st[0] >= 200 && st[0] < 300, `DELETE session -> ${JSON.stringify(st)}`];
  });
} else {
  for (const n of ['tools/list', 'elicitation round trip', 'elicitation handler', 'on the wire', 'disconnect']) report(false, n, 'skipped: not connected');
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
