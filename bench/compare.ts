/**
 * Is this working tree faster than another commit at ingesting HTTP emits? Starts a Fount server from
 * each (the other from a temporary git worktree sharing this node_modules), deploys the bench's emitter
 * source on both, and loads them in alternating slices (bench/lib/interleave.ts), so the machine's drift
 * falls on both alike. Prints each one's rate, latency and CPU per hit, and the ratio.
 *
 *   node bench/compare.ts [--base HEAD] [--slices 6] [--slice 2] [--connections 50] [--node-args="…"]
 *                         [--store sqlite|postgres] [--pg-url <url>] [--webhook]
 *
 * `--webhook` subscribes a webhook to each server's source, on a receiver process of its own: every hit is
 * then also routed, delivered and settled (the full flow), and the output adds the deliveries received.
 *
 * `--node-args` are given to the working tree's server only, so the same commit compared with itself
 * measures a Node or V8 flag: `--base HEAD --node-args=--single-threaded-gc` (with `=`, as the value
 * starts with a dash).
 */
import { parseArgs } from "node:util";
import { checkout } from "./lib/checkout.ts";
import { type InterleavedResult, interleavedLoad } from "./lib/interleave.ts";
import { runLoad } from "./lib/load.ts";
import { FountProcess, HelperChild } from "./lib/processes.ts";
import { pollUntil } from "./lib/wait.ts";
import { createSchema, dropSchema, emitterCode, payloadText, urlWithSchema } from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    base: { type: "string", default: "HEAD" },
    slices: { type: "string", default: "6" },
    slice: { type: "string", default: "2" },
    connections: { type: "string", default: "50" },
    "node-args": { type: "string", default: "" },
    store: { type: "string", default: "sqlite" },
    webhook: { type: "boolean", default: false },
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
/** Schemas made for the servers (with --store postgres), dropped at the end. */
const schemas: string[] = [];
/** The environment of a server: on PostgreSQL, a fresh schema of its own. */
async function storeEnv(): Promise<Record<string, string>> {
  if (values.store !== "postgres") return {};
  const schema = await createSchema(pgUrl);
  schemas.push(schema);
  return { DATABASE_URL: urlWithSchema(pgUrl, schema) };
}
const connections = Number(values.connections);

const base = checkout(values.base);

const servers: FountProcess[] = [];
/** With --webhook, each server's receiver, in `servers` order. */
const receivers: HelperChild[] = [];
try {
  const baseServer = await FountProcess.start({ root: base.root, env: await storeEnv() });
  servers.push(baseServer);
  const work = await FountProcess.start({
    nodeArgs: values["node-args"].split(" ").filter(Boolean),
    env: await storeEnv(),
  });
  servers.push(work);
  const urls: string[] = [];
  for (const server of servers) {
    const source = await server.deploy(emitterCode("compare", false), "compare");
    if (values.webhook) {
      const receiver = await HelperChild.start("receiver.ts");
      receivers.push(receiver);
      const { port } = await receiver.call<{ port: number }>("ready");
      const hook = await server.api("POST", "/v1/webhooks", { url: `http://127.0.0.1:${port}/hook` });
      await server.api("POST", "/v1/subscriptions", { emitter_id: source.id, listener_id: hook.data.id });
    }
    await runLoad({ url: source.endpointUrl, body: payloadText, connections, durationS: 3 });
    urls.push(source.endpointUrl);
  }
  /** The deliveries a receiver got, once nothing more arrived for 2 s. */
  const settled = async (receiver: HelperChild) =>
    (
      await pollUntil(() => receiver.call<{ count: number }>("count"), {
        done: () => false,
        progress: (r) => r.count,
        quietMs: 2_000,
        maxMs: 120_000,
        everyMs: 200,
      })
    ).count;
  // The warm-up's deliveries are out before the measured slices start.
  for (const receiver of receivers) {
    await settled(receiver);
    await receiver.call("reset");
  }
  const [b, w] = await interleavedLoad(
    { url: urls[0]!, pid: baseServer.pid },
    { url: urls[1]!, pid: work.pid },
    { body: payloadText, connections, slices: Number(values.slices), sliceS: Number(values.slice) },
  );
  const line = (name: string, r: InterleavedResult) =>
    `${name.padEnd(14)} ${Math.round(r.okPerS).toString().padStart(7)}/s  p50 ${r.latencyMs.p50.toFixed(1)} ms  p99 ${r.latencyMs.p99.toFixed(1)} ms  ` +
    `${((1e6 * r.cpu.serverS) / r.ok).toFixed(1)} µs server CPU/hit  ` +
    (values.store === "postgres"
      ? `${((1e6 * r.cpu.postgresS) / r.ok).toFixed(1)} µs PostgreSQL CPU/hit  `
      : "") +
    `slices ${r.sliceRates.join(" ")}`;
  console.log(line(`base ${base.commit}`, b));
  console.log(line("working tree", w));
  if (receivers.length > 0) {
    const delivered = [];
    for (const receiver of receivers) delivered.push(await settled(receiver));
    console.log(
      `deliveries received (all sent once the load stopped): base ${delivered[0]} of ${b.ok} hits, working tree ${delivered[1]} of ${w.ok}`,
    );
  }
  console.log(
    `working tree / base: ${(w.okPerS / b.okPerS).toFixed(3)} (rate), ${(b.cpu.serverS / b.ok / (w.cpu.serverS / w.ok)).toFixed(3)} (CPU per hit, base / working tree)` +
      (values.store === "postgres"
        ? `, ${(b.cpu.postgresS / b.ok / (w.cpu.postgresS / w.ok)).toFixed(3)} (PostgreSQL CPU per hit, base / working tree)`
        : ""),
  );
} finally {
  for (const receiver of receivers) await receiver.stop();
  for (const server of servers) await server.stop();
  for (const schema of schemas) await dropSchema(pgUrl, schema);
  base.remove();
}
