// Drives trioq with the official TypeScript SDK: a FlowProducer graph (PUSHF), workers for the
// children and the parent, and the parent reading its children's results.
// Prints one JSON line with what happened; exits non-zero on any failure.
import { FlowProducer, Worker } from 'bunqueue/client';

const connection = { host: process.env.TRIOQ_HOST ?? '127.0.0.1', port: Number(process.env.TRIOQ_PORT) };
const suffix = Math.random().toString(16).slice(2, 10);
const parentQueue = `ts-parent-${suffix}`;
const childQueue = `ts-child-${suffix}`;
const order: string[] = [];

const timer = setTimeout(() => {
  console.error('timed out');
  process.exit(2);
}, 30_000);

const flows = new FlowProducer({ connection, embedded: false });
const root = await flows.add({
  name: 'release',
  queueName: parentQueue,
  data: { version: 'candidate' },
  children: [
    { name: 'unit', queueName: childQueue, data: { n: 1 } },
    { name: 'sdk', queueName: childQueue, data: { n: 2 } },
  ],
});

const workers: Worker[] = [];
let childValues: Record<string, unknown> = {};
const parentDone = new Promise<void>((resolve, reject) => {
  const parentWorker = new Worker(
    parentQueue,
    async (job) => {
      order.push(`parent:${job.name}`);
      childValues = await job.getChildrenValues();
      return 'released';
    },
    { connection, embedded: false },
  );
  parentWorker.on('completed', () => resolve());
  parentWorker.on('failed', (_job, err) => reject(err));
  workers.push(parentWorker);
});
const childWorker = new Worker(
  childQueue,
  async (job) => {
    order.push(`child:${job.name}`);
    return (job.data as { n: number }).n * 10;
  },
  { connection, embedded: false },
);
workers.push(childWorker);

await parentDone;
for (const worker of workers) await worker.close();
await flows.close();
clearTimeout(timer);
console.log(
  JSON.stringify({
    rootId: root.job.id,
    childIds: (root.children ?? []).map((child) => child.job.id),
    order,
    childValues,
  }),
);
process.exit(0);
