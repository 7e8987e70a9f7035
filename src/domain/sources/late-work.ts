/**
 * Work a source's code does after its invocation returned (timers, promises it left running) is not
 * part of any run, so the runner never sees it. The executor reports it here: its CPU time is added to
 * the source creator's compute usage, and what went wrong (a late `$emit`, a crash, a realm stopped
 * for spinning) goes to the source's `$errors` (its bytes counted in the creator's stored bytes), so
 * nothing vanishes silently.
 */
import type { Clock } from "../../clock.ts";
import type { LateWork } from "../../runtime/types.ts";
import { isStoreUnavailable } from "../../storage/health.ts";
import type { Storage } from "../../storage/port.ts";
import { usageDay } from "../accounts/quotas.ts";
import type { Bus } from "../bus.ts";
import type { Committer } from "../events/committer.ts";
import type { EventRecorder } from "../events/recorder.ts";
import { chargeStored } from "./stored-bytes.ts";

export interface LateWorkDeps {
  store: Storage;
  committer: Committer;
  recorder: EventRecorder;
  bus: Bus;
  clock: Clock;
  logger: { warn(obj: object, msg?: string): void; debug(obj: object, msg?: string): void };
}

/** CPU reports are summed per source and written together this often, not one commit per report. */
const FLUSH_MS = 5000;
/** `$errors` entries per source and window: a timer that emits late every few ms must not flood. */
const ERRORS_PER_WINDOW = 10;
const ERROR_WINDOW_MS = 60_000;

/** Charges and records work done outside invocations (see the module comment). */
export class LateWorkRecorder {
  readonly #d: LateWorkDeps;
  readonly #cpu = new Map<string, number>();
  readonly #errors = new Map<string, { windowStart: number; count: number }>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(deps: LateWorkDeps) {
    this.#d = deps;
  }

  /** The executor's `onLateWork`. Never throws. */
  report(work: LateWork): void {
    if (this.#closed) return;
    if (work.cpuMs > 0) this.#charge(work.sourceId, work.cpuMs);
    if (work.error && this.#allowError(work.sourceId)) {
      this.#recordError(work.sourceId, work.error).catch((err: unknown) => {
        // A lost store is logged once by app/services.ts; the note is dropped like one over the window's limit.
        if (isStoreUnavailable(err))
          this.#d.logger.debug({ err, sourceId: work.sourceId }, "recording late work failed");
        else this.#d.logger.warn({ err, sourceId: work.sourceId }, "recording late work failed");
      });
    }
  }

  /** Adds CPU time to a source's pending charge and makes sure a flush will write it. */
  #charge(sourceId: string, cpuMs: number): void {
    this.#cpu.set(sourceId, (this.#cpu.get(sourceId) ?? 0) + cpuMs);
    this.#timer ??= setTimeout(() => void this.flush(), FLUSH_MS).unref();
  }

  /** Writes the CPU time summed so far to each source creator's usage. */
  async flush(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const pending = [...this.#cpu];
    this.#cpu.clear();
    const day = usageDay(this.#d.clock.now());
    for (const [i, [sourceId, ms]] of pending.entries()) {
      try {
        const source = await this.#d.store.getSource(sourceId);
        // Options calls and inspections run under ids that are no source: nothing to charge.
        if (!source) continue;
        await this.#d.committer.submit((tx) =>
          tx.addUsage(source.createdBy, day, { invocations: 0, computeMs: Math.ceil(ms), storedBytes: 0 }),
        );
      } catch (err) {
        if (isStoreUnavailable(err) && !this.#closed) {
          // The store is lost (logged once by app/services.ts): this and the remaining charges wait for the next flush.
          this.#d.logger.debug({ err }, "charging late work deferred: the store is unavailable");
          for (const [id, left] of pending.slice(i)) this.#charge(id, left);
          return;
        }
        this.#d.logger.warn({ err, sourceId }, "charging late work failed");
      }
    }
  }

  /** Stops taking reports and writes what is pending. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.flush();
  }

  #allowError(sourceId: string): boolean {
    const now = this.#d.clock.now();
    let window = this.#errors.get(sourceId);
    if (!window || now - window.windowStart >= ERROR_WINDOW_MS) {
      window = { windowStart: now, count: 0 };
      this.#errors.set(sourceId, window);
      // Bounded: windows of quiet sources are dropped as new ones start.
      if (this.#errors.size > 10_000) this.#errors.delete(this.#errors.keys().next().value as string);
    }
    return window.count++ < ERRORS_PER_WINDOW;
  }

  async #recordError(sourceId: string, error: NonNullable<LateWork["error"]>): Promise<void> {
    const source = await this.#d.store.getSource(sourceId);
    if (!source) return;
    const now = this.#d.clock.now();
    const ts = new Date(now).toISOString();
    await this.#d.committer.submit(
      async (tx) => {
        const stored = await this.#d.recorder.store(tx, {
          emitterId: source.id,
          channel: "$errors",
          nowMs: now,
          event: {
            original_event: null,
            original_context: {
              source_id: source.id,
              deployment_id: source.id,
              source_type: "late_work",
              owner_id: source.ownerId,
              ts,
            },
            error: { code: error.code, message: error.message, ts, stack: error.stack ?? null },
          },
        });
        // The note is stored for the source, as its runs' events are: it counts in its creator's bytes.
        await chargeStored(tx, source.createdBy, stored, now);
        return stored;
      },
      (stored) => this.#d.bus.emit("event.stored", stored),
    );
  }
}
