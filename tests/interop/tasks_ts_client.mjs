#!/usr/bin/env node
// Tasks through `mcp-bridge serve` (2025-11-25 experimental tasks): two official TypeScript SDK
// clients (npm @modelcontextprotocol/sdk@1.32.2), each its own 2025 session, in front of npm
// @modelcontextprotocol/server-everything, whose tool `simulate-research-query` runs as a task
// (execution.taskSupport "required", four one-second stages).
//
// Checked: session A's task-augmented tools/call creates a task whose id is the bridge's
// (`mb-...`, not the server's); A can get it, list it, read its result and cancel another; to
// session B (the same server process behind the bridge) A's tasks do not exist: tasks/get,
// tasks/result and tasks/cancel are -32602 and tasks/list leaves them out. A leaves one task
// running and ends its session (DELETE): the bridge then cancels it at the server.
//
// Usage: node tasks_ts_client.mjs URL
// Env: INTEROP_NODE_MODULES  node_modules holding the SDK (default: target/interop-eras-node/node_modules)
// Prints `PASS/FAIL tasks <check>: ...` per check and exactly `N passed, M failed` last; exit 1
// on any failure.

import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = resolve(process.env.INTEROP_NODE_MODULES ?? join(here, '../../target/interop-eras-node/node_modules'));
const sdk = (p) => import(pathToFileURL(join(nodeModules, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { CreateTaskResultSchema, CallToolResultSchema } = await sdk('types.js');

const args = process.argv.slice(2);
const url = args.find((a) => !a.startsWith('--'));
if (!url) {
  console.error('usage: node tasks_ts_client.mjs URL');
  process.exit(64);
}

let passed = 0;
let failed = 0;
const check = (name, ok, detail) => {
  if (ok) passed++;
  else failed++;
  console.log(`${ok ? 'PASS' : 'FAIL'} tasks ${name}: ${detail}`);
};
const deadline = (p, ms, what) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`${what}: no answer in ${ms} ms`)), ms))]);

async function connect(name) {
  const client = new Client({ name, version: '1.0.0' }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await deadline(client.connect(transport), 15000, `${name} connect`);
  return { client, transport };
}

const code = async (p) => {
  try {
    await deadline(p, 15000, 'request');
    return 'answered';
  } catch (e) {
    return e?.code ?? String(e?.message ?? e);
  }
};

const startTask = (client, topic) =>
  deadline(
    client.request(
      {
        method: 'tools/call',
        params: { name: 'simulate-research-query', arguments: { topic }, task: { ttl: 120000 } },
      },
      CreateTaskResultSchema,
    ),
    15000,
    'task-augmented tools/call',
  );

let a;
let b;
try {
  a = await connect('tasks-owner');
  b = await connect('tasks-stranger');
  check('sessions', a.transport.sessionId && b.transport.sessionId && a.transport.sessionId !== b.transport.sessionId, 'two sessions');

  const created = await startTask(a.client, 'bridges');
  const id = created?.task?.taskId ?? '';
  check('create', /^mb-[0-9a-f]{32}$/.test(id), `CreateTaskResult taskId ${JSON.stringify(id)} (the bridge's id)`);

  const got = await deadline(a.client.experimental.tasks.getTask(id), 15000, 'tasks/get');
  check('get', got.taskId === id && ['working', 'input_required', 'completed'].includes(got.status), `owner's tasks/get: ${got.taskId} ${got.status}`);

  const listA = await deadline(a.client.experimental.tasks.listTasks(), 15000, 'tasks/list');
  check('list-owner', listA.tasks.some((t) => t.taskId === id) && listA.tasks.every((t) => t.taskId.startsWith('mb-')), `owner's tasks/list: ${JSON.stringify(listA.tasks.map((t) => t.taskId))}`);

  const listB = await deadline(b.client.experimental.tasks.listTasks(), 15000, 'tasks/list');
  check('list-stranger', !listB.tasks.some((t) => t.taskId === id), `stranger's tasks/list: ${JSON.stringify(listB.tasks.map((t) => t.taskId))}`);

  const getB = await code(b.client.experimental.tasks.getTask(id));
  check('get-stranger', getB === -32602, `stranger's tasks/get: ${getB}`);
  const resB = await code(b.client.experimental.tasks.getTaskResult(id, CallToolResultSchema));
  check('result-stranger', resB === -32602, `stranger's tasks/result: ${resB}`);
  const cancelB = await code(b.client.experimental.tasks.cancelTask(id));
  check('cancel-stranger', cancelB === -32602, `stranger's tasks/cancel: ${cancelB}`);

  const result = await deadline(a.client.experimental.tasks.getTaskResult(id, CallToolResultSchema), 30000, 'tasks/result');
  const text = (result.content ?? []).map((c) => c.text ?? '').join(' ').replace(/\s+/g, ' ');
  const related = result._meta?.['io.modelcontextprotocol/related-task']?.taskId;
  check('result', text.includes('bridges') && (related === undefined || related === id), `owner's tasks/result: ${text.slice(0, 60)}... related-task ${related}`);

  const done = await deadline(a.client.experimental.tasks.getTask(id), 15000, 'tasks/get');
  check('completed', done.status === 'completed', `status after the result: ${done.status}`);

  const second = await startTask(a.client, 'cancel me');
  const id2 = second?.task?.taskId ?? '';
  const cancelled = await deadline(a.client.experimental.tasks.cancelTask(id2), 15000, 'tasks/cancel');
  check('cancel', cancelled.taskId === id2 && cancelled.status === 'cancelled', `owner's tasks/cancel: ${cancelled.taskId} ${cancelled.status}`);

  const unknown = await code(a.client.experimental.tasks.getTask('mb-00000000000000000000000000000000'));
  check('unknown', unknown === -32602, `an id the bridge never gave: ${unknown}`);

  // Left running when session A ends below: the bridge cancels it at the server
  // (.ci/interop-eras.sh checks the bridge's log for it).
  const left = await startTask(a.client, 'left behind');
  check('left-running', /^mb-/.test(left?.task?.taskId ?? ''), `a task left running: ${left?.task?.taskId}`);
} catch (e) {
  check('run', false, `${e?.stack ?? e}`);
} finally {
  for (const c of [a, b]) {
    try {
      await c?.transport.terminateSession();
      await c?.client.close();
    } catch {}
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
