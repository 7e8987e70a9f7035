/**
 * The dispatcher's one-at-a-time background work (src/delivery/serial-job.ts): a request while a run
 * is under way gets one more run after it, even one made as the run settles.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { SerialJob } from "../../src/delivery/serial-job.ts";

/** A job that counts its runs; `during` runs inside each run, before it ends. */
function counted(during: (run: number) => void = () => {}, canStart = () => true) {
  const failures: unknown[] = [];
  let runs = 0;
  const job: SerialJob = new SerialJob(
    async () => {
      runs++;
      during(runs);
    },
    { canStart, failed: (err) => failures.push(err) },
  );
  return { job, runs: () => runs, failures };
}

/** Waits until the job has no run under way, also one it started again. */
async function settled(job: SerialJob): Promise<void> {
  while (job.running) await job.running;
}

test("requests while a run is under way give one more run after it, not one each", async () => {
  let job!: SerialJob;
  const c = counted((run) => {
    if (run === 1) for (let i = 0; i < 3; i++) job.request();
  });
  job = c.job;
  job.request();
  await settled(job);
  assert.equal(c.runs(), 2);
});

test("a request made as a run settles, after its last look, gets a run of its own", async () => {
  let job!: SerialJob;
  // Queued inside the first run, so it runs once that run's body has returned, before the run settles.
  const c = counted((run) => {
    if (run === 1) queueMicrotask(() => job.request());
  });
  job = c.job;
  job.request();
  await settled(job);
  assert.equal(c.runs(), 2);
});

test("a job that may not start does nothing, and a failed run goes to its handler and lets the next start", async () => {
  let open = false;
  const idle = counted(undefined, () => open);
  idle.job.request();
  assert.equal(idle.job.running, undefined);
  assert.equal(idle.runs(), 0);
  open = true;
  idle.job.request();
  await settled(idle.job);
  assert.equal(idle.runs(), 1);

  const failing = counted((run) => {
    if (run === 1) throw new Error("store away");
  });
  failing.job.request();
  await settled(failing.job);
  assert.deepEqual(
    failing.failures.map((e) => (e as Error).message),
    ["store away"],
  );
  failing.job.request();
  await settled(failing.job);
  assert.equal(failing.runs(), 2);
});
