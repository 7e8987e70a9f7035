/**
 * Main module of an executor process: one per owner, forked by `ExecutorPool` with an empty
 * environment, Node's permission model and (as root) the owner's own uid. It runs no component code
 * itself: each source gets a realm, a worker thread running realm.ts with its own globals, module
 * cache and heap cap, and each inspection a throwaway one. This thread relays the pool's messages to
 * the realms and theirs back, stamped with the source they concern, stops a realm on request or when
 * work left behind after `run` keeps it busy, and reports the CPU such work used.
 * Imports only node: built-ins and its siblings, so it needs read access to this folder alone.
 */
import type { EventLoopUtilization } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import { installEgressGuard } from "./egress-guard.ts";
import type { ChildInit, FromChild, ToChild } from "./protocol.ts";

/** How often the CPU of idle realms is measured and reported. */
const USAGE_TICK_MS = 1000;
/** A tick in which an idle realm's thread was busy at least this share of the time counts as spinning. */
const SPIN_UTILIZATION = 0.9;
/**
 * Less activity than this in an idle tick is the realm's own housekeeping (a GC, a relayed message), not
 * work left behind: charging it moved an idle owner's compute usage at random (seen as a flaky
 * "nothing changed" in test/http/malformed.test.ts).
 */
const IDLE_CHARGE_FLOOR_MS = 5;
/** How long a realm's heap statistics may take before the realm is left out of a shed. */
const SHED_STATS_MS = 1000;

if (!process.send) {
  process.stderr.write("runner.ts is started by the executor pool over an IPC channel\n");
  process.exit(1);
}
const ipcSend = process.send.bind(process);
const init = JSON.parse(process.argv[2] ?? "{}") as ChildInit;
// Component code runs in realms, which install the egress check themselves; this thread gets it too.
if (init.egress) installEgressGuard(init.egress);
// The pool runs this file bundled to runner.mjs, with realm.ts bundled to realm.mjs beside it.
const realmFile = new URL("./realm.mjs", import.meta.url);

interface Realm {
  worker: Worker;
  /** The source it runs, or the inspection. */
  sid: string | undefined;
  inspect: number | undefined;
  /** Batches sent and not yet answered with `done`. */
  busy: number;
  /** Event-loop use when the realm last went idle (or was last measured idle). */
  idleMark: EventLoopUtilization | undefined;
  /** ms the realm's thread was busy during idle ticks in a row. */
  spinMs: number;
  /** Inspections this realm has served. */
  inspected: number;
  /** Stopped on purpose: its messages and its exit are no longer reported. */
  stopped: boolean;
  fatal: Extract<FromChild, { t: "fatal" }> | undefined;
  error: (Error & { code?: string }) | undefined;
}

const realms = new Map<string, Realm>();
const inspections = new Map<number, Realm>();
/**
 * A realm started ahead and not yet given to anyone: starting a worker and loading realm.ts takes
 * 50-300 ms (more on a loaded machine), which a source's first call would otherwise wait for.
 */
let spare: Realm | undefined;
let spareSince = 0;
/**
 * A spare nobody took for this long is stopped: a live realm costs about 10 MB, and an owner whose
 * sources all have their realm would keep paying for it. Deploying several sources in a row keeps one.
 */
const SPARE_IDLE_MS = 10_000;
/**
 * The idle inspection realm: inspections (loading a component to read its definition) reuse one realm
 * one after another, as starting a realm per inspection made publishing several components slow. A
 * realm whose inspection timed out or failed fatally is not reused.
 */
let inspector: Realm | undefined;
let inspectorSince = 0;
/**
 * An idle inspection realm is stopped after this long: most owners deploy rarely, and components
 * published together are deployed seconds apart. Like the spare, it costs about 10 MB while it waits.
 */
const INSPECTOR_IDLE_MS = 10_000;
/** Inspections one realm serves before it is replaced (each loads a module it then keeps). */
const INSPECTIONS_PER_REALM = 50;

