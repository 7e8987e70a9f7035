/**
 * Timer lateness: how long after its scheduled time a one-second timer's `run` starts, for 1,000 timers
 * on an idle server, and for 300 timers while another tenant's one-second timer takes 20 s per run (the
 * slow run must delay only its own source). A tick that never ran counts as missed.
 *
 * The scheduled time of a tick is its event's `timestamp` (whole seconds) plus the timer's phase, the
 * milliseconds part of its `next_run_ms`, read from the server's SQLite file: an interval timer's ticks
 * keep the phase of its first one. The component stamps `Date.now()` when `run` starts; the event's
 * `indexed_at_ms` is when its commit wrote it.
 */

import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import pg from "pg";
import { httpCall } from "../lib/http-client.ts";
import type { FountProcess } from "../lib/processes.ts";
import { sleep } from "../lib/processes.ts";
import { type Figure, figure } from "../lib/report.ts";
import { distribution } from "../lib/stats.ts";
import type { PartContext } from "./context.ts";

/** The target for the p99 of run-start lateness. */
const targetP99Ms = 100;
const idleTimers = 1_000;
const busyTimers = 300;
const slowRunMs = 20_000;
/** Deploys in flight at once while setting up (deploying is not what is measured). */
const deployConcurrency = 8;

const tickerCode = `export default {
  name: "bench-timer",
  version: "0.0.1",
  props: { timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } } },
  run(event) {
    this.$emit({ at: Date.now(), timestamp: event.timestamp });
  },
};
`;

const slowCode = `export default {
  name: "bench-slow-timer",
  version: "0.0.1",
  props: { timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } } },
  async run(event) {
    await new Promise((resolve) => setTimeout(resolve, ${slowRunMs}));
    this.$emit({ at: Date.now(), timestamp: event.timestamp });
  },
};
`;

type Out = { figures: Figure[]; details: Record<string, unknown> };

/** A user of the plan `paid` (no daily quota), and its API key. */
async function paidUser(fount: FountProcess, username: string): Promise<string> {
  const res = await fount.api("POST", "/v1/admin/users", {
    username,
    email: `${username}@example.com`,
    plan: "paid",
  });
  return res.data.api_key as string;
}

async function asUser(fount: FountProcess, key: string, method: string, p: string, body?: unknown) {
  const res = await httpCall(fount.url + p, {
    method,
    headers: { authorization: `Bearer ${key}` },
    json: body,
    timeoutMs: 60_000,
  });
  if (res.status !== 200) throw new Error(`${method} ${p} answered ${res.status}: ${res.text.slice(0, 300)}`);
  return res.json;
}

async function deployMany(fount: FountProcess, key: string, code: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const res = await asUser(fount, key, "POST", "/v1/sources", {
        component_code: code,
        name: `timer-${i}`,
      });
      ids.push(res.data.id as string);
    }
  };
  await Promise.all(Array.from({ length: deployConcurrency }, worker));
  return ids;
}

/** Each timer's phase: the milliseconds of its schedule within a second, read from the server's store. */
async function phases(fount: FountProcess): Promise<Map<string, number>> {
  const sql = "SELECT source_id, next_run_ms FROM timers";
  let rows: Array<{ source_id: string; next_run_ms: number | string }>;
  if (fount.databaseUrl) {
    const client = new pg.Client({ connectionString: fount.databaseUrl });
    await client.connect();
    try {
      rows = (await client.query(sql)).rows;
    } finally {
      await client.end();
    }
  } else {
    const db = new DatabaseSync(path.join(fount.dataDir, "fount.db"), { readOnly: true });
    try {
      rows = db.prepare(sql).all() as typeof rows;
    } finally {
      db.close();
    }
  }
  // PostgreSQL's BIGINT arrives as a string.
  return new Map(rows.map((r) => [r.source_id, Number(r.next_run_ms) % 1000]));
}

interface Lateness {
  /** Run start minus scheduled time, per tick that ran. */
  startMs: number[];
  /** Commit minus scheduled time. */
  commitMs: number[];
  due: number;
  missed: number;
}

/**
 * Ticks scheduled in [fromMs, toMs) of each source and how late each one ran; a tick due in the window
 * that has no event is missed.
 */
