/**
 * The realms of an executor process and what they say: which realm runs which source (one each while
 * the owner is within its budget, shared past it), the spare started ahead and the inspection realm
 * kept for reuse, starting and stopping them, and relaying their messages to the pool stamped with
 * the source they concern. What a realm says is untrusted: it runs the component's code.
 */
import { Worker } from "node:worker_threads";
import { definitionTooLarge, jsonBytesOver, maxDefinitionBytes } from "../guards/json-size.ts";
import type { FromChild } from "../protocol.ts";
import { busyOf, init, isObject, type Realm, relayStart, send } from "./state.ts";
import { chargeIdle } from "./usage.ts";

// The pool runs runner/runner.ts bundled to runner.mjs, with realm/realm.ts bundled to realm.mjs beside it.
const realmFile = new URL("./realm.mjs", import.meta.url);

/** Each source's realm (several sources may map to one). */
export const realms = new Map<string, Realm>();
/** The realms given to sources, vacant ones included: at most `budget`. */
export const live = new Set<Realm>();
/** Realms for sources at most; past it sources share them (docs/isolation.md). */
const budget = Math.max(1, init.realmsPerOwner ?? 16);
/**
 * A realm whose last source left is kept this long after it left (or after its last batch, whichever
 * is later), for the next source to reuse: an owner with more busy sources than realms would otherwise
 * stop and start workers all the time (each start costs 50-250 ms of CPU).
 */
const VACANT_KEEP_MS = 5000;
/** The realm of each inspection in progress. */
export const inspections = new Map<number, Realm>();
/**
 * Requests to https://api.pipedream.com waiting for the pool's answer, by the number the pool knows
 * them by: each realm numbers its own, so the runner gives them numbers unique in the process.
 */
export const apiRequests = new Map<number, { realm: Realm; id: number }>();
let apiSeq = 0;
/**
 * A realm started ahead and not yet given to anyone: starting a worker and loading realm.ts takes
 * 50-300 ms (more on a loaded machine), which a source's first call would otherwise wait for.
 */
let spare: Realm | undefined;
let spareSince = 0;
/**
 * A spare process (`init.spare`) keeps its spare realm until its owner's first message: whenever that
 * comes, the realm is what it was started for.
 */
let held = init.spare === true;

/** The pool spoke to this process: a spare realm nobody takes is stopped from now on. */
export function ownerArrived(): void {
  if (!held) return;
  held = false;
  spareSince = Date.now();
}
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
/**
 * Inspections closer together than this are a burst (components published together, a script deploying
 * many sources): during one, a source that takes the inspection realm starts a spare for the next.
 */
const BURST_MS = 10_000;
let lastInspectionAt = Number.NEGATIVE_INFINITY;
/** The last inspection came within `BURST_MS` of the one before it. */
let inBurst = false;

/**
 * Gives the spare realm (or a new one) to a source or an inspection. The taken spare is not replaced
 * here: replacing it cost every executor a 10 MB realm for its first 10 s and, once that spare was
 * stopped unused, about 1.7 MB for good (glibc and V8 keep pages of a stopped worker; issue 29,
 * docs/architecture.md). Spares start with the process and with inspections in a burst (`inspectionRealm`).
 */
function startRealm(inspect: number | undefined): Realm {
  const realm = spare ?? newRealm();
  spare = undefined;
  realm.inspect = inspect;
  if (inspect !== undefined) inspections.set(inspect, realm);
  return realm;
}

