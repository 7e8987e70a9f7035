/**
 * The spec's dedupe strategies, applied by the server to one invocation's emits (already in emit order).
 * unique: FIFO cache of the last 100 ids; greatest: only ids above the largest seen; last: only events
 * after the one whose id matches the cached last id (all when none matches).
 */
import type { EmittedEvent } from "../../runtime/types.ts";
import { normalizeChannelLoose } from "./channels.ts";

export type DedupeStrategy = "unique" | "greatest" | "last";

export type DedupeState =
  | { unique: Array<string | number> }
  | { greatest: number }
  | { last: string | number }
  | null;

export const uniqueCacheSize = 100;

export interface DedupeOutcome {
  accepted: EmittedEvent[];
  /** Emits refused because they have no id; the caller reports them on `$errors`. */
  missingId: EmittedEvent[];
  state: DedupeState;
}

export function applyDedupe(
  strategy: DedupeStrategy | undefined,
  state: DedupeState,
  emits: EmittedEvent[],
): DedupeOutcome {
  if (!strategy) return { accepted: emits, missingId: [], state };
  const withId = emits.filter((e) => e.meta.id !== undefined && e.meta.id !== null && e.meta.id !== "");
  const missingId = emits.filter((e) => !withId.includes(e));
  switch (strategy) {
    case "unique": {
      const cache = state && "unique" in state ? [...state.unique] : [];
      const seen = new Set(cache.map(String));
      const accepted: EmittedEvent[] = [];
      for (const e of withId) {
        const key = String(e.meta.id);
        if (seen.has(key)) continue;
        seen.add(key);
        cache.push(e.meta.id!);
        accepted.push(e);
      }
      // First in, first out once the cache is full.
      return { accepted, missingId, state: { unique: cache.slice(-uniqueCacheSize) } };
    }
    case "greatest": {
      let max = state && "greatest" in state ? state.greatest : Number.NEGATIVE_INFINITY;
      const accepted: EmittedEvent[] = [];
      for (const e of withId) {
        const value = Number(e.meta.id);
        if (!Number.isFinite(value)) {
          missingId.push(e);
          continue;
        }
        if (value > max) {
          max = value;
          accepted.push(e);
        }
      }
      return { accepted, missingId, state: Number.isFinite(max) ? { greatest: max } : state };
    }
    case "last": {
      const last = state && "last" in state ? String(state.last) : undefined;
      const index = last === undefined ? -1 : withId.findIndex((e) => String(e.meta.id) === last);
      const accepted = index >= 0 ? withId.slice(index + 1) : withId;
      const newest = withId[withId.length - 1];
      return { accepted, missingId, state: newest ? { last: newest.meta.id! } : state };
    }
  }
}

/**
 * The state of every channel of a source: each channel dedupes on its own, so an id emitted on one
 * channel does not hide the same id on another (Pipedream's task scheduler emits a task's id on its
 * own channel first, then on the default channel). A state stored before channels had their own is the
 * default channel's.
 */
export type ChannelDedupeState = { channels: Record<string, DedupeState> } | DedupeState;

function channelStates(state: ChannelDedupeState): Record<string, DedupeState> {
  if (state && "channels" in state) return { ...state.channels };
  return state ? { "": state } : {};
}

/** `applyDedupe` on each channel's emits with that channel's state; emit order is kept. */
export function applyDedupePerChannel(
  strategy: DedupeStrategy | undefined,
  state: ChannelDedupeState,
  emits: EmittedEvent[],
): { accepted: EmittedEvent[]; missingId: EmittedEvent[]; state: ChannelDedupeState } {
  if (!strategy) return { accepted: emits, missingId: [], state };
  const states = channelStates(state);
  const byChannel = Map.groupBy(emits, (e) => normalizeChannelLoose(e.meta.name));
  const accepted = new Set<EmittedEvent>();
  const missingId = new Set<EmittedEvent>();
  for (const [channel, list] of byChannel) {
    const outcome = applyDedupe(strategy, states[channel] ?? null, list);
    for (const e of outcome.accepted) accepted.add(e);
    for (const e of outcome.missingId) missingId.add(e);
    states[channel] = outcome.state;
  }
  return {
    accepted: emits.filter((e) => accepted.has(e)),
    missingId: emits.filter((e) => missingId.has(e)),
    state: { channels: states },
  };
}

/** Events with `ts` are emitted oldest first; a stable sort keeps call order among equal or missing ts. */
export function orderByTs(emits: EmittedEvent[]): EmittedEvent[] {
  if (!emits.some((e) => typeof e.meta.ts === "number")) return emits;
  return emits
    .map((e, i) => ({ e, i }))
    .sort(
      (a, b) =>
        (a.e.meta.ts ?? Number.POSITIVE_INFINITY) - (b.e.meta.ts ?? Number.POSITIVE_INFINITY) || a.i - b.i,
    )
    .map((x) => x.e);
}