function send(message: FromChild): void {
  try {
    ipcSend(message);
  } catch (err) {
    // A realm's message that JSON cannot carry; its invocation then ends at the pool's timeout.
    process.stderr.write(`executor: a message could not be sent: ${(err as Error).message}\n`);
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** Gives the spare realm (or a new one) to a source or an inspection, and starts the next spare. */
function startRealm(sid: string | undefined, inspect: number | undefined): Realm {
  const realm = spare ?? newRealm();
  spare = undefined;
  realm.sid = sid;
  realm.inspect = inspect;
  if (sid !== undefined) realms.set(sid, realm);
  if (inspect !== undefined) inspections.set(inspect, realm);
  setImmediate(() => {
    startSpare();
  });
  return realm;
}

function startSpare(): void {
  if (spare) return;
  spare = newRealm();
  spareSince = Date.now();
}

function newRealm(): Realm {
  const worker = new Worker(realmFile, {
    // The thread's name in /proc: how a realm's threads are told from Node's own.
    name: "realm",
    workerData: init,
    env: {},
    resourceLimits: { maxOldGenerationSizeMb: init.memoryMb },
  });
  const realm: Realm = {
    worker,
    sid: undefined,
    inspect: undefined,
    busy: 0,
    inspected: 0,
    idleMark: undefined,
    spinMs: 0,
    stopped: false,
    fatal: undefined,
    error: undefined,
  };
  worker.on("message", (m: unknown) => onRealmMessage(realm, m));
  worker.on("error", (err: Error) => {
    realm.error = err;
  });
  worker.on("exit", (code) => onRealmExit(realm, code));
  return realm;
}

function stopRealm(realm: Realm): void {
  if (realm.stopped) return;
  realm.stopped = true;
  chargeIdle(realm);
  if (realm.sid !== undefined && realms.get(realm.sid) === realm) realms.delete(realm.sid);
  if (realm.inspect !== undefined) inspections.delete(realm.inspect);
  // terminate() interrupts running JavaScript, a busy loop included.
  void realm.worker.terminate();
}

// ---- from a realm (untrusted: it runs the component's code) -------------------------------------

function onRealmMessage(realm: Realm, raw: unknown): void {
  if (realm.stopped || !isObject(raw)) return;
  const msg = raw as FromChild;
  const { sid } = realm;
  switch (msg.t) {
    case "got":
    case "started":
      if (sid !== undefined) send({ t: msg.t, sid });
      break;
    case "results":
      if (sid === undefined) return;
      if (msg.done === true && realm.busy > 0 && --realm.busy === 0) {
        realm.idleMark = realm.worker.performance.eventLoopUtilization();
        realm.spinMs = 0;
      }
      send({ ...msg, sid });
      break;
    case "respond":
      if (sid !== undefined) send({ t: "respond", q: msg.q, response: msg.response, sid });
      break;
    case "late":
      if (sid !== undefined) send({ t: "late", sid, q: msg.q });
      break;
    case "inspecting":
      if (realm.inspect !== undefined && msg.q === realm.inspect) send(msg);
      break;
    case "inspected":
      if (realm.inspect === undefined || msg.q !== realm.inspect) return;
      send(msg);
      inspections.delete(realm.inspect);
      realm.inspect = undefined;
      if (!inspector && ++realm.inspected < INSPECTIONS_PER_REALM) {
        inspector = realm;
        inspectorSince = Date.now();
      } else stopRealm(realm);
      break;
    case "fatal":
      // The realm ends itself right after; its exit reports this.
      realm.fatal ??= msg;
      break;
  }
}

function onRealmExit(realm: Realm, exitCode: number): void {
  if (realm === spare) spare = undefined;
  if (realm === inspector) inspector = undefined;
  if (realm.stopped) return;
  realm.stopped = true;
  chargeIdle(realm);
  if (realm.sid !== undefined && realms.get(realm.sid) === realm) realms.delete(realm.sid);
  if (realm.inspect !== undefined) inspections.delete(realm.inspect);
  if (realm.sid === undefined && realm.inspect === undefined) return;
  const where = realm.sid !== undefined ? { sid: realm.sid } : { inspect: realm.inspect };
  const { fatal, error } = realm;
  if (error?.code === "ERR_WORKER_OUT_OF_MEMORY") {
    send({
      t: "fatal",
      code: "out_of_memory",
      message: `The source ran out of memory (heap limit ${init.memoryMb} MB)`,
      ...where,
    });
  } else if (fatal) {
    const out: FromChild = {
      t: "fatal",
      code: String(fatal.code),
      message: String(fatal.message),
      ...where,
    };
    if (typeof fatal.stack === "string") out.stack = fatal.stack;
    if (typeof fatal.q === "number") out.q = fatal.q;
    send(out);
  } else {
    const why = error ? `: ${error.message}` : ` (exit code ${exitCode})`;
    send({
      t: "fatal",
      code: "process_exit",
      message: `The source's realm ended unexpectedly${why}`,
      ...where,
    });
  }
}

// ---- from the pool ------------------------------------------------------------------------------

process.on("message", (raw: unknown) => {
  if (!isObject(raw)) return;
  const msg = raw as ToChild;
  switch (msg.t) {
    case "batch": {
      let realm = realms.get(msg.sid);
      if (!realm) {
        // The source's realm is gone (stopped, or it died): the pool hands this batch's calls to the
        // next one, which carries the db a fresh realm needs.
        if (!msg.db) return;
        realm = startRealm(msg.sid, undefined);
      }
      if (realm.busy++ === 0) chargeIdle(realm);
      realm.idleMark = undefined;
      realm.worker.postMessage(msg);
      break;
    }
    case "inspect": {
      const realm = inspector ?? startRealm(undefined, msg.q);
      inspector = undefined;
      realm.inspect = msg.q;
      inspections.set(msg.q, realm);
      realm.worker.postMessage(msg);
      break;
    }
    case "forget": {
      const realm = realms.get(msg.sid);
      if (realm) stopRealm(realm);
      break;
    }
    case "shed":
      void shed(String(msg.message));
      break;
    case "stop": {
      const realm =
        typeof msg.sid === "string"
          ? realms.get(msg.sid)
          : typeof msg.q === "number"
            ? inspections.get(msg.q)
            : undefined;
      if (realm) stopRealm(realm);
      break;
    }
  }
});
process.on("disconnect", () => process.exit(0));

/** Stops the source realm holding the most memory: the one that pushed the process over its cap. */
async function shed(message: string): Promise<void> {
  let worst: { realm: Realm; bytes: number } | undefined;
  const sizes = await Promise.all(
    [...realms.values()].map(async (realm) => {
      // Answered by interrupting the realm's thread, so a busy one answers too; one that ended does not.
      const heap = await Promise.race([
        realm.worker.getHeapStatistics().catch(() => undefined),
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), SHED_STATS_MS).unref()),
      ]);
      const external = (heap as { external_memory?: number } | undefined)?.external_memory ?? 0;
      return { realm, bytes: heap ? heap.used_heap_size + external : 0 };
    }),
  );
  for (const size of sizes) if (!worst || size.bytes > worst.bytes) worst = size;
  if (!worst || worst.realm.stopped || worst.realm.sid === undefined) return;
  const { sid } = worst.realm;
  stopRealm(worst.realm);
  const mb = Math.round(worst.bytes / 1048576);
  send({ t: "fatal", code: "out_of_memory", message: `${message}; this source held ${mb} MB`, sid });
}

