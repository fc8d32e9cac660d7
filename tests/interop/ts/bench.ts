// Throughput of the official TypeScript SDK on a broker (benchmarks/clients.py runs it):
// N jobs added by 32 concurrent queue.add() loops, then N jobs (filled with addBulk, untimed)
// processed by one Worker of concurrency 50. Prints one JSON line: {add, process} jobs/s.
import { Queue, Worker } from 'bunqueue/client';

const connection = { host: process.env.TRIOQ_HOST ?? '127.0.0.1', port: Number(process.env.TRIOQ_PORT) };
const jobs = Number(process.env.BENCH_JOBS ?? 20000);
const adders = Number(process.env.BENCH_ADDERS ?? 32);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 50);
const tag = Math.random().toString(16).slice(2, 10);

const addQueue = new Queue(`bench-ts-add-${tag}`, { connection, embedded: false });
let start = performance.now();
await Promise.all(
  Array.from({ length: adders }, async () => {
    for (let n = 0; n < jobs / adders; n++) await addQueue.add('job', { n });
  }),
);
const add = (Math.floor(jobs / adders) * adders) / ((performance.now() - start) / 1000);

const name = `bench-ts-work-${tag}`;
const workQueue = new Queue(name, { connection, embedded: false });
for (let n = 0; n < jobs; n += 1000) {
  await workQueue.addBulk(Array.from({ length: Math.min(1000, jobs - n) }, (_, i) => ({ name: 'job', data: { n: n + i } })));
}
let processed = 0;
let worker: Worker;
const done = new Promise<void>((resolve) => {
  start = performance.now();
  worker = new Worker(name, async () => {
    processed += 1;
    if (processed === jobs) resolve();
    return null;
  }, { connection, embedded: false, concurrency });
});
await done;
const process_ = jobs / ((performance.now() - start) / 1000);
await worker!.close();
await addQueue.close();
await workQueue.close();
console.log(JSON.stringify({ add, process: process_ }));
process.exit(0);
