/** Daily quotas of free accounts and the UTC day key that usage counters use. */
import type { Config } from "../config.ts";

export interface PlanLimits {
  dailyInvocations: number;
  dailyComputeMs: number;
}

export function planLimits(config: Config): PlanLimits {
  return { dailyInvocations: config.freeDailyInvocations, dailyComputeMs: config.freeDailyComputeMs };
}

/** `YYYY-MM-DD` of the UTC day containing `epochMs`. */
export function usageDay(epochMs: number): string {
  return new Date(epochMs).toISOString().slice(0, 10);
}
