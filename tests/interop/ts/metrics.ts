// Reads trioq's Prometheus text through the official TypeScript SDK's TCP pool (the `Prometheus`
// command, as the reference's own tooling sends it) after a Queue added jobs, and reports the
// reference's metric names it found. Prints one JSON line; exits non-zero on any failure.
import { Queue, TcpConnectionPool } from 'bunqueue/client';

const connection = { host: process.env.TRIOQ_HOST ?? '127.0.0.1', port: Number(process.env.TRIOQ_PORT) };
// Sorted first among the shared broker's queues: per-queue series stop at 100 queues, by name.
const name = `0-ts-metrics-${Math.random().toString(16).slice(2, 10)}`;

const timer = setTimeout(() => {
  console.error('timed out');
  process.exit(2);
}, 30_000);

const queue = new Queue(name, { connection, embedded: false });
await queue.add('plain', { n: 1 });
await queue.add('plain', { n: 2 });
await queue.add('urgent', { n: 3 }, { priority: 7 });
await queue.add('later', { n: 4 }, { delay: 600_000 });

const pool = new TcpConnectionPool({ ...connection, poolSize: 1 });
await pool.connect();
const reply = (await pool.send({ cmd: 'Prometheus' })) as { ok: boolean; data: { metrics: string } };
const samples: Record<string, number> = {};
for (const line of reply.data.metrics.split('\n')) {
  if (!line || line.startsWith('#')) continue;
  const cut = line.lastIndexOf(' ');
  samples[line.slice(0, cut)] = Number(line.slice(cut + 1));
}
pool.close();
await queue.close();
clearTimeout(timer);
console.log(JSON.stringify({ queue: name, samples }));
process.exit(0);
