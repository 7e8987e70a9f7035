/**
 * Work left behind after `run`: the CPU time an idle realm's thread uses is measured and charged to the
 * source that ran last, and a realm that keeps its thread busy is found out (realms.ts stops it).
 */
import { type Realm, send } from "./state.ts";

/** How often the CPU of idle realms is measured and reported. */
export const USAGE_TICK_MS = 1000;
/** A tick in which an idle realm's thread was busy at least this share of the time counts as spinning. */
const SPIN_UTILIZATION = 0.9;
/**
 * Less activity than this in an idle tick is the realm's own housekeeping (a GC, a relayed message), not
 * work left behind: charging it moved an idle owner's compute usage at random (seen as a flaky
 * "nothing changed" in test/http/malformed.test.ts).
 */
const IDLE_CHARGE_FLOOR_MS = 5;

/**
 * Reads the realm thread's CPU time (µs) as the mark its next charge counts from, unless the realm went
 * busy or ended meanwhile; `got` gets the reading too, `failed` is told when there is none (the realm
 * ended). Asking wakes the realm's thread, and its answer this one.
 */
function readMark(realm: Realm, got: (cpu: number) => void, failed: () => void): void {
  const spell = realm.spell;
  realm.worker.cpuUsage().then((use) => {
    const cpu = use.user + use.system;
    got(cpu);
    if (realm.spell === spell && realm.busy === 0 && !realm.stopped) realm.cpuMark = cpu;
  }, failed);
}

/**
 * Reports the CPU an idle realm used since it was last measured, tells whether it spins, and returns
 * whether it showed any activity past its housekeeping (the sweep then comes back soon, runner.ts). What is
 * charged is the thread's CPU time, not its event loop's active time: on a loaded machine a realm's
 * housekeeping waits for a core while "active", and charging that wall time moved an idle owner's
 * compute usage at random (seen as a flaky "nothing changed" in test/http/malformed.test.ts). A realm
 * that ended can no longer be read, and is charged its event loop's active time instead.
 *
 * An idle spell starts from the CPU time the realm itself put in its batch's last results (`cpu`, read
 * on its own thread as it sent them): reading it from here when each batch ended woke the realm's thread
 * and then the runner's again in the middle of every run, while the pool committed and answered it
 * (issue 29, manual runs; docs/architecture.md). Later stretches start from the reading taken at the
 * last charge; while that reading is on its way there is no mark, and the next tick charges from it.
 */
export function chargeIdle(realm: Realm): boolean {
  const mark = realm.idleMark;
  if (!mark || realm.lastSid === undefined || realm.sids.size === 0) return false;
  const now = realm.worker.performance.eventLoopUtilization();
  const delta = realm.worker.performance.eventLoopUtilization(now, mark);
  realm.idleMark = now;
  realm.spinMs = delta.utilization >= SPIN_UTILIZATION ? realm.spinMs + delta.active : 0;
  const worked = delta.active >= IDLE_CHARGE_FLOOR_MS;
  // A quiet tick: the thread cannot have used more CPU than its event loop was active, under the floor,
  // so there is nothing to charge, and reading its CPU (which wakes the realm's thread, then this one)
  // is skipped. The mark moves on by that bound instead: a later charge then never includes these
  // ticks' housekeeping, at worst leaving out its wait for a core (issue 29, sparse tenants).
  if (!worked && !realm.stopped) {
    if (realm.cpuMark !== undefined) realm.cpuMark += delta.active * 1000;
    return false;
  }
  // Work left behind in a shared realm is charged to the source that ran last.
  const sid = realm.sids.has(realm.lastSid) ? realm.lastSid : [...realm.sids][0]!;
  const charge = (ms: number): void => {
    if (ms >= IDLE_CHARGE_FLOOR_MS) send({ t: "usage", sid, ms: Math.round(ms) });
  };
  const cpuMark = realm.cpuMark;
  if (cpuMark === undefined) {
    if (realm.stopped) charge(delta.active);
    return worked;
  }
  realm.cpuMark = undefined;
  readMark(
    realm,
    (cpu) => charge(Math.max(0, cpu - cpuMark) / 1000),
    () => charge(delta.active),
  );
  return true;
}
