/**
 * Fires timer and cron sources. Due timers are claimed with a compare-and-set on their next run time,
 * so each tick fires once even with several nodes on one store; a tick missed while down fires once.
 *
 * A pass of the loop claims the due ticks and starts their runs, and never waits for a run: a slow or
 * hung run delays only its own source. A tick that comes while the previous run of the same timer still
 * runs is skipped, with a `$logs` note (the overlap policy, see docs/architecture.md#timers).
 * Tests drive it with a fake clock through `tick()`, which also waits for the runs it started.
 */
import type { FastifyBaseLogger } from "fastify";
import { BoundedCache } from "../../bounded-cache.ts";
import type { Clock } from "../../clock.ts";
import { isStoreUnavailable } from "../../storage/health.ts";
import type { Storage } from "../../storage/port.ts";
import { usageDay } from "../accounts/quotas.ts";
import type { Bus } from "../bus.ts";
import type { SourceLeases } from "../cluster/source-leases.ts";
import type { Committer } from "../events/committer.ts";
import type { EventRecorder } from "../events/recorder.ts";
import type { TimerRecord } from "../types.ts";
import type { QuotaHold, RunOutcome, SourceRunner } from "./runner.ts";
import { nextRun } from "./schedule.ts";

/** Longest sleep between checks, so timers created by another node are noticed. */
const maxSleepMs = 1000;

/** Due timers read per query; a full page makes the loop read the next one at once. */
const pageSize = 500;

/**
 * Shortest time between two passes of the loop. Timers deployed at different moments are due at
 * different milliseconds; a pass per millisecond paid a write transaction and an executor message per
 * tick (1,000 one-second timers spent a third of the main thread on claims). Gathering what came due in
 * 10 ms into one pass claims them in one transaction and hands their runs to the executors together,
 * for at most 10 ms of added lateness against a target of 100 ms at the 99th percentile.
 */
const minPassGapMs = 10;

/**
 * Longest a source's timers wait once its owner's daily quota is used up: until the next UTC day, or
 * this long if sooner, so that a quota raised or a plan changed during the day takes within it. Without
 * the wait, every tick was claimed, read and checked against the quota to be dropped: 50,000 one-second
 * timers of one account past its quota were 50,000 claims a second for the rest of the day.
 */
const quotaWaitMs = 15 * 60_000;
const dayMs = 86_400_000;

/** What the scheduler works with. */
export interface SchedulerDeps {
  store: Storage;
  clock: Clock;
  runner: SourceRunner;
  bus: Bus;
  committer: Committer;
  recorder: EventRecorder;
  logger: FastifyBaseLogger;
  /** With several nodes on the store (source-leases.ts). */
  leases?: SourceLeases;
}

/** One timer of one source (a source may have several timer props). */
function timerKey(timer: TimerRecord): string {
  return `${timer.sourceId}\0${timer.propName}`;
}

/** A timer run in flight: the tick it serves and when it started. */
interface Running {
  scheduledMs: number;
  startedMs: number;
}

export class TimerScheduler {
  readonly #d: SchedulerDeps;
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  /** The real-time loop's pass under way, if any (it never rejects). */
  #looping: Promise<void> = Promise.resolve();
  /** Every run and note started and not settled yet, so `stop()` can let them land. */
  readonly #inflight = new Set<Promise<unknown>>();
  /** The UTC day of the last `quota_exceeded` note on each source's `$errors` (one a day is enough). */
  readonly #quotaNoted = new BoundedCache<string, string>(100_000);
  /** Until when each source's timers were moved past a used-up quota (`#wait`), so that it is done once. */
  readonly #waiting = new BoundedCache<string, number>(100_000);
  /**
   * Timers (by `timerKey`) whose run has not committed yet. Kept on this node only: with several nodes
   * the mark belongs in the timer's row, claimed with the tick (docs/architecture.md#timers).
   */
  readonly #busy = new Map<string, Running>();

  constructor(deps: SchedulerDeps) {
    this.#d = deps;
  }