// ---- work left behind after `run`: measured, charged, and stopped when it spins ------------------

/** Reports the CPU an idle realm used since it was last measured, and whether it spins. */
function chargeIdle(realm: Realm): number {
  const mark = realm.idleMark;
  if (!mark || realm.sid === undefined) return 0;
  const now = realm.worker.performance.eventLoopUtilization();
  const delta = realm.worker.performance.eventLoopUtilization(now, mark);
  realm.idleMark = now;
  const ms = Math.round(delta.active);
  if (ms >= IDLE_CHARGE_FLOOR_MS) send({ t: "usage", sid: realm.sid, ms });
  realm.spinMs = delta.utilization >= SPIN_UTILIZATION ? realm.spinMs + delta.active : 0;
  return ms;
}

setInterval(() => {
  if (inspector && Date.now() - inspectorSince > INSPECTOR_IDLE_MS) {
    stopRealm(inspector);
    inspector = undefined;
  }
  if (spare && Date.now() - spareSince > SPARE_IDLE_MS) {
    stopRealm(spare);
    spare = undefined;
  }
  for (const realm of [...realms.values()]) {
    if (realm.busy > 0 || realm.stopped) continue;
    chargeIdle(realm);
    if (realm.spinMs >= init.lateWorkLimitMs && realm.sid !== undefined) {
      const { sid } = realm;
      const spun = Math.round(realm.spinMs);
      realm.idleMark = undefined;
      stopRealm(realm);
      send({ t: "usage", sid, ms: 0, stopped: true });
      process.stderr.write(`executor: realm of ${sid} stopped after spinning ${spun} ms outside run\n`);
    }
  }
}, USAGE_TICK_MS).unref();

startSpare();
send({ t: "ready", pid: process.pid });
