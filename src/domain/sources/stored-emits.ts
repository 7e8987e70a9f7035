/**
 * A successful run's emits, as its commit stores them: ordered by `ts`, within the source's channel
 * limit, deduped per channel by the component's `dedupe` strategy (its state kept in the same
 * transaction). Emits refused on the way are reported on `$errors`.
 */
import type { SerializedError } from "../../errors.ts";
import type { ComponentMeta, EmittedEvent } from "../../runtime/types.ts";
import type { StorageOps } from "../../storage/port.ts";
import { normalizeChannelLoose } from "../events/channels.ts";
import { applyDedupePerChannel, type ChannelDedupeState, orderByTs } from "../events/dedupe.ts";

/** Named channels (besides the default, `$logs` and `$errors`) one source may emit on. */
export const maxCustomChannels = 32;

/** Stores one event on a channel of the source, in the commit's transaction. */
export type PutEvent = (channel: string, event: unknown, extra?: Record<string, unknown>) => Promise<void>;
/** Stores an error event on the source's `$errors`, in the commit's transaction. */
export type PutError = (code: string, err: SerializedError) => Promise<void>;

export async function storeEmits(
  tx: StorageOps,
  sourceId: string,
  meta: ComponentMeta,
  emits: EmittedEvent[],
  put: PutEvent,
  error: PutError,
): Promise<void> {
  if (emits.length === 0) return;
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
  for (const e of outcome.accepted) {
    const extra: Record<string, unknown> = {};
    if (e.meta.id !== undefined) extra.id = e.meta.id;
    if (e.meta.summary !== undefined) extra.summary = e.meta.summary;
    if (e.meta.ts !== undefined) extra.ts = e.meta.ts;
    if (e.meta.delivery_ts !== undefined) extra.delivery_ts = e.meta.delivery_ts;
    await put(normalizeChannelLoose(e.meta.name), e.event, extra);
  }
  if (meta.dedupe) await tx.putDedupeState(sourceId, outcome.state);
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
