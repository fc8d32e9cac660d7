// Interop with the trioq Python client (tests/client/test_interop.py).
//   MODE=produce: adds JOBS jobs {n} named 'from-ts' to QUEUE with queue.add; prints their ids.
//   MODE=consume: a Worker (concurrency 4) on QUEUE returns {doubled: n * 2, name} for each job
//                 until JOBS jobs completed; prints the names and data it saw.
// Prints one JSON line; exits non-zero on any failure.
import { Queue, Worker } from 'bunqueue/client';

const connection = { host: process.env.TRIOQ_HOST ?? '127.0.0.1', port: Number(process.env.TRIOQ_PORT) };
const name = process.env.QUEUE ?? 'interop';
const jobs = Number(process.env.JOBS ?? 5);

const timer = setTimeout(() => {
  console.error('timed out');
  process.exit(2);
}, 30_000);

if (process.env.MODE === 'produce') {
  const queue = new Queue(name, { connection, embedded: false });
  const ids: string[] = [];
  for (let n = 0; n < jobs; n++) ids.push((await queue.add('from-ts', { n }, { attempts: 2 })).id);
  await queue.close();
  console.log(JSON.stringify({ ids }));
} else {
  const seen: unknown[] = [];
  await new Promise<void>((resolve, reject) => {
    let completed = 0;
    const worker = new Worker(
      name,
      async (job) => {
        seen.push({ name: job.name, data: job.data });
        return { doubled: (job.data as { n: number }).n * 2, name: job.name };
      },
      { connection, embedded: false, concurrency: 4 },
    );
    worker.on('completed', () => {
      completed += 1;
      if (completed === jobs) worker.close().then(resolve, reject);
    });
    worker.on('error', (err) => reject(err));
  });
  console.log(JSON.stringify({ seen }));
}
clearTimeout(timer);
process.exit(0);
