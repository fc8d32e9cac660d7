// Subscribes to every event type of the reference's catalogue that trioq publishes, on trioq's
// WebSocket (`{cmd: "Subscribe", events: [...]}`, as the reference's dashboard does), then makes
// each of them happen through the official TypeScript SDK: a Queue and a Worker for a job's life,
// its TCP pool for the queue, DLQ, cron, worker, webhook and config commands. Waits for the
// periodic ones (stats:snapshot every 5 s, health:status every 10 s). Prints one JSON line with
// the first message of each type; exits non-zero on any failure.
import { Queue, TcpConnectionPool, Worker } from 'bunqueue/client';

const host = process.env.TRIOQ_HOST ?? '127.0.0.1';
const connection = { host, port: Number(process.env.TRIOQ_PORT) };
const name = `ts-events-${Math.random().toString(16).slice(2, 10)}`;
const EVENTS = [
  'job:pushed', 'job:active', 'job:completed', 'job:failed', 'job:removed', 'job:progress',
  'job:promoted', 'job:discarded', 'job:priority-changed', 'job:data-updated', 'job:delay-changed',
  'queue:counts', 'queue:paused', 'queue:resumed', 'queue:drained', 'queue:cleaned',
  'queue:obliterated', 'cron:created', 'cron:deleted', 'dlq:added', 'dlq:purged', 'dlq:retry-all',
  'worker:connected', 'worker:disconnected', 'ratelimit:set', 'ratelimit:cleared', 'concurrency:set',
  'concurrency:cleared', 'webhook:added', 'webhook:removed', 'config:dlq-changed',
  'config:stall-changed', 'health:status', 'stats:snapshot',
];

const timer = setTimeout(() => {
  console.error(`timed out; missing: ${EVENTS.filter((e) => !(e in seen)).join(', ')}`);
  process.exit(2);
}, 40_000);

type Message = { event?: string; ts?: number; data?: Record<string, unknown>; ok?: boolean };
const seen: Record<string, { ts: number; data: Record<string, unknown> }> = {};
let allSeen: () => void = () => {};
const everything = new Promise<void>((resolve) => (allSeen = resolve));

const socket = new WebSocket(`ws://${host}:${process.env.TRIOQ_HTTP_PORT}/ws`);
await new Promise((resolve, reject) => {
  socket.onopen = resolve;
  socket.onerror = reject;
});
const subscribed = new Promise<Message>((resolve) => {
  socket.onmessage = (raw) => {
    const message = JSON.parse(String(raw.data)) as Message;
    if ('ok' in message) return resolve(message);
    if (message.event && !(message.event in seen)) {
      seen[message.event] = { ts: message.ts ?? 0, data: message.data ?? {} };
      if (EVENTS.every((event) => event in seen)) allSeen();
    }
  };
});
socket.send(JSON.stringify({ cmd: 'Subscribe', events: EVENTS }));
const reply = await subscribed;
if (reply.ok !== true) throw new Error(`Subscribe refused: ${JSON.stringify(reply)}`);

const pool = new TcpConnectionPool({ ...connection, poolSize: 1 });
await pool.connect();
const send = async (command: Record<string, unknown>) => {
  const answer = (await pool.send(command)) as { ok: boolean; error?: string };
  if (answer.ok !== true) throw new Error(`${command.cmd}: ${answer.error}`);
  return answer as Record<string, any>;
};

// A job's life through the SDK: pushed, active, progress, completed.
const queue = new Queue(name, { connection, embedded: false });
const worked = new Promise<void>((resolve, reject) => {
  const worker = new Worker(
    name,
    async (job) => {
      await job.updateProgress(50);
      return 'done';
    },
    { connection, embedded: false },
  );
  worker.on('completed', () => worker.close().then(resolve, reject));
  worker.on('error', reject);
});
await queue.add('hello', { n: 1 });
await worked;

// A delayed job moved about, then discarded (it fails at once).
const later = (await send({ cmd: 'PUSH', queue: name, name: 'later', data: {}, delay: 60_000 })).id;
await send({ cmd: 'ChangePriority', id: later, priority: 3 });
await send({ cmd: 'Update', id: later, data: { n: 2 } });
await send({ cmd: 'ChangeDelay', id: later, delay: 30_000 });
await send({ cmd: 'Promote', id: later });
await send({ cmd: 'Discard', id: later });

// The dead-letter queue: a failure, retried, failed again, purged.
const failing = `${name}-dlq`;
const bad = (await send({ cmd: 'PUSH', queue: failing, name: 'bad', data: {}, maxAttempts: 1 })).id;
for (const _ of [1, 2]) {
  await send({ cmd: 'PULL', queue: failing, timeout: 1000 });
  await send({ cmd: 'FAIL', id: bad, error: 'boom' });
  if (_ === 1) await send({ cmd: 'RetryDlq', queue: failing });
}
await send({ cmd: 'PurgeDlq', queue: failing });

// Queue controls and settings.
await send({ cmd: 'PUSH', queue: name, name: 'drained', data: {} });
await send({ cmd: 'Drain', queue: name });
await send({ cmd: 'Clean', queue: name, grace: 0, state: 'completed' });
await send({ cmd: 'Pause', queue: name });
await send({ cmd: 'Resume', queue: name });
await send({ cmd: 'RateLimit', queue: name, limit: 10 });
await send({ cmd: 'RateLimitClear', queue: name });
await send({ cmd: 'SetConcurrency', queue: name, limit: 2 });
await send({ cmd: 'ClearConcurrency', queue: name });
await send({ cmd: 'SetStallConfig', queue: name, config: { stallInterval: 30_000 } });
await send({ cmd: 'SetDlqConfig', queue: name, config: { maxEntries: 100 } });
await send({ cmd: 'Cron', name: `${name}-cron`, queue: name, schedule: '0 3 * * *' });
await send({ cmd: 'CronDelete', name: `${name}-cron` });
await send({ cmd: 'RegisterWorker', name: `${name}-worker`, queues: [name], hostname: 'ts', pid: 1 });
await send({ cmd: 'UnregisterWorker', workerId: `${name}-worker` });
const hook = await send({ cmd: 'AddWebhook', url: 'https://93.184.216.34/hook', events: ['job.completed'] });
await send({ cmd: 'RemoveWebhook', webhookId: hook.data.webhookId });
await send({ cmd: 'Obliterate', queue: failing });

await everything; // the snapshots come within 10 s
socket.close();
pool.close();
await queue.close();
clearTimeout(timer);
console.log(JSON.stringify({ queue: name, subscribed: reply, seen }));
process.exit(0);