  /** Starts the real-time loop (idempotent). */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#schedule(0);
  }

  /** Stops the loop and lets the runs it started commit (idempotent). */
  async stop(): Promise<void> {
    this.#running = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    // A pass under way may still start runs: they are in `#inflight` once it ends.
    await this.#looping;
    await Promise.allSettled([...this.#inflight]);
  }

  #schedule(delayMs: number): void {
    if (!this.#running) return;
    this.#timer = setTimeout(() => {
      this.#looping = this.#loop();
    }, delayMs);
    this.#timer.unref();
  }

  /** One pass of the real-time loop: claims and starts what is due, then sleeps until the next tick. */
  async #loop(): Promise<void> {
    const startedMs = this.#d.clock.now();
    let full = false;
    try {
      const runs = await this.#pass();
      full = runs.full;
      // Nobody awaits these: a failure is logged here rather than left unhandled.
      for (const run of runs.started) run.catch((err) => this.#logFailure(err, "timer run failed"));
    } catch (err) {
      // With the store lost, no tick is claimed: the loop keeps its pace (at most `maxSleepMs` apart)
      // and a tick missed meanwhile fires once when the store is back.
      this.#logFailure(err, "timer tick failed");
    }
    if (!this.#running) return;
    if (full) return this.#schedule(0);
    const next = await this.#d.store.nextTimerMs().catch(() => undefined);
    const now = this.#d.clock.now();
    const gap = Math.max(0, startedMs + minPassGapMs - now);
    this.#schedule(next === undefined ? maxSleepMs : Math.min(maxSleepMs, Math.max(gap, next - now)));
  }

  /** A lost store is logged once by app/services.ts; each pass that fails because of it only at debug. */
  #logFailure(err: unknown, message: string): void {
    if (isStoreUnavailable(err)) this.#d.logger.debug({ err }, message);
    else this.#d.logger.error({ err }, message);
  }

  /** Fires every timer due now; resolves when their invocations have committed. */
  async tick(): Promise<RunOutcome[]> {
    const { started } = await this.#pass();
    return (await Promise.all(started)).filter((r): r is RunOutcome => r !== undefined);
  }

  /**
   * Claims the ticks due now and starts their runs; resolves once every claim is made, without waiting
   * for a run. `full` is true when a full page was due (more may be waiting).
   */
  async #pass(): Promise<{ started: Array<Promise<RunOutcome | undefined>>; full: boolean }> {
    const now = this.#d.clock.now();
    let due = await this.#d.store.dueTimers(now, pageSize);
    const full = due.length === pageSize;
    const leases = this.#d.leases;
    if (leases && due.length > 0) {
      // With several nodes, the node running a source claims its ticks: a tick claimed elsewhere would
      // move the source's lease (and its cached state) to another node and back every second.
      const elsewhere = await leases.heldElsewhere([...new Set(due.map((t) => t.sourceId))]);
      if (elsewhere.size > 0) due = due.filter((t) => !elsewhere.has(t.sourceId));
    }
    const started: Array<Promise<RunOutcome | undefined>> = [];
    if (due.length === 0) return { started, full };
    // All claims of a pass in one transaction, shared with the runs' commits of the same moment.
    const claimed = await this.#d.committer.submit(async (tx) => {
      const won: TimerRecord[] = [];
      for (const timer of due) {
        const next = nextRun(timer, timer.nextRunMs, now);
        if (await tx.claimTimer(timer.sourceId, timer.propName, timer.nextRunMs, next)) won.push(timer);
      }
      return won;
    });
    for (const timer of claimed) {
      const key = timerKey(timer);
      const busy = this.#busy.get(key);
      if (busy) {
        this.#track(
          this.#skip(timer, busy, now).catch((err) =>
            this.#logFailure(err, `note of a skipped timer tick of ${timer.sourceId} failed`),
          ),
        );
        continue;
      }
      const mark: Running = { scheduledMs: timer.nextRunMs, startedMs: now };
      this.#busy.set(key, mark);
      const run = this.#fire(timer);
      void run
        .catch(() => undefined)
        .then(() => {
          if (this.#busy.get(key) === mark) this.#busy.delete(key);
        });
      this.#track(run);
      started.push(run);
    }
    return { started, full };
  }

  #track(work: Promise<unknown>): void {
    this.#inflight.add(work);
    void work.then(
      () => this.#inflight.delete(work),
      () => this.#inflight.delete(work),
    );
  }

  /** The overlap policy: a tick whose timer's previous run has not committed is skipped, on `$logs`. */
  async #skip(timer: TimerRecord, busy: Running, nowMs: number): Promise<void> {
    const { bus, committer, recorder, store } = this.#d;
    // A source deleted or deactivated while its run was in flight gets no note.
    if (!(await store.getSource(timer.sourceId))?.active) return;
    bus.emit("timer.fired", {
      sourceId: timer.sourceId,
      propName: timer.propName,
      scheduledMs: timer.nextRunMs,
      skipped: "running",
    });
    const iso = (ms: number) => new Date(ms).toISOString();
    await committer.submit(
      (tx) =>
        recorder.store(tx, {
          emitterId: timer.sourceId,
          channel: "$logs",
          nowMs: nowMs,
          event: {
            level: "warn",
            message:
              `Timer tick of ${iso(timer.nextRunMs)} skipped: the run of the tick of ${iso(busy.scheduledMs)} ` +
              `(started ${iso(busy.startedMs)}) is still running`,
            ts: nowMs,
          },
        }),
      (stored) => bus.emit("event.stored", stored),
    );
  }

  /**
   * Moves a source's timers whose owner's quota is used up to their first slot after the next UTC day
   * begins (or `quotaWaitMs` from now, if sooner), in one transaction; the ticks between are not fired
   * later, as ticks missed while down are not.
   */
  async #wait(sourceId: string, nowMs: number): Promise<void> {
    if ((this.#waiting.get(sourceId) ?? 0) > nowMs) return;
    const untilMs = Math.min(nowMs - (nowMs % dayMs) + dayMs, nowMs + quotaWaitMs);
    this.#waiting.set(sourceId, untilMs);
    await this.#d.committer.submit(async (tx) => {
      for (const t of await tx.listTimers(sourceId))
        if (t.nextRunMs < untilMs)
          await tx.claimTimer(t.sourceId, t.propName, t.nextRunMs, nextRun(t, t.nextRunMs, untilMs - 1));
    });
  }

  async #fire(timer: TimerRecord): Promise<RunOutcome | undefined> {
    const { store, runner, bus } = this.#d;
    const source = await store.getSource(timer.sourceId);
    if (!source?.active) return undefined;
    const event = timer.intervalSeconds
      ? { timestamp: Math.floor(timer.nextRunMs / 1000), interval_seconds: timer.intervalSeconds }
      : {
          timestamp: Math.floor(timer.nextRunMs / 1000),
          cron: timer.cron,
          timezone: timer.timezone ?? "UTC",
        };
    let hold: QuotaHold;
    try {
      hold = await runner.checkQuota(source);
    } catch (err) {
      // Only a used-up quota skips the tick with a note; a lost store fails the run like any other step.
      if ((err as { code?: unknown }).code !== "quota_exceeded") throw err;
      bus.emit("timer.fired", {
        sourceId: source.id,
        propName: timer.propName,
        scheduledMs: timer.nextRunMs,
        skipped: "quota",
      });
      const now = this.#d.clock.now();
      await this.#wait(source.id, now);
      // One note a source a day: a free account with many every-second timers past its quota wrote an
      // `$errors` entry per tick, which is a store write per source per second for the rest of the day.
      const day = usageDay(now);
      if (this.#quotaNoted.get(source.id) === day) return undefined;
      this.#quotaNoted.set(source.id, day);
      await this.#d.committer.submit(
        (tx) =>
          this.#d.recorder.store(tx, {
            emitterId: source.id,
            channel: "$errors",
            nowMs: now,
            event: {
              original_event: event,
              original_context: {
                source_id: source.id,
                source_type: "timer",
                owner_id: source.ownerId,
                ts: new Date(now).toISOString(),
              },
              error: {
                code: "quota_exceeded",
                message: (err as Error).message,
                ts: new Date(now).toISOString(),
                stack: null,
              },
            },
          }),
        (stored) => bus.emit("event.stored", stored),
      );
      return undefined;
    }
    const outcome = runner.invoke(source, { kind: "run", event }, { trigger: "timer", hold });
    bus.emit("timer.fired", { sourceId: source.id, propName: timer.propName, scheduledMs: timer.nextRunMs });
    return outcome;
  }
}