/** Starts a realm ahead, for the next source or inspection, unless one waits already. */
export function startSpare(): void {
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
    resourceLimits: {
      maxOldGenerationSizeMb: init.memoryMb,
      ...(init.realmYoungMb ? { maxYoungGenerationSizeMb: init.realmYoungMb } : {}),
    },
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
    inspectedFiles: new Set(),
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
 * The idle inspection realm, taken for a source whose component files (`entryFiles`) are the one
 * component it inspected: a deploy inspects the component and then calls the new source, which thus
 * runs in the realm that loaded its module, instead of a second realm started meanwhile. Each realm
 * started and stopped leaves about 1.7 MB with the process, and one that loaded a component more
 * (issue 29, docs/architecture.md, "Cheaper tenants"). No other component's code ever ran there.
 */
function takeInspector(entryFiles: readonly string[]): Realm | undefined {
  const realm = inspector;
  if (realm?.inspectedFiles.size !== 1 || entryFiles.length === 0) return undefined;
  if (!entryFiles.every((file) => realm.inspectedFiles.has(file))) return undefined;
  inspector = undefined;
  // In a burst of deploys the next inspection comes soon: a realm for it starts now, while this
  // source runs, as the inspection realm kept for reuse would have served it.
  if (inBurst && init.spareRealms !== false) startSpare();
  return realm;
}

/**
 * The realm a source without one gets: a vacant realm, else (within the owner's budget) the idle
 * inspection realm that loaded the source's component and nothing else, or a new one, else a share
 * of the least busy live one (the source then stays there until it leaves).
 */
export function realmFor(sid: string, entryFiles: readonly string[]): Realm {
  let realm: Realm | undefined;
  for (const r of live) if (r.sids.size === 0) realm = r;
  if (!realm && live.size < budget) {
    realm = takeInspector(entryFiles);
    if (realm) live.add(realm);
  }
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

/**
 * Tells the pool about the sources of a realm that ended, other than those it already knows about:
 * the culprit (when known) gets `primary`, the others sharing the realm an `executor_crash` for a
 * running batch or just `dropped` (their db copy went with the realm). With no known culprit every
 * source with a running batch is told `primary` (or all, when none runs).
 */
export function reportEnd(
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
export function stopRealm(realm: Realm): void {
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
export function stopSourceRealm(realm: Realm, sid: string, why: string): void {
  const others = [...realm.sids].filter((other) => other !== sid);
  stopRealm(realm);
  reportEnd(realm, others, { code: "executor_crash", message: why }, sid);
}

/**
 * The realm an inspection of `entryFile` runs in (the idle inspection realm, else the spare or a new
 * one). It starts no spare for the deploy's source, which takes the inspection's realm
 * (`takeInspector`): a spare started for it would only be stopped unused.
 */
export function inspectionRealm(q: number, entryFile: string): Realm {
  const realm = inspector ?? startRealm(q);
  inspector = undefined;
  realm.inspect = q;
  realm.inspectedFiles.add(entryFile);
  inspections.set(q, realm);
  const now = Date.now();
  inBurst = now - lastInspectionAt < BURST_MS;
  lastInspectionAt = now;
  return realm;
}

/**
 * Stops the spare, the inspection realm and vacant realms nobody took in time, charges idle realms the
 * CPU used by work left behind, and stops a realm that keeps spinning (runner.ts says when). Returns
 * whether anything is left to watch soon: a realm waiting to be stopped, a busy one, or an idle one
 * that did more than its housekeeping since the last sweep.
 */
export function sweep(): boolean {
  let watch = false;
  if (inspector && Date.now() - inspectorSince > INSPECTOR_IDLE_MS) {
    stopRealm(inspector);
    inspector = undefined;
  }
  if (spare && !held && Date.now() - spareSince > SPARE_IDLE_MS) {
    stopRealm(spare);
    spare = undefined;
  }
  if (inspector || (spare && !held)) watch = true;
  for (const realm of [...live]) {
    if (realm.stopped) continue;
    if (realm.busy > 0) {
      watch = true;
      continue;
    }
    if (realm.sids.size === 0) {
      if (Date.now() - realm.lastUsed > VACANT_KEEP_MS) stopRealm(realm);
      else watch = true;
      continue;
    }
    if (chargeIdle(realm) || realm.spinMs > 0) watch = true;
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
  return watch;
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
      if (sid !== undefined) relayStart(msg.t, sid);
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
          // The realm's CPU time as it sent these results: what work left behind is charged from.
          if (typeof msg.cpu === "number" && Number.isFinite(msg.cpu)) realm.cpuMark = msg.cpu;
        }
      }
      const { cpu: _cpu, ...relayed } = msg;
      send({ ...relayed, sid });
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
    case "inspected": {
      if (realm.inspect === undefined || msg.q !== realm.inspect) return;
      // Not sent (nor parsed by the server) whole when over the bound: a few bytes of code can compute it.
      const answer = jsonBytesOver(msg, maxDefinitionBytes) ? definitionTooLarge(msg.q) : msg;
      send(answer);
      inspections.delete(realm.inspect);
      realm.inspect = undefined;
      // A component that failed to load is no source's: its realm is never taken for one.
      if (answer.error !== undefined) realm.inspectedFiles.add("\0failed");
      if (!inspector && ++realm.inspected < INSPECTIONS_PER_REALM) {
        inspector = realm;
        inspectorSince = Date.now();
      } else stopRealm(realm);
      break;
    }
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
