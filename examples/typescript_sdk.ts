// The official TypeScript SDK of bunqueue (npm `bunqueue`, run with Bun) against trioq.
//
//     cd examples && npm install && npx bun typescript_sdk.ts [HOST:PORT]   # default 127.0.0.1:6789
//
// (examples/package.json pins bunqueue 2.9.5 and bun, as tests/interop/ts does; in a project of
// your own: `bun add bunqueue`.) A Queue adds three emails to `emails`; a Worker runs them: it
// leases jobs (PULLB with a lock), sends ACK with the function's return value, and FAIL with the
// error and its stack when the function throws. One address is bad: its job is tried twice,
// 100 ms apart, and ends `failed`. The script waits for the three outcomes, closes the worker
// and prints each job's state. `embedded: false` makes the SDK talk TCP to a server instead of
// running bunqueue inside the process.
import { Queue, Worker } from 'bunqueue/client';

type Email = { to: string };

const [host, port] = (process.argv[2] ?? '127.0.0.1:6789').split(/:(?=\d+$)/);
const connection = { host, port: Number(port) };
const QUEUE = 'emails';

async function sendEmail(data: Email): Promise<{ sent: boolean; to: string }> {
  if (!data.to.includes('@')) throw new Error(`not an email address: '${data.to}'`);
  return { sent: true, to: data.to };
}

const timer = setTimeout(() => {
  console.error('the jobs did not finish in time');
  process.exit(2);
}, 30_000);

const queue = new Queue<Email>(QUEUE, { connection, embedded: false });
const addresses = ['ada@example.com', 'grace@example.com', 'nobody'];
const jobs = [];
for (const to of addresses) jobs.push(await queue.add('welcome', { to }, { attempts: 2, backoff: 100 }));
console.log(`pushed ${jobs.length} jobs to ${QUEUE}`);

const worker = new Worker<Email>(QUEUE, async (job) => sendEmail(job.data), {
  connection,
  embedded: false,
});
await new Promise<void>((resolve, reject) => {
  let finished = 0;
  const settled = () => {
    finished += 1;
    if (finished === jobs.length) resolve();
  };
  worker.on('completed', (job, result) => {
    console.log(`ACK  ${job.data.to}: ${JSON.stringify(result)}`);
    settled();
  });
  worker.on('failed', (job, error) => {
    const attempt = job.attemptsMade + 1;
    console.log(`FAIL ${job.data.to} (attempt ${attempt} of 2): ${error.message}`);
    if (attempt >= 2) settled();
  });
  worker.on('error', reject);
});
await worker.close();

for (const { id } of jobs) {
  const job = await queue.getJob(id);
  const state = await queue.getJobState(id);
  const outcome = state === 'completed' ? JSON.stringify(job?.returnvalue) : job?.failedReason;
  console.log(`${job?.data.to}: ${state}, ${outcome}`);
}
await queue.close();
clearTimeout(timer);
process.exit(0);
