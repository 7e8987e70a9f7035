/**
 * The full flow against what bounds it, in one interleaved run (issue 29, point 1): a bare node:http
 * server, each build's ingest (a source that emits the request body, nothing subscribed) and each build's
 * full flow (the same source subscribed to a webhook on a receiver process of its own: HTTP hit →
 * component → stored → signed webhook received), the working tree against another commit. Then each
 * build's backlog drain, in turn: the webhook made inactive, emits queue parked deliveries, and the time
 * from reactivating it to the last delivery received is measured (as the `webhooks` part does).
 *
 *   node bench/flow.ts [--base HEAD] [--slices 4] [--slice 2] [--connections 50]
 *                      [--store sqlite|postgres] [--pg-url <url>] [--drains 2] [--backlog-s 4]
 */
import { parseArgs } from "node:util";
import { checkout } from "./lib/checkout.ts";
import { type InterleavedResult, interleavedLoads } from "./lib/interleave.ts";
import { runLoad } from "./lib/load.ts";
import { cpuMeter, FountProcess, HelperChild, sleep } from "./lib/processes.ts";
import { pollUntil } from "./lib/wait.ts";
import { createSchema, dropSchema, emitterCode, payloadText, urlWithSchema } from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    base: { type: "string", default: "HEAD" },
    slices: { type: "string", default: "4" },
    slice: { type: "string", default: "2" },
    connections: { type: "string", default: "50" },
    store: { type: "string", default: "sqlite" },
    drains: { type: "string", default: "2" },
    "backlog-s": { type: "string", default: "4" },
    "pg-url": {
      type: "string",
      default: process.env.FOUNT_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test",
    },
  },
});
if (values.store !== "sqlite" && values.store !== "postgres") {
  console.error(`--store must be sqlite or postgres, got ${values.store}`);
  process.exit(2);
}
const pgUrl = values["pg-url"];
const connections = Number(values.connections);
const schemas: string[] = [];
async function storeEnv(): Promise<Record<string, string>> {
  if (values.store !== "postgres") return {};
  const schema = await createSchema(pgUrl);
  schemas.push(schema);
  return { DATABASE_URL: urlWithSchema(pgUrl, schema) };
}

/** A Fount server with its emitter source; with a receiver, the source's events go to its webhook. */
interface Setup {
  name: string;
  server: FountProcess;
  url: string;
  receiver?: HelperChild;
  webhookId?: string;
}

const base = checkout(values.base);
const setups: Setup[] = [];
let bare: HelperChild | undefined;

/** The receiver's count once nothing more arrived for `quietMs`, or it reached `expected`. */
const received = async (receiver: HelperChild, expected = Number.POSITIVE_INFINITY, quietMs = 2_000) =>
  (
    await pollUntil(() => receiver.call<{ count: number }>("count"), {
      done: (r) => r.count >= expected,
      progress: (r) => r.count,
      quietMs,
      maxMs: 180_000,
      everyMs: 50,
    })
  ).count;

async function setup(name: string, root: string | undefined, flow: boolean): Promise<Setup> {
  const server = await FountProcess.start({ root, env: await storeEnv() });
  const source = await server.deploy(emitterCode("flow", false), "flow");
  const s: Setup = { name, server, url: source.endpointUrl };
  if (flow) {
    s.receiver = await HelperChild.start("receiver.ts");
    const { port } = await s.receiver.call<{ port: number }>("ready");
    const hook = await server.api("POST", "/v1/webhooks", { url: `http://127.0.0.1:${port}/hook` });
    s.webhookId = hook.data.id;
    await server.api("POST", "/v1/subscriptions", { emitter_id: source.id, listener_id: hook.data.id });
  }
  await runLoad({ url: s.url, body: payloadText, connections, durationS: 3 });
  if (s.receiver) {
    await received(s.receiver);
    await s.receiver.call("reset");
  }
  return s;
}

/** Queues a backlog of parked deliveries, reactivates the webhook, and times the drain (deliveries/s). */
async function drain(s: Setup): Promise<{ queued: number; rate: number; cpuUs: number }> {
  const receiver = s.receiver!;
  await receiver.call("reset");
  await s.server.api("PUT", `/v1/webhooks/${s.webhookId}`, { active: false });
  const backlog = await runLoad({
    url: s.url,
    body: payloadText,
    connections,
    durationS: Number(values["backlog-s"]),
  });
  await sleep(500);
  const from = Date.now();
  const meter = cpuMeter(s.server.pid);
  await s.server.api("PUT", `/v1/webhooks/${s.webhookId}`, { active: true });
  const got = await received(receiver, backlog.ok, 5_000);
  const cpu = meter();
  const r = await receiver.call<{ lastMs: number }>("report", {}, 30_000);
  return {
    queued: backlog.ok,
    rate: got / Math.max(0.001, (r.lastMs - from) / 1000),
    cpuUs: (1e6 * cpu.serverS) / Math.max(1, got),
  };
}

