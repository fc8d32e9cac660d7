// Drives trioq with the official TypeScript SDK: a Worker with `useLocks: false` (it pulls without
// an owner and settles with an empty token) processes a queue's jobs, one of them failing once,
// then Queue.getMetrics() reads the queue's per-minute counts and Ping's time must be a number.
// Prints one JSON line with what happened; exits non-zero on any failure.
import { Queue, Worker } from 'bunqueue/client';

const connection = { host: process.env.TRIOQ_HOST ?? '127.0.0.1', port: Number(process.env.TRIOQ_PORT) };
const name = `ts-nolocks-${Math.random().toString(16).slice(2, 10)}`;
const JOBS = 5;

const timer = setTimeout(() => {
  console.error('timed out');
  process.exit(2);
}, 30_000);

const queue = new Queue(name, { connection, embedded: false });
for (let n = 0; n < JOBS; n++) await queue.add('job', { n }, { attempts: 2, backoff: 1 });

const runs: number[] = [];
let failedOnce = false;
const done = new Promise<void>((resolve, reject) => {
  let completed = 0;
  const worker = new Worker(
    name,
    async (job) => {
      const n = (job.data as { n: number }).n;
      runs.push(n);
      if (n === 0 && !failedOnce) {
        failedOnce = true;
        throw new Error('first try fails');
      }
      return n * 2;
    },
    { connection, embedded: false, useLocks: false, concurrency: 2 },
  );
  worker.on('completed', () => {
    completed += 1;
    if (completed === JOBS) worker.close().then(resolve, reject);
  });
  worker.on('error', (err) => reject(err));
});
await done;

const counts = await queue.getJobCounts();
const completedMetrics = await queue.getMetrics('completed');
const failedMetrics = await queue.getMetrics('failed');
await queue.close();
clearTimeout(timer);
console.log(
  JSON.stringify({
    runs: runs.length,
    counts,
    completedMetrics,
    failedMetrics,
  }),
);
process.exit(0);
