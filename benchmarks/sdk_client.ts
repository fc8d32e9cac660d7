// One timed row of `python -m benchmarks.sdk`, driven through the official TypeScript SDK
// (npm `bunqueue`, run with bun). The harness starts this script once per row and talks to it
// over stdin/stdout, so it can read the server's CPU time exactly around the timed part:
//
//   argv: <row> <host> <port> <queue> <jobs>     row: add | bulk | process
//   this script: sets up its Queue (and connections), prints `ready`
//   harness:     reads the server's CPU time, writes one line (`go`)
//   this script: runs the timed part, prints one JSON line {jobs, seconds, ...}
//   harness:     reads the server's CPU time again; this script closes and exits
//
// The SDK is loaded from the path in $BUNQUEUE_CLIENT (the interop test's npm install in
// tests/interop/ts), so this file can live in benchmarks/.
//
// The workload is that of the reference's published comparison: a Queue with `poolSize: 32` and
// 32 parallel add()s (the SDK's AddBatcher turns them into PUSHBs); addBulk() of 100 jobs awaited
// one after another; addBulk pushes then a Worker of concurrency 50, batchSize 20 and no
// heartbeats processing them (PULLB, ACKB through its AckBatcher, an event subscription).
// Every row checks what it measures: every job gets an id, all ids differ, every job completes once.

const { Queue, Worker } = await import(process.env.BUNQUEUE_CLIENT!);

const [row, host, portText, queueName, jobsText] = process.argv.slice(2);
const port = Number(portText);
const jobs = Number(jobsText);
const PAYLOAD = { data: 'x'.repeat(100) };
const PARALLEL = 32;
const BULK = 100;

function fail(message: string): never {
  console.error(message);
  process.exit(1);
}

if (!['add', 'bulk', 'process'].includes(row) || !(jobs > 0) || !(port > 0)) {
  fail(`usage: sdk_client.ts add|bulk|process HOST PORT QUEUE JOBS (got ${process.argv.slice(2)})`);
}

const connection = row === 'add' ? { host, port, poolSize: PARALLEL } : { host, port };
const queue = new Queue(queueName, { connection, embedded: false });

/** The ids of `count` jobs pushed with addBulk of BULK, one call after another. */
async function pushBulk(count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < count; start += BULK) {
    const size = Math.min(BULK, count - start);
    const batch = Array.from({ length: size }, (_, i) => ({
      name: 'bulk-job',
      data: { ...PAYLOAD, i: start + i },
    }));
    const added = await queue.addBulk(batch);
    if (added.length !== size) fail(`addBulk of ${size} returned ${added.length} jobs`);
    for (const job of added) ids.push(String(job.id));
  }
  return ids;
}

/** The ids of `count` jobs added by PARALLEL concurrent loops of `await queue.add()`. */
async function addParallel(count: number): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  const loop = async () => {
    while (next < count) {
      next += 1;
      const job = await queue.add('job', PAYLOAD);
      ids.push(String(job.id));
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, loop));
  return ids;
}

/** Push `count` jobs, then run a Worker until every one of them completed (once). */
async function pushAndProcess(count: number): Promise<{ ids: string[]; pushSeconds: number }> {
  const began = performance.now();
  const ids = await pushBulk(count);
  const pushSeconds = (performance.now() - began) / 1000;
  const completed = new Set<string>();
  let worker: { close: () => Promise<void> } | undefined;
  await new Promise<void>((resolve, reject) => {
    const w = new Worker(queueName, async () => undefined, {
      connection: { host, port },
      embedded: false,
      concurrency: 50,
      batchSize: 20,
      heartbeatInterval: 0,
    });
    worker = w;
    w.on('completed', (job: { id: unknown }) => {
      const id = String(job.id);
      if (completed.has(id)) reject(new Error(`job ${id} completed twice`));
      completed.add(id);
      if (completed.size === count) resolve();
    });
    w.on('failed', (job: { id: unknown }, err: Error) => reject(new Error(`job ${job.id} failed: ${err}`)));
    w.on('error', (err: Error) => reject(err));
  });
  lateClose.push(() => worker!.close());
  return { ids: [...completed], pushSeconds };
}

const lateClose: Array<() => Promise<void>> = [];

// Set-up outside the timed part: the connections are opened by a first command.
await queue.getJobCounts();
console.log('ready');
for await (const _ of console) break; // the harness's `go`

const began = performance.now();
let pushSeconds: number | undefined;
let ids: string[];
if (row === 'add') ids = await addParallel(jobs);
else if (row === 'bulk') ids = await pushBulk(jobs);
else ({ ids, pushSeconds } = await pushAndProcess(jobs));
const seconds = (performance.now() - began) / 1000;

const distinct = new Set(ids).size;
if (ids.length !== jobs || distinct !== jobs) {
  fail(`expected ${jobs} distinct job ids, got ${ids.length} (${distinct} distinct)`);
}
console.log(JSON.stringify({ jobs, seconds, pushSeconds }));

for (const close of lateClose) await close();
await queue.close();
process.exit(0);
