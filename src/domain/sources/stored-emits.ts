/**
 * A successful run's emits, as its commit stores them: ordered by `ts`, within the source's channel
 * limit, deduped per channel by the component's `dedupe` strategy (its state kept in the same
 * transaction). Emits refused on the way are reported on `$errors`.
 */
import type { SerializedError } from "../../errors.ts";
import { jsonLength } from "../../runtime/child/guards/json-size.ts";
import type { ComponentMeta, EmittedEvent } from "../../runtime/types.ts";
import type { StorageOps } from "../../storage/port.ts";
import { normalizeChannelLoose } from "../events/channels.ts";
import { applyDedupePerChannel, type ChannelDedupeState, orderByTs } from "../events/dedupe.ts";
import { StoredBytes } from "./stored-bytes.ts";

/** Named channels (besides the default, `$logs` and `$errors`) one source may emit on. */
export const maxCustomChannels = 32;

/**
 * Stores one event on a channel of the source, in the commit's transaction. `eventChars`: the length of
 * the event's JSON (`jsonLength`), when measured already, for the stored-bytes count.
 */
export type PutEvent = (
  channel: string,
  event: unknown,
  extra?: Record<string, unknown>,
  eventChars?: number,
) => Promise<void>;
/** Stores an error event on the source's `$errors`, in the commit's transaction. */
export type PutError = (code: string, err: SerializedError) => Promise<void>;

/** What routing a run's emits may copy into deliveries (`FOUNT_MAX_RUN_ROUTED_BYTES`). */
export interface RoutingBound {
  /** Characters of event JSON all the deliveries of one run may hold. */
  maxRoutedChars: number;
  /** Subscriptions that may route one emitter: below `maxRoutedChars` over it, a run needs no count. */
  maxListeners: number;
}

/**
 * Stores the emits; or stores none of them and answers why, when routing them would copy more than
 * `bound` allows into deliveries (`fan_out_too_large`, reported on `$errors`: the run then fails whole,
 * its db writes discarded too, as for `run_emits_too_large`). Each emit is measured once, here, for the
 * bound and for `put` (the commit's stored-bytes count); `bytes` tells the listeners of each channel.
 */
export async function storeEmits(
  tx: StorageOps,
  sourceId: string,
  meta: ComponentMeta,
  emits: EmittedEvent[],
  put: PutEvent,
  error: PutError,
  bound?: RoutingBound,
  bytes: StoredBytes = new StoredBytes(tx, sourceId),
): Promise<SerializedError | undefined> {
  if (emits.length === 0) return undefined;
  const ordered = await withinChannelLimit(tx, sourceId, orderByTs(emits), error);
  const state = meta.dedupe
    ? ((await tx.getDedupeState(sourceId)) as ChannelDedupeState | undefined)
    : undefined;
  const outcome = applyDedupePerChannel(meta.dedupe, state ?? null, ordered);
  for (const refused of outcome.missingId) {
    await error("dedupe_missing_id", {
      code: "dedupe_missing_id",
      message: `An emit without a usable id was refused: the component uses dedupe "${meta.dedupe}", which needs meta.id on every emit`,
      data: { summary: refused.meta.summary },
    });
  }
  const chars = outcome.accepted.map((e) => e.bytes ?? jsonLength(e.event));
  const tooMuch = bound && (await overRouted(outcome.accepted, chars, bound, bytes));
  if (tooMuch) {
    await error(tooMuch.code, tooMuch);
    return tooMuch;
  }
  for (const [i, e] of outcome.accepted.entries()) {
    const extra: Record<string, unknown> = {};
    if (e.meta.id !== undefined) extra.id = e.meta.id;
    if (e.meta.summary !== undefined) extra.summary = e.meta.summary;
    if (e.meta.ts !== undefined) extra.ts = e.meta.ts;
    if (e.meta.delivery_ts !== undefined) extra.delivery_ts = e.meta.delivery_ts;
    await put(normalizeChannelLoose(e.meta.name), e.event, extra, chars[i]);
  }
  if (meta.dedupe) await tx.putDedupeState(sourceId, outcome.state);
  return undefined;
}

/**
 * Whether routing `emits` (of `chars` each) would copy more than `bound` allows: every listener of an
 * event's channel gets its own copy, written in this commit, which holds the store meanwhile (a run of
 * 64 MiB with 50 listeners wrote 3.2 GB; docs/delivery.md, "Listeners per emitter"). The listeners are
 * counted here only for a run whose emits could reach the bound with every listener an emitter may have.
 */
async function overRouted(
  emits: EmittedEvent[],
  chars: number[],
  bound: RoutingBound,
  bytes: StoredBytes,
): Promise<SerializedError | undefined> {
  const charsByChannel = new Map<string, number>();
  let total = 0;
  for (const [i, e] of emits.entries()) {
    const n = chars[i]!;
    const channel = normalizeChannelLoose(e.meta.name);
    charsByChannel.set(channel, (charsByChannel.get(channel) ?? 0) + n);
    total += n;
  }
  if (total * bound.maxListeners <= bound.maxRoutedChars) return undefined;
  let routed = 0;
  for (const [channel, n] of charsByChannel) routed += n * (await bytes.listeners(channel));
  if (routed <= bound.maxRoutedChars) return undefined;
  return {
    code: "fan_out_too_large",
    message: `This run's emits would be copied to its listeners' deliveries as about ${routed} bytes, over the limit of ${bound.maxRoutedChars} per run (FOUNT_MAX_RUN_ROUTED_BYTES); the run fails, and its emits and db writes are discarded`,
  };
}

/**
 * Every channel keeps its last 100 events, so the number of channels bounds a source's events: emits
 * that would open more than `maxCustomChannels` named channels are refused on `$errors`.
 */
async function withinChannelLimit(
  tx: StorageOps,
  sourceId: string,
  emits: EmittedEvent[],
  error: PutError,
): Promise<EmittedEvent[]> {
  const named = new Set(emits.map((e) => normalizeChannelLoose(e.meta.name)).filter((c) => c !== ""));
  if (named.size === 0) return emits;
  const known = new Set((await tx.listChannels(sourceId)).filter((c) => c !== "" && !c.startsWith("$")));
  const refused = new Set<string>();
  for (const channel of named) {
    if (known.has(channel)) continue;
    if (known.size < maxCustomChannels) known.add(channel);
    else refused.add(channel);
  }
  if (refused.size === 0) return emits;
  await error("too_many_channels", {
    code: "too_many_channels",
    message: `Emits to ${[...refused].join(", ")} were refused: a source may use at most ${maxCustomChannels} named channels`,
  });
  return emits.filter((e) => !refused.has(normalizeChannelLoose(e.meta.name)));
}
