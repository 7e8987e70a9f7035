/**
 * Fires timer and cron sources. Due timers are claimed with a compare-and-set on their next run time,
 * so each tick fires once even with several nodes on one store; a tick missed while down fires once.
 * Tests drive it with a fake clock through `tick()`.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../clock.ts";
import type { Storage } from "../storage/port.ts";
import type { Bus } from "./bus.ts";
import type { Committer } from "./committer.ts";
import type { EventRecorder } from "./recorder.ts";
import type { QuotaHold, RunOutcome, SourceRunner } from "./runner.ts";
import { nextRun } from "./schedule.ts";
import type { TimerRecord } from "./types.ts";

/** Longest sleep between checks, so timers created by another node are noticed. */
const maxSleepMs = 1000;

/** What the scheduler works with. */
export interface SchedulerDeps {
  store: Storage;
  clock: Clock;
  runner: SourceRunner;
  bus: Bus;
  committer: Committer;
  recorder: EventRecorder;
  logger: FastifyBaseLogger;
}

export class TimerScheduler {
  readonly #d: SchedulerDeps;
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  #inflight = new Set<Promise<unknown>>();

  constructor(deps: SchedulerDeps) {
    this.#d = deps;
  }

  /** Starts the real-time loop (idempotent). */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#schedule(0);
  }

  async stop(): Promise<void> {
    this.#running = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await Promise.allSettled([...this.#inflight]);
  }

  #schedule(delayMs: number): void {
    if (!this.#running) return;
    this.#timer = setTimeout(() => {
      this.tick()
        .catch((err) => this.#d.logger.error({ err }, "timer tick failed"))
        .then(async () => {
          const next = await this.#d.store.nextTimerMs().catch(() => undefined);
          const wait =
            next === undefined ? maxSleepMs : Math.min(maxSleepMs, Math.max(0, next - this.#d.clock.now()));
          this.#schedule(wait);
        });
    }, delayMs);
    this.#timer.unref();
  }

  /** Fires every timer due now; resolves when their invocations have committed. */
  async tick(): Promise<RunOutcome[]> {
    const now = this.#d.clock.now();
    const due = await this.#d.store.dueTimers(now, 500);
    const runs: Array<Promise<RunOutcome | undefined>> = [];
    for (const timer of due) {
      const next = nextRun(timer, timer.nextRunMs, now);
      if (!(await this.#d.store.claimTimer(timer.sourceId, timer.propName, timer.nextRunMs, next))) continue;
      const run = this.#fire(timer);
      this.#inflight.add(run);
      void run.finally(() => this.#inflight.delete(run));
      runs.push(run);
    }
    return (await Promise.all(runs)).filter((r): r is RunOutcome => r !== undefined);
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
      bus.emit("timer.fired", {
        sourceId: source.id,
        propName: timer.propName,
        scheduledMs: timer.nextRunMs,
        skipped: "quota",
      });
      const now = this.#d.clock.now();
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
