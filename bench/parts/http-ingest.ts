/**
 * HTTP-triggered source against a bare node:http server: acknowledged emits per second and latency at
 * a fixed number of connections, each server in its own process, the load from this one. A 200 from a
 * source endpoint means the emit is stored; afterwards the usage counter (written in the same
 * transaction as each run's events) and the stored window are checked against the 200s counted.
 * A second Fount server runs the full flow (issue 29): the same source subscribed to a webhook on a local
 * receiver, so that each hit is also routed, delivered, signed and settled. The three servers take the
 * load in alternating slices, so that their ratios compare the same minutes.
 */

import { type InterleavedResult, interleavedLoads } from "../lib/interleave.ts";
import { runLoad } from "../lib/load.ts";
import type { FountProcess, HelperChild } from "../lib/processes.ts";
import { type Figure, figure, type Target } from "../lib/report.ts";
import { pollUntil } from "../lib/wait.ts";
import { emitterCode, type PartContext, payload, payloadText } from "./context.ts";

const part = "HTTP source";
/** Seconds of each alternating slice (bench/lib/interleave.ts): short enough to share the machine's drift. */
const sliceS = 2;

/** Issue 29's shares, per store: ingest of bare node:http, full flow of bare and of ingest. */
const shareTargets = {
  sqlite: { ingest: 60, fullOfBare: 30, fullOfIngest: 60 },
  postgres: { ingest: 50, fullOfBare: 30, fullOfIngest: 55 },
} as const;

/** The full flow's server: a source subscribed to a webhook on a receiver of its own. */
async function fullFlowServer(
  ctx: PartContext,
): Promise<{ fount: FountProcess; url: string; receiver: HelperChild }> {
  const receiver = await ctx.helper("receiver.ts");
  const { port } = await receiver.call<{ port: number }>("ready");
  const fount = await ctx.fount();
  const source = await fount.deploy(emitterCode("bench-flow", false), "bench-flow");
  const hook = await fount.api("POST", "/v1/webhooks", { url: `http://127.0.0.1:${port}/hook` });
  await fount.api("POST", "/v1/subscriptions", { emitter_id: source.id, listener_id: hook.data.id });
  return { fount, url: source.endpointUrl, receiver };
}