async function lateness(
  fount: FountProcess,
  key: string,
  ids: string[],
  fromMs: number,
  toMs: number,
): Promise<Lateness> {
  const phase = await phases(fount);
  const result: Lateness = { startMs: [], commitMs: [], due: 0, missed: 0 };
  let next = 0;
  const worker = async () => {
    while (next < ids.length) {
      const id = ids[next++];
      const p = phase.get(id) ?? 0;
      const res = await asUser(fount, key, "GET", `/v1/sources/${id}/event_summaries?expand=event&limit=100`);
      const seen = new Set<number>();
      for (const e of res.data as Array<{
        indexed_at_ms: number;
        event: { at: number; timestamp: number };
      }>) {
        const scheduled = e.event.timestamp * 1000 + p;
        if (scheduled < fromMs || scheduled >= toMs) continue;
        seen.add(scheduled);
        result.startMs.push(e.event.at - scheduled);
        result.commitMs.push(e.indexed_at_ms - scheduled);
      }
      // Every tick of the window: the first at or after fromMs with this phase, then every second.
      const first = Math.ceil((fromMs - p) / 1000) * 1000 + p;
      for (let t = first; t < toMs; t += 1000) {
        result.due++;
        if (!seen.has(t)) result.missed++;
      }
    }
  };
  await Promise.all(Array.from({ length: deployConcurrency }, worker));
  return result;
}

function report(part: string, label: string, l: Lateness, out: Out, note: string): void {
  const start = distribution(l.startMs);
  const commit = distribution(l.commitMs);
  out.details[label] = { start, commit, due: l.due, missed: l.missed };
  const target = { op: "<=" as const, value: targetP99Ms };
  out.figures.push(
    figure(part, `${label}: lateness p50`, start.p50, "ms", undefined, note),
    figure(part, `${label}: lateness p99`, start.p99, "ms", target, `max ${start.max.toFixed(0)} ms`),
    figure(
      part,
      `${label}: to commit p99`,
      commit.p99,
      "ms",
      undefined,
      `p50 ${commit.p50.toFixed(1)} ms, max ${commit.max.toFixed(0)} ms`,
    ),
    figure(part, `${label}: ticks missed`, l.missed, "", { op: "<=", value: 0 }, `of ${l.due} due`),
  );
}

/** Lets every timer tick a few times before the window, so the executors are warm and the load steady. */
async function warm(ctx: PartContext, seconds: number): Promise<void> {
  ctx.log(`Timers: ${seconds} s warm-up`);
  await sleep(seconds * 1000);
}

export async function timers(ctx: PartContext, out: Out): Promise<void> {
  const part = "Timers";
  const windowS = Math.max(10, ctx.settings.durationS);
  {
    const fount = await ctx.fount();
    const key = await paidUser(fount, "bench-timers");
    ctx.log(`${part}: deploying ${idleTimers} one-second timers`);
    const ids = await deployMany(fount, key, tickerCode, idleTimers);
    await warm(ctx, Math.max(3, ctx.settings.warmupS));
    const from = Date.now();
    ctx.log(`${part}: ${windowS} s window, idle`);
    await sleep(windowS * 1000);
    const to = Date.now() - 1_000; // ticks of the last second may still be committing
    report(
      part,
      `${idleTimers} timers, idle`,
      await lateness(fount, key, ids, from, to),
      out,
      `run start after the scheduled time, ${windowS} s`,
    );
    await fount.stop();
  }
  {
    const fount = await ctx.fount();
    const key = await paidUser(fount, "bench-timers");
    const slowKey = await paidUser(fount, "bench-slowpoke");
    ctx.log(`${part}: deploying ${busyTimers} one-second timers and another tenant's 20 s one`);
    const ids = await deployMany(fount, key, tickerCode, busyTimers);
    await deployMany(fount, slowKey, slowCode, 1);
    await warm(ctx, Math.max(3, ctx.settings.warmupS));
    // The slow source runs from its first tick on, every tick skipped until its run ends; a window of
    // the slow run's length always lies within one of its runs or spans the gap between two.
    const window = Math.max(windowS, slowRunMs / 1000 + 5);
    const from = Date.now();
    ctx.log(`${part}: ${window} s window beside a timer whose run takes ${slowRunMs / 1000} s`);
    await sleep(window * 1000);
    const to = Date.now() - 1_000;
    report(
      part,
      `${busyTimers} timers, a 20 s run beside`,
      await lateness(fount, key, ids, from, to),
      out,
      `another tenant's 1 s timer takes ${slowRunMs / 1000} s per run; ${window} s`,
    );
  }
}
