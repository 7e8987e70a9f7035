/**
 * Webhook deliveries to a healthy local receiver (its own process): a source subscribed to a webhook
 * gets emits at a fixed rate for the run's duration; the receiver records each delivery's arrival
 * against the `emitted_at` the component stamped. Deliveries per second are counted from the first to
 * the last arrival, so a delivery loop that falls behind shows as a lower rate and a long tail.
 */
import { runLoad } from "../lib/load.ts";
import { cpuMeter, type HelperChild, sleep } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { distribution } from "../lib/stats.ts";
import { pollUntil } from "../lib/wait.ts";
import { emitterCode, type PartContext, payload } from "./context.ts";

const part = "Webhooks";

interface ReceiverReport {
  count: number;
  unique: number;
  duplicates: number;
  unparsed: number;
  firstMs: number;
  lastMs: number;
  emitLatencies: number[];
  sendLatencies: number[];
}

/** Waits until the receiver has `expected` deliveries, or nothing arrived for `quietMs`, or `maxMs` passed. */
async function awaitDeliveries(
  receiver: HelperChild,
  expected: number,
  quietMs: number,
  maxMs: number,
): Promise<number> {
  const { count } = await pollUntil(() => receiver.call<{ count: number }>("count"), {
    done: (r) => r.count >= expected,
    progress: (r) => r.count,
    quietMs,
    maxMs,
    everyMs: 100,
  });
  return count;
}

export async function webhooks(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const { durationS, warmupS, connections, webhookRate } = ctx.settings;
  const receiver = await ctx.helper("receiver.ts");
  const { port } = await receiver.call<{ port: number }>("ready");
  const fount = await ctx.fount();
  const source = await fount.deploy(emitterCode("bench-webhook", true), "bench-webhook");
  const webhook = await fount.api("POST", "/v1/webhooks", { url: `http://127.0.0.1:${port}/hook` });
  await fount.api("POST", "/v1/subscriptions", { emitter_id: source.id, listener_id: webhook.data.id });
  const bodyOf = () => JSON.stringify({ ...payload, sent_at: Date.now() });
  const body = bodyOf();

  ctx.log(`${part}: warm-up ${warmupS} s at ${Math.round(webhookRate / 3)}/s`);
  const warm = await runLoad({
    url: source.endpointUrl,
    body,
    bodyOf,
    connections,
    durationS: warmupS,
    overallRate: Math.round(webhookRate / 3),
  });
  const warmed = await awaitDeliveries(receiver, warm.ok, 3_000, 20_000);
  if (warmed === 0) throw new Error("no delivery reached the receiver during the warm-up");
  await sleep(500);
  await receiver.call("reset");

  ctx.log(`${part}: ${durationS} s of emits at ${webhookRate}/s`);
  const meter = cpuMeter(fount.pid);
  const load = await runLoad({
    url: source.endpointUrl,
    body,
    bodyOf,
    connections,
    durationS,
    overallRate: webhookRate,
  });
  const driveCpu = meter();
  // Every 200 is a stored event with a delivery queued in the same transaction.
  const delivered = await awaitDeliveries(receiver, load.ok, 5_000, 30_000);
  const cpu = meter();
  const r = await receiver.call<ReceiverReport>("report", {}, 30_000);
  const spanS = Math.max(0.001, (r.lastMs - r.firstMs) / 1000);
  const rate = r.count / spanS;
  const emit = distribution(r.emitLatencies);
  const sent = distribution(r.sendLatencies);
  out.details.webhooks = {
    offeredPerS: webhookRate,
    load,
    delivered,
    receiver: { ...r, emitLatencies: undefined, sendLatencies: undefined },
    spanS,
    emitToReceiptMs: emit,
    requestToReceiptMs: sent,
    cpuDuringEmits: driveCpu,
    cpuUntilDelivered: cpu,
  };
  const missing = Math.max(0, load.ok - r.unique);
  out.figures.push(
    figure(
      part,
      "deliveries/s",
      rate,
      "/s",
      { op: ">=", value: 3_000 },
      `${r.count.toLocaleString("en-US")} in ${spanS.toFixed(1)} s; offered ${webhookRate}/s, ` +
        `${load.ok.toLocaleString("en-US")} emits acknowledged at ${load.okPerS.toFixed(0)}/s`,
    ),
    figure(part, "emit-to-receipt p50", emit.p50, "ms", undefined, `request-to-receipt p50 ${sent.p50} ms`),
    figure(
      part,
      "emit-to-receipt p99",
      emit.p99,
      "ms",
      { op: "<=", value: 50 },
      `max ${emit.max} ms; request-to-receipt p99 ${sent.p99} ms`,
    ),
    figure(
      part,
      "acknowledged but not delivered",
      missing,
      "events",
      { op: "<=", value: 0 },
      `${r.duplicates} duplicates; server CPU ${cpu.serverS.toFixed(1)} s, bench ${cpu.benchS.toFixed(1)} s, other ${cpu.otherS.toFixed(1)} s`,
    ),
  );

  // The dispatcher alone: with the webhook inactive, emits queue parked deliveries; once it is active
  // again the backlog drains with no emits competing for the server's CPU.
  await receiver.call("reset");
  await fount.api("PUT", `/v1/webhooks/${webhook.data.id}`, { active: false });
  ctx.log(`${part}: ${warmupS + 2} s of emits to an inactive webhook, then draining the backlog`);
  const backlog = await runLoad({
    url: source.endpointUrl,
    body,
    bodyOf,
    connections,
    durationS: warmupS + 2,
  });
  await sleep(500);
  const drainMeter = cpuMeter(fount.pid);
  const activatedMs = Date.now();
  await fount.api("PUT", `/v1/webhooks/${webhook.data.id}`, { active: true });
  const drained = await awaitDeliveries(receiver, backlog.ok, 5_000, 60_000);
  const drainCpu = drainMeter();
  const d = await receiver.call<ReceiverReport>("report", {}, 30_000);
  const drainS = Math.max(0.001, (d.lastMs - activatedMs) / 1000);
  out.details.webhookDrain = {
    backlog: backlog.ok,
    drained,
    drainS,
    cpu: drainCpu,
    duplicates: d.duplicates,
  };
  out.figures.push(
    figure(
      part,
      "backlog drain rate",
      drained / drainS,
      "/s",
      undefined,
      `${drained.toLocaleString("en-US")} of ${backlog.ok.toLocaleString("en-US")} queued deliveries in ${drainS.toFixed(1)} s ` +
        `after reactivation; server CPU ${((drainCpu.serverS * 1e6) / Math.max(1, drained)).toFixed(0)} µs per delivery`,
    ),
  );
}