export async function httpIngest(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const { durationS, warmupS, connections } = ctx.settings;
  const details = out.details;
  const targets = shareTargets[ctx.settings.store.driver];

  const fount = await ctx.fount();
  const source = await fount.deploy(emitterCode("bench-http", false), "bench-http");
  const flow = await fullFlowServer(ctx);
  const bare = await ctx.helper("bare-server.ts");
  const { port } = await bare.call<{ port: number }>("ready");
  const bareUrl = `http://127.0.0.1:${port}/events/src1`;
  ctx.log(`${part}: warm-up ${warmupS} s each`);
  for (const url of [source.endpointUrl, flow.url, bareUrl]) {
    await runLoad({ url, body: payloadText, connections, durationS: warmupS });
  }

  const before = await fount.invocationsCommitted();
  const deliveredBefore = (await flow.receiver.call<{ count: number }>("count")).count;
  const slices = Math.max(1, Math.round(durationS / sliceS));
  ctx.log(
    `${part}: Fount, Fount with a webhook and bare node:http in alternating ${sliceS} s slices, ${slices} each, at ${connections} connections`,
  );
  const [load, flowLoad, bareLoad] = (await interleavedLoads(
    [
      { url: source.endpointUrl, pid: fount.pid },
      { url: flow.url, pid: flow.fount.pid },
      { url: bareUrl, pid: bare.pid },
    ],
    { body: payloadText, connections, slices, sliceS },
  )) as [InterleavedResult, InterleavedResult, InterleavedResult];
  const cpu = load.cpu;
  const bareCpu = bareLoad.cpu;
  const deliveredAtEnd = (await flow.receiver.call<{ count: number }>("count")).count - deliveredBefore;
  // Requests cut off when a slice stopped may still commit: let them land before counting.
  await new Promise((r) => setTimeout(r, 500));
  const committed = (await fount.invocationsCommitted()) - before;
  const window = await fount.api("GET", `/v1/sources/${source.id}/event_summaries?limit=100&expand=event`);
  const sameBody = (window.data as Array<{ event: unknown }>).filter(
    (e) => JSON.stringify(e.event) === JSON.stringify(payload),
  ).length;
  // Every 200 of the full flow is a stored event with its delivery queued in the same transaction.
  const { count: deliveredTotal } = await pollUntil(() => flow.receiver.call<{ count: number }>("count"), {
    done: (r) => r.count - deliveredBefore >= flowLoad.ok,
    progress: (r) => r.count,
    quietMs: 5_000,
    maxMs: 30_000,
    everyMs: 100,
  });
  const delivered = deliveredTotal - deliveredBefore;
  details.fount = { load, committedInvocations: committed, windowEvents: window.data.length, sameBody };
  details.fullFlow = { load: flowLoad, deliveredAtEnd, delivered };
  details.bare = { load: bareLoad };

  // Every 200 is a stored emit; each slice cut off at its end may add up to one run per connection.
  const unacknowledgedBound = connections * slices + load.non2xx + load.errors + load.timeouts;
  const lost = load.ok - committed;
  const note = (l: InterleavedResult) =>
    `${l.ok.toLocaleString("en-US")} ok, ${l.non2xx} non-2xx, ${l.errors} errors in ${l.durationS.toFixed(1)} s; slices ${l.sliceRates.join(" ")}`;
  const share = (name: string, of: number, by: number, value: number, why: string) =>
    figure(part, name, (100 * of) / by, "%", { op: ">=", value } satisfies Target, why);
  out.figures.push(
    figure(part, "acknowledged emits/s", load.okPerS, "req/s", { op: ">=", value: 5_000 }, note(load)),
    figure(part, "latency p50", load.latencyMs.p50, "ms", undefined, `${connections} connections`),
    figure(
      part,
      "latency p99",
      load.latencyMs.p99,
      "ms",
      { op: "<=", value: 25 },
      `max ${load.latencyMs.max.toFixed(1)} ms`,
    ),
    figure(part, "bare node:http rate", bareLoad.okPerS, "req/s", undefined, note(bareLoad)),
    figure(
      part,
      "bare node:http p50 / p99",
      bareLoad.latencyMs.p50,
      "ms",
      undefined,
      `p99 ${bareLoad.latencyMs.p99.toFixed(1)} ms`,
    ),
    share(
      "share of bare rate",
      load.okPerS,
      bareLoad.okPerS,
      targets.ingest,
      "ingest / bare node:http, issue 29",
    ),
    figure(
      part,
      "full flow emits/s",
      flowLoad.okPerS,
      "req/s",
      undefined,
      `${note(flowLoad)}; p99 ${flowLoad.latencyMs.p99.toFixed(1)} ms; ${deliveredAtEnd.toLocaleString("en-US")} delivered when the last slice ended`,
    ),
    share("full flow / bare", flowLoad.okPerS, bareLoad.okPerS, targets.fullOfBare, "issue 29, point 1"),
    share("full flow / ingest", flowLoad.okPerS, load.okPerS, targets.fullOfIngest, "issue 29, point 1"),
    figure(
      part,
      "full flow acknowledged, not delivered",
      Math.max(0, flowLoad.ok - delivered),
      "events",
      { op: "<=", value: 0 },
      `${delivered.toLocaleString("en-US")} deliveries for ${flowLoad.ok.toLocaleString("en-US")} 200s; ` +
        `server CPU per hit ${((flowLoad.cpu.serverS * 1e6) / Math.max(1, flowLoad.ok)).toFixed(0)} µs`,
    ),
    figure(
      part,
      "acknowledged but not stored",
      Math.max(0, lost),
      "events",
      { op: "<=", value: 0 },
      `${committed.toLocaleString("en-US")} runs committed for ${load.ok.toLocaleString("en-US")} 200s` +
        ` (surplus ≤ ${unacknowledgedBound} expected: ${committed - load.ok <= unacknowledgedBound ? "yes" : "NO"}); ` +
        `window holds ${window.data.length} events, ${sameBody} with the posted body`,
    ),
    figure(
      part,
      "emits per server CPU-second",
      load.ok / cpu.serverS,
      "req/CPU-s",
      undefined,
      `server+executor ${cpu.serverS.toFixed(1)} s, load generator ${cpu.benchS.toFixed(1)} s, other ${cpu.otherS.toFixed(1)} s`,
    ),
    figure(
      part,
      "bare req per server CPU-second",
      bareLoad.ok / bareCpu.serverS,
      "req/CPU-s",
      undefined,
      `server ${bareCpu.serverS.toFixed(1)} s, load generator ${bareCpu.benchS.toFixed(1)} s, other ${bareCpu.otherS.toFixed(1)} s`,
    ),
  );
}
