/**
 * CPU per endpoint hit, thread by thread: a Fount server with the bench's emitter source, 50 connections
 * at a fixed rate (or as fast as it answers), and the CPU each thread of the server and of its executor
 * processes used during the run, read from /proc and divided by the hits acknowledged. Unlike the rate
 * of `npm run bench`, this figure hardly moves when the machine's speed does, so it is the one to compare
 * two versions of the code with (run them one after the other, several times).
 *
 *   node bench/per-hit.ts [--rate 8000] [--duration 6] [--node-args=--trace-gc] [--promoted]
 *
 * `--promoted` samples, through the inspector, the allocations that outlived young-generation
 * collections during the run (V8's sampling heap profiler, objects later freed by a full collection
 * included), by allocation site: what makes scavenges slow.
 */
import { parseArgs } from "node:util";
import { runLoad } from "./lib/load.ts";
import { childPids, FountProcess, threadCpuSeconds } from "./lib/processes.ts";
import { emitterCode, payloadText } from "./parts/context.ts";

const { values } = parseArgs({
  options: {
    rate: { type: "string", default: "8000" },
    duration: { type: "string", default: "6" },
    "node-args": { type: "string", default: "" },
    promoted: { type: "boolean", default: false },
  },
});
const rate = Number(values.rate);
const durationS = Number(values.duration);
const inspectPort = 9339;
const nodeArgs = values["node-args"].split(" ").filter(Boolean);
if (values.promoted) nodeArgs.push(`--inspect=127.0.0.1:${inspectPort}`);

/** CPU ms of each server thread and of each executor process (all its threads). */
function sample(serverPid: number): Map<string, number> {
  const all = new Map<string, number>();
  for (const [name, seconds] of threadCpuSeconds(serverPid)) all.set(`server ${name}`, seconds * 1000);
  for (const pid of childPids(serverPid)) {
    // Its main thread (IPC with the server, relaying to realms) apart from the realms' threads.
    let main = 0;
    let realms = 0;
    for (const [name, seconds] of threadCpuSeconds(pid)) {
      if (name.endsWith("*")) main += seconds;
      else realms += seconds;
    }
    all.set(`executor ${pid} main`, main * 1000);
    all.set(`executor ${pid} other threads`, realms * 1000);
  }
  return all;
}

/** Minimal DevTools-protocol client over the WebSocket the inspector serves. */
async function inspector(): Promise<{
  call: (method: string, params?: object) => Promise<any>;
  close(): void;
}> {
  const list = (await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json()) as Array<{
    webSocketDebuggerUrl: string;
  }>;
  const ws = new WebSocket(list[0]!.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.addEventListener("open", resolve);
    ws.addEventListener("error", reject);
  });
  const waiting = new Map<number, (result: unknown) => void>();
  ws.addEventListener("message", (m) => {
    const msg = JSON.parse(String(m.data)) as { id?: number; result?: unknown };
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg.result);
  });
  let id = 0;
  return {
    call: (method, params = {}) =>
      new Promise((resolve) => {
        waiting.set(++id, resolve);
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

interface SamplingNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: SamplingNode[];
}

/** Sampled bytes by allocation site and its three callers, largest first. */
function bySite(head: SamplingNode): Array<[string, number]> {
  const sites = new Map<string, number>();
  const walk = (node: SamplingNode, callers: string[]) => {
    const f = node.callFrame;
    const here = `${f.functionName || "(anonymous)"} ${f.url.replace(/^.*\//, "")}:${f.lineNumber + 1}`;
    const stack = [here, ...callers].slice(0, 4);
    if (node.selfSize > 0) {
      const key = stack.join(" < ");
      sites.set(key, (sites.get(key) ?? 0) + node.selfSize);
    }
    for (const child of node.children) walk(child, stack);
  };
  walk(head, []);
  return [...sites].sort((a, b) => b[1] - a[1]);
}

const fount = await FountProcess.start({ nodeArgs });
try {
  const source = await fount.deploy(emitterCode("per-hit", false), "per-hit");
  await runLoad({ url: source.endpointUrl, body: payloadText, connections: 50, durationS: 3 });
  const devtools = values.promoted ? await inspector() : undefined;
  await devtools?.call("HeapProfiler.enable");
  await devtools?.call("HeapProfiler.startSampling", {
    samplingInterval: 8192,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: false,
  });
  const before = sample(fount.pid);
  const load = await runLoad({
    url: source.endpointUrl,
    body: payloadText,
    connections: 50,
    durationS,
    ...(rate > 0 ? { overallRate: rate } : {}),
  });
  const after = sample(fount.pid);
  const hits = load.ok;
  console.log(
    `${hits} hits acknowledged, ${Math.round(load.okPerS)}/s (${rate > 0 ? `offered ${rate}/s` : "as fast as answered"}), p50 ${load.latencyMs.p50} ms, p99 ${load.latencyMs.p99} ms`,
  );
  for (const [name, ms] of after) {
    const used = Math.round(ms - (before.get(name) ?? 0));
    if (used < 20) continue;
    console.log(
      `${name.padEnd(24)} ${String(used).padStart(6)} ms CPU  ${((1000 * used) / hits).toFixed(1)} µs/hit`,
    );
  }
  if (devtools) {
    const { profile } = (await devtools.call("HeapProfiler.stopSampling")) as {
      profile: { head: SamplingNode };
    };
    devtools.close();
    const sites = bySite(profile.head);
    const total = sites.reduce((sum, [, bytes]) => sum + bytes, 0);
    console.log(
      `\nsampled bytes that outlived a young-generation collection: ${(total / hits).toFixed(0)} per hit`,
    );
    for (const [site, bytes] of sites.slice(0, 20)) {
      console.log(`${(bytes / 1e6).toFixed(1).padStart(7)} MB  ${site}`);
    }
  }
} finally {
  await fount.stop();
}
