/**
 * Per-source realms (issue 15, point 3): the latency of a source while another source of the same
 * owner loops forever, and what an owner's executor costs in memory with 1, 5 and 20 sources running.
 */
import { readFileSync } from "node:fs";
import { httpCall } from "../lib/http-client.ts";
import { type Figure, figure } from "../lib/report.ts";
import { distribution } from "../lib/stats.ts";
import { emitterCode, type PartContext, payload } from "./context.ts";
import { executorPids } from "./tenants.ts";

const loopCode = `export default {
  name: "bench-loop",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run() {
    for (;;) {}
  },
};
`;

/** Before the per-source realm, one executor process per owner with one source: docs/architecture.md. */
const baseline = { rssMb: 81, pssMb: 32 };

/**
 * RSS and PSS in MB of the owner's executor processes: the server's children running runner.mjs, less the
 * registry's own and the spare executors no owner took yet (`executorPids`). Until 2026-11-28 this part
 * counted the spares too (`FOUNT_EXECUTOR_SPARES`, three more processes), which put its one-source figure
 * at 271 MB RSS.
 */
function executorMemory(serverPid: number): { rssMb: number; pssMb: number; processes: number } {
  let rss = 0;
  let pss = 0;
  let processes = 0;
  for (const pid of executorPids(serverPid)) {
    let rollup: string;
    try {
      rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    rss += Number(/^Rss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? 0);
    pss += Number(/^Pss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? 0);
    processes++;
  }
  return { rssMb: rss / 1024, pssMb: pss / 1024, processes };
}

async function hitOk(url: string): Promise<number> {
  const t0 = performance.now();
  const res = await httpCall(url, { method: "POST", json: payload, timeoutMs: 60_000 });
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${res.text.slice(0, 200)}`);
  return performance.now() - t0;
}

export async function sibling(
  ctx: PartContext,
  out: { figures: Figure[]; details: Record<string, unknown> },
) {
  const part = "Sibling";
  const fount = await ctx.fount();
  const echo = await fount.deploy(emitterCode("bench-sibling", false), "bench-sibling");
  const loop = await fount.deploy(loopCode, "bench-loop");
  for (let i = 0; i < 20; i++) await hitOk(echo.endpointUrl);
  const quiet: number[] = [];
  for (let i = 0; i < 100; i++) quiet.push(await hitOk(echo.endpointUrl));

  // The loop runs until the default 30 s timeout; the sibling is measured meanwhile.
  const durationMs = Math.min(ctx.settings.durationS * 1000, 20_000);
  ctx.log(`${part}: sibling hits for ${durationMs / 1000} s while another source of its owner loops`);
  const looping = httpCall(loop.endpointUrl, { method: "POST", json: payload, timeoutMs: 120_000 });
  await new Promise((r) => setTimeout(r, 500));
  const during: number[] = [];
  const end = performance.now() + durationMs;
  while (performance.now() < end) during.push(await hitOk(echo.endpointUrl));
  const loopAnswer = await looping;
  const q = distribution(quiet);
  const d = distribution(during);
  out.details.siblingQuietMs = q;
  out.details.siblingDuringLoopMs = d;
  out.details.loopStatus = loopAnswer.status;
  out.figures.push(
    figure(part, "latency p50, alone", q.p50, "ms", undefined, "100 sequential endpoint hits"),
    figure(
      part,
      "latency p50 while a sibling loops",
      d.p50,
      "ms",
      undefined,
      `${d.count} sequential hits; the loop ended with ${loopAnswer.status}`,
    ),
    figure(
      part,
      "latency p99 while a sibling loops",
      d.p99,
      "ms",
      { op: "<=", value: 1000 },
      `max ${d.max.toFixed(1)} ms`,
    ),
  );

  // Memory of one owner's executor with 1, 5 and 20 sources, each of which has run, 12 s after; then
  // the 20 once their realms went idle. The baseline (81 MB RSS, 32 MB PSS, "must not double")
  // was one executor process per owner running its source, so the 1-source figure carries the target;
  // each further active source adds a realm (a V8 isolate, about 9 MB), which the idle stop gives back.
  const memory: Record<string, ReturnType<typeof executorMemory>> = {};
  const mem = await ctx.fount();
  const urls: string[] = [];
  const note = `before realms about ${baseline.rssMb} MB RSS, ${baseline.pssMb} MB PSS with one source`;
  for (const n of [1, 5, 20]) {
    while (urls.length < n) {
      urls.push(
        (await mem.deploy(emitterCode(`bench-mem-${urls.length}`, false), `bench-mem-${urls.length}`))
          .endpointUrl,
      );
    }
    for (const url of urls) for (let i = 0; i < 3; i++) await hitOk(url);
    // Settled: the spare realm and the inspection realm are stopped after 10 s unused (runner.ts);
    // the sources' realms stay for a minute idle (REALM_IDLE_MS).
    await new Promise((r) => setTimeout(r, 12_000));
    const m = executorMemory(mem.pid);
    memory[n] = m;
    ctx.log(`${part}: ${n} sources: ${JSON.stringify(m)}`);
    const target = n === 1 ? (v: number) => ({ op: "<=" as const, value: 2 * v }) : () => undefined;
    out.figures.push(
      figure(part, `executor RSS, ${n} active source(s)`, m.rssMb, "MB", target(baseline.rssMb), note),
      figure(part, `executor PSS, ${n} active source(s)`, m.pssMb, "MB", target(baseline.pssMb)),
    );
  }
  const perSource = (memory[20]!.rssMb - memory[1]!.rssMb) / 19;
  // Once their realms idled out (REALM_IDLE_MS, 60 s): what an owner of many rarely firing sources holds.
  await new Promise((r) => setTimeout(r, 62_000));
  const idle = executorMemory(mem.pid);
  memory.idle20 = idle;
  ctx.log(`${part}: 20 sources, realms idle: ${JSON.stringify(idle)}`);
  out.figures.push(
    figure(part, "RSS per further active source", perSource, "MB", undefined, "(20 sources − 1) / 19"),
    figure(part, "executor RSS, 20 sources idle 74 s", idle.rssMb, "MB", {
      op: "<=",
      value: 2 * baseline.rssMb,
    }),
    figure(part, "executor PSS, 20 sources idle 74 s", idle.pssMb, "MB", {
      op: "<=",
      value: 2 * baseline.pssMb,
    }),
  );
  out.details.executorMemory = memory;
}
