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
import { installEgressGuard } from "../guards/egress-guard.ts";
import type { ChildInit, FromChild, ToChild } from "../protocol.ts";

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

/** Each source's realm (several sources may map to one). */
const realms = new Map<string, Realm>();
/** The realms given to sources, vacant ones included: at most `budget`. */
const live = new Set<Realm>();
/** Realms for sources at most; past it sources share them (docs/isolation.md). */
const budget = Math.max(1, init.realmsPerOwner ?? 16);
/**
 * A realm whose last source left is kept this long after it left (or after its last batch, whichever
 * is later), for the next source to reuse: an owner with more busy sources than realms would otherwise
 * stop and start workers all the time (each start costs 50-250 ms of CPU).
 */
const VACANT_KEEP_MS = 5000;
const inspections = new Map<number, Realm>();
/**
 * Requests to https://api.pipedream.com waiting for the pool's answer, by the number the pool knows
 * them by: each realm numbers its own, so the runner gives them numbers unique in the process.
 */
const apiRequests = new Map<number, { realm: Realm; id: number }>();
let apiSeq = 0;
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
function startRealm(inspect: number | undefined): Realm {
  const realm = spare ?? newRealm();
  spare = undefined;
  realm.inspect = inspect;
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
  enterScratch();
  const worker = new Worker(realmFile, {
    // The thread's name in /proc: how a realm's threads are told from Node's own.
    name: "realm",
    workerData: init,
    env: {},
    resourceLimits: { maxOldGenerationSizeMb: init.memoryMb },
  });
  const realm: Realm = {
    worker,
    sids: new Set(),
    inspect: undefined,
    busy: 0,
    busyBy: new Map(),
    calls: new Map(),
    lastUsed: Date.now(),
    lastSid: undefined,
    inspected: 0,
    idleMark: undefined,
    cpuMark: undefined,
    spell: 0,
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
  send({ t: "realm" });
  return realm;
}

/**
 * Enters the owner's scratch folder, this process's working directory, again by its path. A worker
 * thread reads the working directory as it starts; should the folder's tmpfs have been unmounted while
 * this process runs (lazily, as `umount -l` does: by an operator cleaning up, say), the directory the
 * process is in is unreachable, and every realm started after that failed with `ENOENT: process.cwd
 * failed` until the process was replaced. By path, it is whatever is there now: the new mount, or the
 * folder under the old one. One syscall per realm start, which costs 50-250 ms of CPU anyway.
 */
function enterScratch(): void {
  try {
    process.chdir(init.scratchDir);
  } catch {
    // The folder is gone altogether: the worker's own start error says so.
  }
}

/**
 * The realm a source without one gets: a vacant realm, else a new one while the owner is within its
 * budget, else a share of the least busy live one (the source then stays there until it leaves).
 */
function realmFor(sid: string): Realm {
  let realm: Realm | undefined;
  for (const r of live) if (r.sids.size === 0) realm = r;
  if (!realm && live.size >= budget) {
    for (const r of live)
      if (!realm || r.busy < realm.busy || (r.busy === realm.busy && r.sids.size < realm.sids.size))
        realm = r;
  }
  if (!realm) {
    realm = startRealm(undefined);
    live.add(realm);
  }
  realm.sids.add(sid);
  realms.set(sid, realm);
  return realm;
}

function busyOf(realm: Realm, sid: string): boolean {
  return (realm.busyBy.get(sid) ?? 0) > 0;
}

/**
 * Tells the pool about the sources of a realm that ended, other than those it already knows about:
 * the culprit (when known) gets `primary`, the others sharing the realm an `executor_crash` for a
 * running batch or just `dropped` (their db copy went with the realm). With no known culprit every
 * source with a running batch is told `primary` (or all, when none runs).
 */
function reportEnd(
  realm: Realm,
  sids: string[],
  primary: Omit<Extract<FromChild, { t: "fatal" }>, "t" | "sid" | "inspect">,
  culprit: string | undefined,
): void {
  const anyBusy = sids.some((sid) => busyOf(realm, sid));
  for (const sid of sids) {
    if (sid === culprit || (culprit === undefined && (busyOf(realm, sid) || !anyBusy))) {
      send({ t: "fatal", ...primary, sid });
    } else if (busyOf(realm, sid)) {
      send({
        t: "fatal",
        code: "executor_crash",
        message: `A source sharing this source's realm failed: ${primary.message}`,
        sid,
      });
    } else send({ t: "dropped", sid });
  }
}

/** Stops a realm on purpose; its messages and its exit are no longer reported. */
function stopRealm(realm: Realm): void {
  if (realm.stopped) return;
  realm.stopped = true;
  chargeIdle(realm);
  forgetRealm(realm);
  // terminate() interrupts running JavaScript, a busy loop included.
  void realm.worker.terminate();
}

function forgetRealm(realm: Realm): void {
  live.delete(realm);
  for (const sid of realm.sids) if (realms.get(sid) === realm) realms.delete(sid);
  if (realm.inspect !== undefined) inspections.delete(realm.inspect);
}

/** Stops a source's realm on purpose (the pool knows why); sources sharing it are told. */
function stopSourceRealm(realm: Realm, sid: string, why: string): void {
  const others = [...realm.sids].filter((other) => other !== sid);
  stopRealm(realm);
  reportEnd(realm, others, { code: "executor_crash", message: why }, sid);
}

// ---- from a realm (untrusted: it runs the component's code) -------------------------------------

function onRealmMessage(realm: Realm, raw: unknown): void {
  if (realm.stopped || !isObject(raw)) return;
  const msg = raw as FromChild;
  // A message may name only a source this realm runs.
  const sid = "sid" in msg && typeof msg.sid === "string" && realm.sids.has(msg.sid) ? msg.sid : undefined;
  switch (msg.t) {
    case "got":
    case "started":
      if (sid !== undefined) send({ t: msg.t, sid });
      break;
    case "results": {
      if (sid === undefined) return;
      if (Array.isArray(msg.results)) {
        for (const r of msg.results)
          if (isObject(r) && realm.calls.get(r.q as number) === sid) realm.calls.delete(r.q as number);
      }
      const mine = realm.busyBy.get(sid) ?? 0;
      if (msg.done === true && mine > 0) {
        if (mine === 1) realm.busyBy.delete(sid);
        else realm.busyBy.set(sid, mine - 1);
        if (--realm.busy === 0) {
          realm.idleMark = realm.worker.performance.eventLoopUtilization();
          realm.spinMs = 0;
          markCpu(realm, realm.spell);
        }
      }
      send({ ...msg, sid });
      break;
    }
    case "respond": {
      const of = realm.calls.get(msg.q);
      if (of !== undefined) send({ t: "respond", q: msg.q, response: msg.response, sid: of });
      break;
    }
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
    case "api": {
      if (typeof msg.id !== "number") return;
      const id = ++apiSeq;
      apiRequests.set(id, { realm, id: msg.id });
      // The pool checks the request itself; it is answered whichever source of the realm sent it.
      send({ t: "api", id, request: msg.request });
      break;
    }
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
  forgetRealm(realm);
  if (realm.sids.size === 0 && realm.inspect === undefined) return;
  const { fatal, error } = realm;
  let out: Omit<Extract<FromChild, { t: "fatal" }>, "t" | "sid" | "inspect">;
  if (error?.code === "ERR_WORKER_OUT_OF_MEMORY") {
    out = { code: "out_of_memory", message: `The source ran out of memory (heap limit ${init.memoryMb} MB)` };
  } else if (fatal) {
    out = { code: String(fatal.code), message: String(fatal.message) };
    if (typeof fatal.stack === "string") out.stack = fatal.stack;
    if (typeof fatal.q === "number") out.q = fatal.q;
  } else {
    const why = error ? `: ${error.message}` : ` (exit code ${exitCode})`;
    out = { code: "process_exit", message: `The source's realm ended unexpectedly${why}` };
  }
  if (realm.inspect !== undefined) send({ t: "fatal", ...out, inspect: realm.inspect });
  // The invocation blamed names the culprit among sources sharing the realm.
  const culprit =
    (out.q !== undefined ? realm.calls.get(out.q) : undefined) ??
    (realm.sids.size === 1 ? [...realm.sids][0] : undefined);
  reportEnd(realm, [...realm.sids], out, culprit);
}

// ---- from the pool ------------------------------------------------------------------------------

process.on("message", (raw: unknown) => {
  if (!isObject(raw)) return;
  const msg = raw as ToChild;
  switch (msg.t) {
    case "batch": {
      const { sid } = msg;
      let realm = realms.get(sid);
      if (!realm) {
        // The source's realm is gone (stopped, or it died): the pool hands this batch's calls to the
        // next one, which carries the db a fresh realm needs.
        if (!msg.db) return;
        realm = realmFor(sid);
      }
      if (realm.busy++ === 0) chargeIdle(realm);
      realm.busyBy.set(sid, (realm.busyBy.get(sid) ?? 0) + 1);
      for (const item of msg.items) realm.calls.set(item.q, sid);
      realm.idleMark = undefined;
      realm.cpuMark = undefined;
      realm.spell++;
      realm.lastUsed = Date.now();
      realm.lastSid = sid;
      realm.worker.postMessage(msg);
      break;
    }
    case "inspect": {
      const realm = inspector ?? startRealm(msg.q);
      inspector = undefined;
      realm.inspect = msg.q;
      inspections.set(msg.q, realm);
      realm.worker.postMessage(msg);
      break;
    }
    case "forget": {
      // The source leaves its realm; a realm left vacant is kept a while for the next source.
      const realm = realms.get(msg.sid);
      if (!realm) break;
      realms.delete(msg.sid);
      realm.sids.delete(msg.sid);
      realm.busyBy.delete(msg.sid);
      // Kept from now, not from its last batch: after a pause, the source that evicted this one (the
      // pool keeps 16 dbs per owner) takes the realm instead of starting a worker.
      if (realm.sids.size === 0) realm.lastUsed = Date.now();
      realm.worker.postMessage({ t: "forget", sid: msg.sid });
      break;
    }
    case "shed":
      void shed(String(msg.message));
      break;
    case "api": {
      const to = apiRequests.get(msg.id);
      apiRequests.delete(msg.id);
      if (to && !to.realm.stopped)
        to.realm.worker.postMessage({ t: "api", id: to.id, response: msg.response });
      break;
    }
    case "stop": {
      if (typeof msg.sid === "string") {
        const realm = realms.get(msg.sid);
        if (realm)
          stopSourceRealm(
            realm,
            msg.sid,
            "A source sharing this source's realm timed out, and the realm was stopped",
          );
      } else if (typeof msg.q === "number") {
        const realm = inspections.get(msg.q);
        if (realm) stopRealm(realm);
      }
      break;
    }
  }
});
process.on("disconnect", () => process.exit(0));

/** Stops the source realm holding the most memory: the one that pushed the process over its cap. */
async function shed(message: string): Promise<void> {
  let worst: { realm: Realm; bytes: number } | undefined;
  const sizes = await Promise.all(
    [...live].map(async (realm) => {
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
  if (!worst || worst.realm.stopped) return;
  const { realm } = worst;
  stopRealm(realm);
  const mb = Math.round(worst.bytes / 1048576);
  const held =
    realm.sids.size > 1
      ? `the realm this source shares with ${realm.sids.size - 1} other(s) held`
      : "this source held";
  reportEnd(
    realm,
    [...realm.sids],
    { code: "out_of_memory", message: `${message}; ${held} ${mb} MB` },
    undefined,
  );
}

// ---- work left behind after `run`: measured, charged, and stopped when it spins ------------------

/** The CPU time (µs) a realm's thread has used so far. */
async function cpuOf(realm: Realm): Promise<number> {
  const use = await realm.worker.cpuUsage();
  return use.user + use.system;
}

/** Remembers the realm's CPU time as the start of an idle spell, unless it went busy meanwhile. */
function markCpu(realm: Realm, spell: number): void {
  cpuOf(realm).then(
    (cpu) => {
      if (realm.spell === spell && realm.busy === 0 && !realm.stopped) realm.cpuMark = cpu;
    },
    () => undefined,
  );
}

/**
 * Reports the CPU an idle realm used since it was last measured, and tells whether it spins. What is
 * charged is the thread's CPU time, not its event loop's active time: on a loaded machine a realm's
 * housekeeping waits for a core while "active", and charging that wall time moved an idle owner's
 * compute usage at random (seen as a flaky "nothing changed" in test/http/malformed.test.ts). A realm
 * that ended can no longer be read, and is charged its event loop's active time instead.
 */
function chargeIdle(realm: Realm): void {
  const mark = realm.idleMark;
  if (!mark || realm.lastSid === undefined || realm.sids.size === 0) return;
  const now = realm.worker.performance.eventLoopUtilization();
  const delta = realm.worker.performance.eventLoopUtilization(now, mark);
  realm.idleMark = now;
  realm.spinMs = delta.utilization >= SPIN_UTILIZATION ? realm.spinMs + delta.active : 0;
  // Work left behind in a shared realm is charged to the source that ran last.
  const sid = realm.sids.has(realm.lastSid) ? realm.lastSid : [...realm.sids][0]!;
  const charge = (ms: number): void => {
    if (ms >= IDLE_CHARGE_FLOOR_MS) send({ t: "usage", sid, ms: Math.round(ms) });
  };
  const cpuMark = realm.cpuMark;
  const spell = realm.spell;
  if (cpuMark === undefined) {
    if (realm.stopped) charge(delta.active);
    return;
  }
  realm.cpuMark = undefined;
  cpuOf(realm).then(
    (cpu) => {
      charge((cpu - cpuMark) / 1000);
      if (realm.spell === spell && realm.busy === 0 && !realm.stopped) realm.cpuMark = cpu;
    },
    () => charge(delta.active),
  );
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
  for (const realm of [...live]) {
    if (realm.busy > 0 || realm.stopped) continue;
    if (realm.sids.size === 0) {
      if (Date.now() - realm.lastUsed > VACANT_KEEP_MS) stopRealm(realm);
      continue;
    }
    chargeIdle(realm);
    if (realm.spinMs >= init.lateWorkLimitMs && realm.lastSid !== undefined) {
      const sid = realm.sids.has(realm.lastSid) ? realm.lastSid : [...realm.sids][0]!;
      const spun = Math.round(realm.spinMs);
      realm.idleMark = undefined;
      stopSourceRealm(
        realm,
        sid,
        "Work another source sharing this realm left running kept it busy; it was stopped",
      );
      send({ t: "usage", sid, ms: 0, stopped: true });
      process.stderr.write(`executor: realm of ${sid} stopped after spinning ${spun} ms outside run\n`);
    }
  }
}, USAGE_TICK_MS).unref();

startSpare();
send({ t: "ready", pid: process.pid });
