/**
 * HTTP-triggered source against a bare node:http server: acknowledged emits per second and latency at
 * a fixed number of connections, each server in its own process, the load from this one. A 200 from a
 * source endpoint means the emit is stored; afterwards the usage counter (written in the same
 * transaction as each run's events) and the stored window are checked against the 200s counted.
 */

import { type InterleavedResult, interleavedLoad } from "../lib/interleave.ts";
import { runLoad } from "../lib/load.ts";
import { type Figure, figure } from "../lib/report.ts";
import { emitterCode, type PartContext, payload, payloadText } from "./context.ts";

const part = "HTTP source";
/** Seconds of each alternating slice (bench/lib/interleave.ts): short enough to share the machine's drift. */
const sliceS = 2;

export async function httpIngest(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const { durationS, warmupS, connections } = ctx.settings;
  const details = out.details;

  const fount = await ctx.fount();
  const source = await fount.deploy(emitterCode("bench-http", false), "bench-http");
  const bare = await ctx.helper("bare-server.ts");
  const { port } = await bare.call<{ port: number }>("ready");
  const bareUrl = `http://127.0.0.1:${port}/events/src1`;
  ctx.log(`${part}: warm-up ${warmupS} s each`);
  await runLoad({ url: source.endpointUrl, body: payloadText, connections, durationS: warmupS });
  await runLoad({ url: bareUrl, body: payloadText, connections, durationS: warmupS });

  const before = await fount.invocationsCommitted();
  const slices = Math.max(1, Math.round(durationS / sliceS));
  ctx.log(
    `${part}: Fount and bare node:http in alternating ${sliceS} s slices, ${slices} each, at ${connections} connections`,
  );
  const [load, bareLoad] = await interleavedLoad(
    { url: source.endpointUrl, pid: fount.pid },
    { url: bareUrl, pid: bare.pid },
    { body: payloadText, connections, slices, sliceS },
  );
  const cpu = load.cpu;
  const bareCpu = bareLoad.cpu;
  // Requests cut off when a slice stopped may still commit: let them land before counting.
  await new Promise((r) => setTimeout(r, 500));
  const committed = (await fount.invocationsCommitted()) - before;
  const window = await fount.api("GET", `/v1/sources/${source.id}/event_summaries?limit=100&expand=event`);
  const sameBody = (window.data as Array<{ event: unknown }>).filter(
    (e) => JSON.stringify(e.event) === JSON.stringify(payload),
  ).length;
  details.fount = { load, committedInvocations: committed, windowEvents: window.data.length, sameBody };
  details.bare = { load: bareLoad };

  // Every 200 is a stored emit; each slice cut off at its end may add up to one run per connection.
  const unacknowledgedBound = connections * slices + load.non2xx + load.errors + load.timeouts;
  const lost = load.ok - committed;
  const note = (l: InterleavedResult) =>
    `${l.ok.toLocaleString("en-US")} ok, ${l.non2xx} non-2xx, ${l.errors} errors in ${l.durationS.toFixed(1)} s; slices ${l.sliceRates.join(" ")}`;
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
    figure(part, "share of bare rate", (100 * load.okPerS) / bareLoad.okPerS, "%", { op: ">=", value: 40 }),
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
