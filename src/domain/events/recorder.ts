/** Stores events (emits, `$logs`, `$errors`) with their IDs; the pruner (pruner.ts) bounds each channel's window. */
import { randomString } from "../../ids.ts";
import type { StorageOps } from "../../storage/port.ts";
import type { EventMeta, EventRecord, RetentionPolicy } from "../types.ts";
import { EventIdGenerator, formatEventId } from "./event-ids.ts";
import type { Retention } from "./retention.ts";

export interface NewEvent {
  emitterId: string;
  channel: string;
  event: unknown;
  meta?: Omit<EventMeta, "emit_id" | "name" | "emitter_id">;
  /** Epoch ms the event is indexed at (the commit time). */
  nowMs: number;
  /** With traces on: the span storing it (tracing.ts, `contextText`), for the hooks (routing keeps it with each delivery). */
  trace?: string | undefined;
  /**
   * The emitter's retention policy, when the caller has it at hand (a source's run): a window it keeps
   * full then takes the new event in its oldest one's place (`insertEvent`'s `reuseAt`).
   */
  retention?: RetentionPolicy | null;
}

export class EventRecorder {
  readonly ids = new EventIdGenerator();
  readonly #retention: Retention | undefined;
  /**
   * Hooks run inside the storing transaction for each new event (routing adds deliveries here), with the
   * span storing it when traces are on.
   */
  readonly #onStore: Array<(tx: StorageOps, event: EventRecord, trace: string | undefined) => Promise<void>> =
    [];

  /** `retention`: the windows' sizes, so that a full one's oldest row is reused (none: every event appended). */
  constructor(retention?: Retention) {
    this.#retention = retention;
  }

  onStore(hook: (tx: StorageOps, event: EventRecord, trace: string | undefined) => Promise<void>): void {
    this.#onStore.push(hook);
  }

  async store(tx: StorageOps, e: NewEvent): Promise<EventRecord> {
    const id = await this.ids.next(tx, e.emitterId, e.nowMs);
    const record: EventRecord = {
      emitterId: e.emitterId,
      channel: e.channel,
      id: formatEventId(id),
      idMs: id.ms,
      idSeq: id.seq,
      indexedAtMs: e.nowMs,
      event: e.event === undefined ? null : e.event,
      meta: { emit_id: randomString(27), name: e.channel, emitter_id: e.emitterId, ...(e.meta ?? {}) },
    };
    // $logs and $errors keep what the instance says whatever the policy, so their size is known too.
    const known = e.retention !== undefined || e.channel === "$logs" || e.channel === "$errors";
    await tx.insertEvent(record, known ? this.#retention?.limits(e.retention, e.channel).events : undefined);
    for (const hook of this.#onStore) await hook(tx, record, e.trace);
    return record;
  }
}
