/**
 * What one commit writes to the shared disk, for the free plan's daily stored-bytes quota
 * (FOUNT_FREE_DAILY_STORED_BYTES): the JSON of every event it stores, its meta included, once for the
 * event's row and once more for each delivery copy routing makes of it (one per listener of its channel,
 * as FOUNT_MAX_RUN_ROUTED_BYTES counts them). Measured as the per-run bounds measure, by
 * `jsonLength`, which walks a value without serializing it (docs/isolation.md).
 */
import { jsonLength } from "../../runtime/child/guards/json-size.ts";
import type { StorageOps } from "../../storage/port.ts";
import { usageDay } from "../accounts/quotas.ts";
import type { EventRecord } from "../types.ts";

/** The stored bytes of one commit, summed as it stores events; the commit adds `total` to its usage row. */
export class StoredBytes {
  /** Bytes counted so far. */
  total = 0;
  readonly #tx: StorageOps;
  readonly #emitterId: string;
  #owner: Promise<string | undefined> | undefined;
  /** Listeners per channel: looked up once a commit and channel (routing asks the same, cached, per event). */
  readonly #listeners = new Map<string, number>();

  constructor(tx: StorageOps, emitterId: string) {
    this.#tx = tx;
    this.#emitterId = emitterId;
  }

  /** The subscriptions that route the emitter's `channel`: each copies every event stored on it. */
  async listeners(channel: string): Promise<number> {
    const known = this.#listeners.get(channel);
    if (known !== undefined) return known;
    this.#owner ??= this.#tx.resourceOwner(this.#emitterId);
    const n = (await this.#tx.matchSubscriptions(this.#emitterId, await this.#owner, channel)).length;
    this.#listeners.set(channel, n);
    return n;
  }

  /**
   * Counts a stored event and its delivery copies. `eventChars`: the length of its `event`'s JSON when the
   * caller measured it already (a run's emits are, for the routing bound), else it is measured here.
   */
  async add(stored: EventRecord, eventChars?: number): Promise<void> {
    const chars = storedChars(stored, eventChars);
    const copies = this.#listeners.get(stored.channel) ?? (await this.listeners(stored.channel));
    this.total += chars * (1 + copies);
  }
}

/** What one copy of a stored event counts: its event's JSON (`eventChars` when measured already) and its meta's. */
export function storedChars(stored: Pick<EventRecord, "event" | "meta">, eventChars?: number): number {
  return (eventChars ?? jsonLength(stored.event)) + jsonLength(stored.meta);
}

/** The user who created emitter `emitterId` (a source or an external workflow), whose day its events count in. */
export async function creatorOf(tx: StorageOps, emitterId: string): Promise<string | undefined> {
  if (emitterId.startsWith("p_")) return (await tx.getWorkflow(emitterId))?.createdBy;
  return (await tx.getSource(emitterId))?.createdBy;
}

/**
 * Counts an event stored for an emitter outside its runs (a note of late work, the `$errors` entry of a
 * delivery that failed), with its delivery copies, in the day's stored bytes of `creatorId`, in the
 * transaction that stores it. Without it, failing deliveries wrote their events again on `$errors`, and
 * routed them on, uncounted: ten times what the quota counted, measured.
 */
export async function chargeStored(
  tx: StorageOps,
  creatorId: string,
  stored: EventRecord,
  nowMs: number,
): Promise<void> {
  const bytes = new StoredBytes(tx, stored.emitterId);
  await bytes.add(stored);
  await tx.addUsage(creatorId, usageDay(nowMs), { invocations: 0, computeMs: 0, storedBytes: bytes.total });
}

/**
 * Counts copies of stored events written for `payer` (a replay's or a backfill's deliveries: the free
 * account `storedBytesPayer` named, or none) in its day's stored bytes, in the transaction writing them.
 */
export async function chargeCopies(
  tx: Pick<StorageOps, "addUsage">,
  payer: string | undefined,
  copies: Array<Pick<EventRecord, "event" | "meta">>,
  nowMs: number,
): Promise<void> {
  if (payer === undefined || copies.length === 0) return;
  let storedBytes = 0;
  for (const copy of copies) storedBytes += storedChars(copy);
  await tx.addUsage(payer, usageDay(nowMs), { invocations: 0, computeMs: 0, storedBytes });
}