try {
  bare = await HelperChild.start("bare-server.ts");
  const { port } = await bare.call<{ port: number }>("ready");
  const bareUrl = `http://127.0.0.1:${port}/events/src1`;
  await runLoad({ url: bareUrl, body: payloadText, connections, durationS: 3 });
  setups.push(await setup(`ingest ${base.commit}`, base.root, false));
  setups.push(await setup("ingest work", undefined, false));
  setups.push(await setup(`flow ${base.commit}`, base.root, true));
  setups.push(await setup("flow work", undefined, true));
  const results = await interleavedLoads(
    [{ url: bareUrl, pid: bare.pid }, ...setups.map((s) => ({ url: s.url, pid: s.server.pid }))],
    { body: payloadText, connections, slices: Number(values.slices), sliceS: Number(values.slice) },
  );
  const [bareR, ...rs] = results as [InterleavedResult, ...InterleavedResult[]];
  const line = (name: string, r: InterleavedResult) =>
    `${name.padEnd(16)} ${Math.round(r.okPerS).toString().padStart(7)}/s  p50 ${r.latencyMs.p50.toFixed(1)} ms  p99 ${r.latencyMs.p99.toFixed(1)} ms  ` +
    `${((1e6 * r.cpu.serverS) / Math.max(1, r.ok)).toFixed(1)} µs server CPU/hit  slices ${r.sliceRates.join(" ")}`;
  console.log(line("bare node:http", bareR));
  for (const [i, s] of setups.entries()) console.log(line(s.name, rs[i]!));
  const [ingestBase, ingestWork, flowBase, flowWork] = rs as [
    InterleavedResult,
    InterleavedResult,
    InterleavedResult,
    InterleavedResult,
  ];
  for (const s of setups.slice(2)) {
    const hits = s === setups[2] ? flowBase.ok : flowWork.ok;
    console.log(`${s.name}: ${await received(s.receiver!)} deliveries received for ${hits} hits`);
  }
  const ratio = (a: InterleavedResult, b: InterleavedResult) => (a.okPerS / b.okPerS).toFixed(3);
  console.log(
    `base ${base.commit}: flow/bare ${ratio(flowBase, bareR)}, flow/ingest ${ratio(flowBase, ingestBase)}, ingest/bare ${ratio(ingestBase, bareR)}`,
  );
  console.log(
    `working tree: flow/bare ${ratio(flowWork, bareR)}, flow/ingest ${ratio(flowWork, ingestWork)}, ingest/bare ${ratio(ingestWork, bareR)}`,
  );
  console.log(
    `flow work/base ${ratio(flowWork, flowBase)}, ingest work/base ${ratio(ingestWork, ingestBase)}`,
  );
  const drains: Record<string, number[]> = { base: [], work: [] };
  const drainCpu: Record<string, number[]> = { base: [], work: [] };
  for (let i = 0; i < Number(values.drains); i++) {
    for (const [key, s] of i % 2 === 0
      ? ([
          ["base", setups[2]!],
          ["work", setups[3]!],
        ] as const)
      : ([
          ["work", setups[3]!],
          ["base", setups[2]!],
        ] as const)) {
      const d = await drain(s);
      drains[key]!.push(Math.round(d.rate));
      drainCpu[key]!.push(Math.round(d.cpuUs));
      console.log(
        `drain ${key}: ${d.queued} queued, ${Math.round(d.rate)}/s, ${Math.round(d.cpuUs)} µs server CPU per delivery`,
      );
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  console.log(
    `drain base ${drains.base!.join(" ")}/s, work ${drains.work!.join(" ")}/s, work/base ${(mean(drains.work!) / mean(drains.base!)).toFixed(2)}; ` +
      `server CPU per delivery base ${drainCpu.base!.join(" ")} µs, work ${drainCpu.work!.join(" ")} µs`,
  );
} finally {
  for (const s of setups) {
    await s.receiver?.stop();
    await s.server.stop();
  }
  await bare?.stop();
  for (const schema of schemas) await dropSchema(pgUrl, schema);
  base.remove();
}
