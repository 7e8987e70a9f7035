/**
 * CPU per webhook attempt of `HttpSender` alone, this working tree against another commit, in one
 * process: both senders send signed deliveries (a 230-byte body, 32 at a time) to the bench's receiver
 * (a process of its own, `children/receiver.ts`), in alternating rounds, and each round's CPU of this
 * process is divided by its attempts. What a delivery's outgoing request costs the server, apart from the
 * rest of the flow (docs/architecture.md, *Performance*).
 *
 *   node bench/sender.ts [--base HEAD] [--rounds 10] [--attempts 5000] [--concurrency 32]
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { AddressPolicy } from "../src/delivery/address-guard.ts";
import { HttpSender, type OutgoingDelivery } from "../src/delivery/http-sender.ts";
import { checkout } from "./lib/checkout.ts";
import { HelperChild } from "./lib/processes.ts";

const { values } = parseArgs({
  options: {
    base: { type: "string", default: "HEAD" },
    rounds: { type: "string", default: "10" },
    attempts: { type: "string", default: "5000" },
    concurrency: { type: "string", default: "32" },
  },
});

interface Sender {
  send(d: OutgoingDelivery, timeoutMs: number, stop: AbortSignal): Promise<{ kind: string }>;
  close(): Promise<void>;
}
const clock = { now: () => Date.now() };
const policy = () => new AddressPolicy({ allowPrivate: true, allowHosts: [] });
const base = checkout(values.base);
const receiver = await HelperChild.start("receiver.ts");
try {
  const { port } = await receiver.call<{ port: number }>("ready");
  const baseModule = await import(path.join(base.root, "src/delivery/http-sender.ts"));
  const senders: [string, Sender][] = [
    [`base ${base.commit}`, new baseModule.HttpSender(policy(), clock)],
    ["working tree", new HttpSender(policy(), clock as never)],
  ];
  const stop = new AbortController().signal;
  const body = JSON.stringify({ order: 1, text: "x".repeat(200) });
  let n = 0;
  /** CPU µs per attempt of `attempts` attempts, `concurrency` at a time. */
  const round = async (sender: Sender, attempts: number): Promise<number> => {
    let left = attempts;
    const from = process.cpuUsage();
    const worker = async () => {
      while (left-- > 0) {
        const o = await sender.send(
          {
            url: `http://127.0.0.1:${port}/hook`,
            secret: `whsec_${Buffer.from("k".repeat(24)).toString("base64")}`,
            id: `del_bench${n++}`,
            emitterId: "dc_bench",
            eventId: "1-0",
            channel: "",
            body,
            attempt: 1,
          },
          15_000,
          stop,
        );
        if (o.kind !== "succeeded") throw new Error(`an attempt came to ${JSON.stringify(o)}`);
      }
    };
    await Promise.all(Array.from({ length: Number(values.concurrency) }, worker));
    const cpu = process.cpuUsage(from);
    return (cpu.user + cpu.system) / attempts;
  };
  for (const [, s] of senders) await round(s, 2_000); // warm-up
  const results = new Map<string, number[]>(senders.map(([name]) => [name, []]));
  for (let r = 0; r < Number(values.rounds); r++) {
    // Alternating which goes first, so that drift falls on both alike.
    const order = r % 2 === 0 ? senders : [...senders].reverse();
    for (const [name, s] of order) results.get(name)!.push(await round(s, Number(values.attempts)));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  for (const [name, xs] of results)
    console.log(
      `${name.padEnd(16)} median ${median(xs).toFixed(1)} µs CPU/attempt  rounds ${xs.map((x) => x.toFixed(0)).join(" ")}`,
    );
  const [a, b] = [...results.values()] as [number[], number[]];
  console.log(`working tree / base: ${(median(b) / median(a)).toFixed(3)} of the CPU per attempt`);
  for (const [, s] of senders) await s.close();
} finally {
  await receiver.stop();
  base.remove();
}
