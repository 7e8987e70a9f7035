/**
 * Main module of an executor process: one per owner, forked by `ExecutorPool` with an empty
 * environment, Node's permission model and (as root) the owner's own uid. It runs no component code
 * itself: each source gets a realm, a worker thread running realm/realm.ts with its own globals, module
 * cache and heap cap, and each inspection a throwaway one. This thread relays the pool's messages to
 * the realms and theirs back, stamped with the source they concern, stops a realm on request or when
 * work left behind after `run` keeps it busy, and reports the CPU such work used. Its parts:
 * realms.ts (the realms and what they say), usage.ts (work left behind), state.ts (what they share).
 * Imports only node: built-ins and files of child/, bundled with it (child/README.md).
 */
import { installEgressGuard } from "../guards/egress-guard.ts";
import type { ToChild } from "../protocol.ts";
import {
  apiRequests,
  inspectionRealm,
  inspections,
  live,
  ownerArrived,
  realmFor,
  realms,
  reportEnd,
  startSpare,
  stopRealm,
  stopSourceRealm,
  sweep,
} from "./realms.ts";
import { init, isObject, type Realm, send } from "./state.ts";
import { chargeIdle, USAGE_TICK_MS } from "./usage.ts";

/** How long a realm's heap statistics may take before the realm is left out of a shed. */
const SHED_STATS_MS = 1000;

if (!process.send) {
  process.stderr.write("runner.ts is started by the executor pool over an IPC channel\n");
  process.exit(1);
}
// Component code runs in realms, which install the egress check themselves; this thread gets it too.
if (init.egress) installEgressGuard(init.egress);

// ---- from the pool ------------------------------------------------------------------------------

process.on("message", (raw: unknown) => {
  if (!isObject(raw)) return;
  const msg = raw as ToChild;
  ownerArrived();
  sweepIfDue();
  switch (msg.t) {
    case "batch": {
      const { sid } = msg;
      let realm = realms.get(sid);
      if (!realm) {
        // The source's realm is gone (stopped, or it died): the pool hands this batch's calls to the
        // next one, which carries the db a fresh realm needs.
        if (!msg.db) return;
        realm = realmFor(
          sid,
          msg.cfgs.map((cfg) => cfg.entryFile),
        );
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
    case "inspect":
      inspectionRealm(msg.q, msg.entryFile).worker.postMessage(msg);
      break;
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

// ---- the sweep ----------------------------------------------------------------------------------

/**
 * The sweep (realms.ts) runs every USAGE_TICK_MS while it has something to watch (a realm to stop
 * soon, a busy one, work left behind), and at most that often on a message from the pool, which wakes
 * this thread anyway. Once a sweep finds nothing to watch, its timer waits twice as long after each,
 * up to QUIET_SWEEP_MS. A timer wakes this thread on its own: on the 2-core VM of issue 29 a wake of an
 * executor's idle thread cost about 0.8 ms of CPU (a bare `node -e 'setInterval(…, 1000)'` spent as
 * much each second), so a tenant hit once a second no longer pays a second wake for the sweep, and an
 * idle one wakes every 8 s instead of every second. Charges and the spin check lose nothing: each
 * sweep measures the whole time since the last.
 */
const QUIET_SWEEP_MS = 8 * USAGE_TICK_MS;
let lastSweep = Date.now();
let sweepTimer: NodeJS.Timeout | undefined;
let sweepWait = USAGE_TICK_MS;

function runSweep(): void {
  lastSweep = Date.now();
  sweepWait = sweep() ? USAGE_TICK_MS : Math.min(QUIET_SWEEP_MS, Math.max(2 * USAGE_TICK_MS, sweepWait * 2));
  clearTimeout(sweepTimer);
  sweepTimer = setTimeout(runSweep, sweepWait).unref();
}

/** Runs the sweep now if it is due: this thread is awake anyway. */
function sweepIfDue(): void {
  if (Date.now() - lastSweep >= USAGE_TICK_MS) runSweep();
}

sweepTimer = setTimeout(runSweep, sweepWait).unref();

if (init.spareRealms !== false) startSpare();
send({ t: "ready", pid: process.pid });
