/**
 * Retention the owner chooses (issue 28): which events each channel keeps, from the source's policy
 * (`retention: {events?, days?}`, a field left out taking the instance's default), the instance's
 * defaults for workflows, and the settings of `$logs` and `$errors`. Listing, SSE resume and backfill
 * read a window through `windowOf`; the pruner deletes what falls outside it.
 */
import type { Clock } from "../../clock.ts";
import type { RetentionLimits, RetentionSettings } from "../../config.ts";
import { invalidParameter } from "../../errors.ts";
import type { StorageOps } from "../../storage/port.ts";
import type { EventRecord, EventWindow, Plan, RetentionPolicy } from "../types.ts";

const dayMs = 86_400_000;

/** Events read per page of `keptPages` (and of a backfill), at most. */
export const keptPageMost = 1000;
/**
 * The bytes of event JSON a page of `keptPages` holds at most (or one event, when it alone is larger):
 * events may be up to 1 MiB each, and an SSE resume holds its page while a slow client reads it.
 */
export const keptPageBytes = 4 * 1024 * 1024;

/**
 * A channel's kept events newer than `after` (all of them without it), oldest first, a page at a time:
 * what an SSE resume and a backfill send, which may be all of a million-event window, so never held at
 * once (a stream of them all from the oldest held the whole window in memory, per request). The store
 * cuts each page at `keptPageBytes` by the events' sizes, read before the events: a page sized from the
 * events before it held 16 MiB on its first page, and 1,000 MiB when small events gave way to large ones.
 */
export async function* keptPages(
  store: Pick<StorageOps, "listEvents">,
  emitterId: string,
  channel: string,
  window: EventWindow,
  after: { ms: number; seq: number } = { ms: 0, seq: 0 },
): AsyncGenerator<EventRecord[]> {
  let from = after;
  for (;;) {
    const page = await store.listEvents(emitterId, {
      channel,
      limit: keptPageMost,
      maxBytes: keptPageBytes,
      before: from,
      window,
    });
    const items = page.items.reverse();
    const newest = items[items.length - 1];
    if (!newest) return;
    yield items;
    // A page cut by its bytes is short with more behind it, so only an empty page ends the walk.
    from = { ms: newest.idMs, seq: newest.idSeq };
  }
}

/** What the pruner applies to an emitter's windows (`Retention.prunedBy`). */
export type PrunedBy = RetentionPolicy | null | "deleted";

export class Retention {
  readonly settings: RetentionSettings;
  readonly #clock: Clock;

  constructor(settings: RetentionSettings, clock: Clock) {
    this.settings = settings;
    this.#clock = clock;
  }

  /**
   * A policy as given by a client for a source that `plan`'s account created, refused with a 400 when it
   * is over the instance's maximum, or a free account's (`freeMax`); a free account's policy that names
   * no age gets the free maximum age, when the instance sets one.
   */
  check(policy: RetentionPolicy | null, plan: Plan, field = "retention"): RetentionPolicy | null {
    if (policy === null) return null;
    const free = plan === "free";
    const { max, freeMax } = this.settings;
    // The message names the free plan only where its maximum is the lower one.
    const events = free ? freeMax.events : max.events;
    if (policy.events !== undefined && policy.events > events)
      throw invalidParameter(
        `${field}.events`,
        `${field}.events may be at most ${events} ${events < max.events ? "for a free account " : ""}on this instance`,
      );
    const days = (free ? freeMax.days : undefined) ?? max.days;
    if (policy.days !== undefined && policy.days > days)
      throw invalidParameter(
        `${field}.days`,
        `${field}.days may be at most ${days} ${days < max.days ? "for a free account " : ""}on this instance`,
      );
    const age = policy.days ?? (free ? freeMax.days : undefined);
    return {
      ...(policy.events !== undefined ? { events: policy.events } : {}),
      ...(age !== undefined ? { days: age } : {}),
    };
  }

  /** The limits a channel keeps under a policy (null or absent: the instance's defaults). */
  limits(policy: RetentionPolicy | null | undefined, channel: string): RetentionLimits {
    if (channel === "$logs") return this.settings.logs;
    if (channel === "$errors") return this.settings.errors;
    const d = this.settings.defaults;
    return { events: policy?.events ?? d.events, days: policy?.days ?? d.days };
  }

  /** The window a channel shows now under a policy. */
  window(policy: RetentionPolicy | null | undefined, channel: string): EventWindow {
    const { events, days } = this.limits(policy, channel);
    return days === undefined
      ? { keep: events }
      : { keep: events, sinceMs: this.#clock.now() - days * dayMs };
  }

  /** The window of an emitter's channel: a source's own policy, the defaults for anything else. */
  async windowOf(store: StorageOps, emitterId: string, channel: string): Promise<EventWindow> {
    return this.window(await this.policyOf(store, emitterId), channel);
  }

  /** An emitter's policy: a source's own (null when it has none), null for workflows. */
  async policyOf(store: StorageOps, emitterId: string): Promise<RetentionPolicy | null> {
    if (!emitterId.startsWith("dc_")) return null;
    return (await store.getSource(emitterId))?.retention ?? null;
  }

  /**
   * The policy the pruner applies: `policyOf`'s, or `"deleted"` for a source or workflow that no longer
   * exists, all of whose events it deletes (a delete leaves them to it: StorageOps.deleteSource).
   */
  async prunedBy(store: StorageOps, emitterId: string): Promise<PrunedBy> {
    if (emitterId.startsWith("p_")) return (await store.getWorkflow(emitterId)) ? null : "deleted";
    if (!emitterId.startsWith("dc_")) return null;
    const source = await store.getSource(emitterId);
    return source ? (source.retention ?? null) : "deleted";
  }
}
