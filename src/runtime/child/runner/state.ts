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
  /** The thread's CPU time (µs) when it last went idle or was last measured idle: what is charged. */
  cpuMark: number | undefined;
  /** Counts the realm's busy spells, so that a CPU reading taken in an earlier idle spell is dropped. */
  spell: number;
  /** ms the realm's thread was busy during idle ticks in a row. */
  spinMs: number;
  /** Inspections this realm has served. */
  inspected: number;
  /** Stopped on purpose: its messages and its exit are no longer reported. */
  stopped: boolean;
  fatal: Extract<FromChild, { t: "fatal" }> | undefined;
  error: (Error & { code?: string }) | undefined;
}

/** Sends to the pool; a message that cannot be sent is written to stderr and dropped. */
export function send(message: FromChild): void {
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
