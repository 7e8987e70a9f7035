/**
 * What the parts of an executor process's main thread share: its channel to the pool, the settings the
 * pool started it with (its only argv entry), and the record it keeps of each realm.
 */
import type { EventLoopUtilization } from "node:perf_hooks";
import type { Worker } from "node:worker_threads";
import type { ChildInit, FromChild } from "../protocol.ts";

// runner.ts stops the process first when it was started without an IPC channel.
const ipcSend = process.send?.bind(process);
export const init = JSON.parse(process.argv[2] ?? "{}") as ChildInit;

/** A realm (a worker thread running realm/realm.ts) as this thread keeps track of it. */
export interface Realm {
  worker: Worker;
  /**
   * The sources it runs: one, or several once the owner has more sources than realms (see
   * `realmFor`). None for an inspection's realm, or a vacant one whose sources left.
   */
  sids: Set<string>;
  inspect: number | undefined;
  /** Batches sent and not yet answered with `done`, in all and per source. */
  busy: number;
  busyBy: Map<string, number>;
  /** Invocations sent and not yet answered, and their source: whom a `respond` or a fatal error concerns. */
  calls: Map<number, string>;
  /** When a batch was last sent to it, and for which source (charged for work left behind). */
  lastUsed: number;
  lastSid: string | undefined;
  /** Event-loop use when the realm last went idle (or was last measured idle): tells spinning. */
  idleMark: EventLoopUtilization | undefined;
  /**
   * The thread's CPU time (µs) when it was last measured idle: what the next charge counts from. Set
   * by the realm's last results of a busy spell (their `cpu`), then by each charge's reading; none while
   * that reading is on its way.
   */
  cpuMark: number | undefined;
  /** Counts the realm's busy spells, so that a CPU reading taken in an earlier idle spell is dropped. */
  spell: number;
  /** ms the realm's thread was busy during idle ticks in a row. */
  spinMs: number;
  /** Inspections this realm has served. */
  inspected: number;
  /**
   * The entry file of each component an inspection loaded in this realm: a source whose component is
   * the only one loaded here may take the realm as its own (`realmFor`).
   */
  inspectedFiles: Set<string>;
  /** Stopped on purpose: its messages and its exit are no longer reported. */
  stopped: boolean;
  fatal: Extract<FromChild, { t: "fatal" }> | undefined;
  error: (Error & { code?: string }) | undefined;
}

/**
 * A batch's `got` or `started` not yet relayed, by source. A realm says `started` just before its
 * component code runs, and the results of a quick run follow at once: relayed at the end of this turn of
 * the event loop, or in the message of the results if they come in the same turn, the pool is woken once
 * for both (issue 29, manual runs). Any other message relays them first, so the pool sees what it saw
 * before, in the same order.
 */
const starts = new Map<string, "got" | "started">();
let startsFlush: NodeJS.Immediate | undefined;

/** Relays a realm's `got` or `started` for `sid` by the end of this turn (see `starts`). */
export function relayStart(t: "got" | "started", sid: string): void {
  // `started` implies `got` (the same batch); a `got` behind a pending `started` is a later batch's.
  if (t === "got" && starts.has(sid)) flushStarts();
  if (starts.get(sid) !== "started") starts.set(sid, t);
  startsFlush ??= setImmediate(flushStarts);
}

function flushStarts(): void {
  clearImmediate(startsFlush);
  startsFlush = undefined;
  for (const [sid, t] of starts) {
    starts.delete(sid);
    sendNow({ t, sid });
  }
}

/** Sends to the pool, after the starts waiting; a message that cannot be sent is written to stderr and dropped. */
export function send(message: FromChild): void {
  if (message.t === "results") {
    // Whatever a realm put there, this says only what the runner holds.
    const started = starts.get(message.sid);
    starts.delete(message.sid);
    message = { ...message, started };
  }
  if (starts.size > 0) flushStarts();
  sendNow(message);
}

function sendNow(message: FromChild): void {
  try {
    ipcSend!(message);
  } catch (err) {
    // A realm's message that JSON cannot carry; its invocation then ends at the pool's timeout.
    process.stderr.write(`executor: a message could not be sent: ${(err as Error).message}\n`);
  }
}
export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** Whether the realm runs a batch of `sid` now. */
export function busyOf(realm: Realm, sid: string): boolean {
  return (realm.busyBy.get(sid) ?? 0) > 0;
}
