/** Daily quotas of free accounts and the UTC day key that usage counters use. */
import type { Config } from "../../config.ts";

export interface PlanLimits {
  dailyInvocations: number;
  dailyComputeMs: number;
  /** JSON bytes of events and delivery copies stored (stored-bytes.ts in domain/sources). */
  dailyStoredBytes: number;
}

export function planLimits(config: Config): PlanLimits {
  return {
    dailyInvocations: config.freeDailyInvocations,
    dailyComputeMs: config.freeDailyComputeMs,
    dailyStoredBytes: config.freeDailyStoredBytes,
  };
}

/** `YYYY-MM-DD` of the UTC day containing `epochMs`. */
export function usageDay(epochMs: number): string {
  // Every invocation asks; the day is only formatted again when it changes.
  if (epochMs < lastDay.start || epochMs >= lastDay.start + 86_400_000) {
    const start = epochMs - (((epochMs % 86_400_000) + 86_400_000) % 86_400_000);
    lastDay = { start, key: new Date(start).toISOString().slice(0, 10) };
  }
  return lastDay.key;
}

let lastDay = { start: Number.POSITIVE_INFINITY, key: "" };
