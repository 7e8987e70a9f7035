/**
 * A source's batches in a realm: run one after another in arrival order, each acknowledged when it
 * starts; results flushed while a batch runs long, so the pool times and blames the right invocation;
 * and the source's db copy, which a batch brings when the realm lacks it and successful writes update.
 */
import { performance } from "node:perf_hooks";
import type { SerializedError } from "../../../errors.ts";
import { isLoaded } from "../component/definition.ts";
import type { BatchMessage, ItemResult } from "../protocol.ts";
import { describe } from "./errors.ts";
import { runItem } from "./run.ts";
import { forgetEnv } from "./sandbox.ts";
import { send } from "./state.ts";

/**
 * While a batch runs longer than this, finished results are flushed before the next item starts (or
 * from a timer while an item awaits), so the parent times and blames the right invocation; a batch
 * of quick invocations still answers with one message.
 */
const FLUSH_MS = 2;
/** Results holding more emitted JSON than this are sent at once, so no single message grows huge. */
const FLUSH_CHARS = 4 * 1024 * 1024;

/**
 * This thread's CPU time, taken before any component code loads, so that none can change what the
 * runner charges work left behind after a batch from.
 */
const threadCpuUsage = process.threadCpuUsage.bind(process);

/** This thread's CPU time so far, in µs. */
function cpuNow(): number {
  const use = threadCpuUsage();
  return use.user + use.system;
}

/** Each source's db copy: the version it holds and the values as JSON text. */
const dbs = new Map<string, { v: number; data: Map<string, string> }>();

/**
 * Tells the parent the batch arrived. When the first item's module is already loaded nothing stands
 * between here and its component code, so one `started` says both; otherwise `got` now and `started`
 * (from runItem) once the module has loaded. Returns whether `started` is still owed.
 */
function acknowledge(msg: BatchMessage): boolean {
  const first = msg.items[0];
  const cfg = first ? msg.cfgs[first.c] : undefined;
  if (cfg && isLoaded(cfg.entryFile)) {
    send({ t: "started", sid: msg.sid });
    return false;
  }
  send({ t: "got", sid: msg.sid });
  return true;
}

async function runBatch(msg: BatchMessage, startOwed: boolean): Promise<void> {
  const { sid } = msg;
  if (msg.db) {
    const data = new Map<string, string>();
    for (const [key, value] of Object.entries(msg.db.data)) {
      const json = JSON.stringify(value);
      if (json !== undefined) data.set(key, json);
    }
    dbs.set(sid, { v: msg.db.v, data });
  }
  let state = dbs.get(sid);
  if (!state) {
    state = { v: -1, data: new Map() };
    dbs.set(sid, state);
  }
  const pending: ItemResult[] = [];
  let pendingChars = 0;
  let lastFlush = performance.now();
  let current: { q: number; started: number } | undefined;
  const started = () => send({ t: "started", sid });
  const flush = () => {
    const now = performance.now();
    const progress = current ? { running: current.q, since: now - current.started } : {};
    send({ t: "results", sid, results: pending.splice(0), done: false, ...progress });
    pendingChars = 0;
    lastFlush = now;
  };
  // Fires only while an invocation awaits something; a batch of quick ones finishes first. None is set
  // after the batch's last invocation, whose results go at once: a timer cleared before it fires still
  // wakes the thread when it was due (Node leaves its loop's timer armed), which cost a batch of one,
  // as every manual run is, a second wake of the realm 2 ms later (issue 29).
  let timer: NodeJS.Timeout | undefined;
  const last = msg.items[msg.items.length - 1];
  const flushSoon = () => {
    timer ??= setTimeout(() => {
      timer = undefined;
      if (pending.length > 0) flush();
    }, FLUSH_MS);
  };
  try {
    for (const item of msg.items) {
      current = { q: item.q, started: performance.now() };
      if (pending.length > 0 && current.started - lastFlush >= FLUSH_MS) flush();
      const cfg = msg.cfgs[item.c];
      const done = cfg
        ? await runItem(sid, item, cfg, state.data, item === msg.items[0] && startOwed ? started : undefined)
        : { result: errorResult(item.q, { code: "executor_crash", message: "Malformed batch" }), chars: 0 };
      pending.push(done.result);
      pendingChars += done.chars;
      if (pendingChars >= FLUSH_CHARS) {
        current = undefined;
        flush();
      } else if (item !== last) flushSoon();
    }
  } finally {
    clearTimeout(timer);
  }
  current = undefined;
  try {
    send({ t: "results", sid, results: pending, done: true, cpu: cpuNow() });
  } catch (err) {
    // Only reachable if a result slipped past the JSON copies above; fail those invocations, keep the process.
    const error = { code: "component_error", message: `The result could not be sent: ${describe(err)}` };
    send({
      t: "results",
      sid,
      results: pending.map((r) => errorResult(r.q, error)),
      done: true,
      cpu: cpuNow(),
    });
  }
}

function errorResult(q: number, error: SerializedError): ItemResult {
  return { q, emits: [], logs: [], dbWrites: {}, warnings: [], error, durationMs: 0 };
}

/**
 * Batches of a source waiting behind its running one, in arrival order. The pool may send the next
 * batch before the running one has answered, so the process goes on without waiting for the server
 * between batches; each batch is acknowledged (`got`/`started`) only when it starts.
 */
const waiting = new Map<string, BatchMessage[]>();

/** Runs a batch now, or after the batches of its source already here. */
export function onBatch(msg: BatchMessage): void {
  const queue = waiting.get(msg.sid);
  if (queue) queue.push(msg);
  else {
    waiting.set(msg.sid, []);
    void runBatches(msg);
  }
}

async function runBatches(first: BatchMessage): Promise<void> {
  for (let msg: BatchMessage | undefined = first; msg; msg = waiting.get(first.sid)?.shift()) {
    await runBatch(msg, acknowledge(msg));
  }
  waiting.delete(first.sid);
}

/** The source leaves this shared realm (its next batch, here or elsewhere, carries its db). */
export function forgetSource(sid: string): void {
  if (waiting.has(sid)) return;
  dbs.delete(sid);
  forgetEnv(sid);
}
