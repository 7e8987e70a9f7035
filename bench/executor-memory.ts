/**
 * What one tenant's executor costs under each setting (issue 29, point 5), with the executor pool called
 * directly. Every variant (pool options as JSON: `v8Flags`, `mallocArenaMax`, `realmYoungMb`) runs at
 * the same time, a pool each: `--owners` owners a variant each deploy one component (inspected in their
 * executor, as a deploy does) and call it once per second for `--seconds`; 12 s after the last call (an
 * unused spare and the idle inspection realm are gone by then) each executor's `Anonymous` and `Pss`
 * are read from `/proc/<pid>/smaps_rollup` (PSS shares Node's binary among every process mapping it, so
 * all variants are read together). The pools stay up, and executor CPU per call is then measured in
 * interleaved slices (`--slices`
 * of `--calls` calls, 50 at a time, on one owner of each variant in turn; the CPU of the executor's
 * threads from `/proc/<pid>/task/<tid>/schedstat`), so a change in the machine's load falls on all.
 *
 *   node bench/executor-memory.ts --variant glibc='{"mallocArenaMax":0}' --variant default='{}' \
 *     --variant young1='{"realmYoungMb":1}' --variant size='{"v8Flags":["--optimize-for-size"]}'
 */
import { readdirSync, readFileSync } from "node:fs";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { ExecutorPool, type ExecutorPoolOptions } from "../src/runtime/executor-pool.ts";
import type { BuiltComponent, InvokeRequest } from "../src/runtime/types.ts";
import { type Memory, memoryOf } from "./lib/processes.ts";

const { values } = parseArgs({
  options: {
    variant: { type: "string", multiple: true, default: ["default={}"] },
    owners: { type: "string", default: "10" },
    seconds: { type: "string", default: "15" },
    calls: { type: "string", default: "500" },
    slices: { type: "string", default: "8" },
  },
});
const owners = Number(values.owners);
const seconds = Number(values.seconds);
const calls = Number(values.calls);
const slices = Number(values.slices);
const variants = values.variant.map((v) => {
  const i = v.indexOf("=");
  return { name: v.slice(0, i), options: JSON.parse(v.slice(i + 1)) as Partial<ExecutorPoolOptions> };
});

// A webhook handler's usual work: read the db, look through the body, emit a summary and the body.
const component = `export default {
  name: "Orders", version: "1", props: { db: "$.service.db" },
  run(event) {
    const n = (this.db.get("n") ?? 0) + 1;
    this.db.set("n", n);
    const total = event.body.items.reduce((sum, item) => sum + item.qty * item.price, 0);
    this.$emit({ n, total, skus: event.body.items.map((item) => item.sku), order: event.body });
  },
};`;
const body = {
  type: "order.created",
  customer: { id: "cus_9f8e7d6c5b4a", email: "jane.doe@example.com", name: "Jane Doe" },
  items: Array.from({ length: 20 }, (_, i) => ({ sku: `SKU-${i}`, qty: 1 + (i % 3), price: 100 * i })),
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function rollup(pid: number): Memory {
  const memory = memoryOf(pid);
  if (!memory) throw new Error(`executor ${pid} is gone`);
  return memory;
}

/** Threads of the process named "realm". */
function realmThreads(pid: number): number {
  let n = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      if (readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim() === "realm") n++;
    } catch {
      // The thread ended meanwhile.
    }
  }
  return n;
}

/** CPU (ns) used so far by the process's live threads. */
function cpuNs(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // The thread ended meanwhile.
    }
  }
  return ns;
}

interface Measured {
  name: string;
  pool: ExecutorPool;
  owner: string;
  anonMb: number;
  pssMb: number;
  cpuNs: number;
}

function request(built: BuiltComponent, ownerId: string, i: number): InvokeRequest {
  return {
    ownerId,
    sourceId: `dc_${ownerId}`,
    component: built,
    props: {},
    dbProps: ["db"],
    httpProps: [],
    db: {},
    dbVersion: 0,
    invocation: { kind: "run", event: { body: { ...body, i } } },
    timeoutMs: 60_000,
  };
}

async function memory(
  tmp: string,
  built: BuiltComponent,
  name: string,
  options: Partial<ExecutorPoolOptions>,
) {
  const pool = new ExecutorPool({ dataDir: path.join(tmp, `data-${name}`), memoryMb: 256, ...options });
  pools.push(pool);
  const ids = Array.from({ length: owners }, (_, i) => `u_${name}_${i}`);
  await Promise.all(ids.map((id) => pool.inspect(id, built, 60_000)));
  const start = performance.now();
  const runs: Promise<unknown>[] = [];
  for (let s = 0; s < seconds; s++) {
    for (let i = 0; i < ids.length; i++) {
      const wait = start + s * 1000 + (i * 1000) / ids.length - performance.now();
      if (wait > 0) await sleep(wait);
      runs.push(pool.invoke(request(built, ids[i]!, s)));
    }
  }
  await Promise.all(runs);
  await sleep(12_000);
  const mem = ids.map((id) => rollup(pool.pidOf(id)!));
  const threads = ids.map((id) => realmThreads(pool.pidOf(id)!)).join("");
  const anonMb = mem.reduce((a, m) => a + m.anonMb, 0) / mem.length;
  const pssMb = mem.reduce((a, m) => a + m.pssMb, 0) / mem.length;
  const load = os.loadavg()[0]!.toFixed(1);
  console.log(
    `${name.padEnd(16)} anon ${anonMb.toFixed(1)} MB, PSS ${pssMb.toFixed(1)} MB (load ${load}; realms per executor ${threads})`,
  );
  return { name, pool, owner: ids[0]!, anonMb, pssMb, cpuNs: 0 };
}

async function cpuSlice(built: BuiltComponent, m: Measured): Promise<void> {
  const pid = m.pool.pidOf(m.owner)!;
  const before = cpuNs(pid);
  let next = 0;
  const worker = async () => {
    while (next < calls) {
      const r = await m.pool.invoke(request(built, m.owner, next++));
      if (r.error) throw new Error(JSON.stringify(r.error));
    }
  };
  await Promise.all(Array.from({ length: 50 }, worker));
  m.cpuNs += cpuNs(pid) - before;
}

const tmp = await fs.mkdtemp(path.join(os.tmpdir(), "fount-executor-memory-"));
await fs.chmod(tmp, 0o711);
await fs.mkdir(path.join(tmp, "code"));
await fs.writeFile(path.join(tmp, "code", "orders.mjs"), component);
const built = {
  codeHash: "bench",
  entryFile: path.join(tmp, "code", "orders.mjs"),
  readDirs: [path.join(tmp, "code")],
  dependencies: {},
} as BuiltComponent;
const measured: Measured[] = [];
/** Every pool started, closed at the end even when a variant failed. */
const pools: ExecutorPool[] = [];
try {
  measured.push(...(await Promise.all(variants.map((v) => memory(tmp, built, v.name, v.options)))));
  for (let slice = 0; slice < slices; slice++) {
    const order = slice % 2 ? [...measured].reverse() : measured;
    for (const m of order) await cpuSlice(built, m);
  }
  const loadEnd = os.loadavg()[0]!.toFixed(1);
  console.log(
    `\n${owners} owners per variant, one source each, ${seconds} s at one call/s; ` +
      `CPU over ${slices} interleaved slices of ${calls} calls (load ${loadEnd} at the end)`,
  );
  for (const m of measured) {
    const us = m.cpuNs / 1000 / (slices * calls);
    console.log(
      `${m.name.padEnd(16)} anon ${m.anonMb.toFixed(1)} MB | PSS ${m.pssMb.toFixed(1)} MB | executor CPU ${us.toFixed(1)} µs/call`,
    );
  }
} finally {
  await Promise.all(pools.map((pool) => pool.close()));
  await fs.rm(tmp, { recursive: true, force: true });
}
