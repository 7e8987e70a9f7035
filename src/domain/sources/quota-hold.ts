/**
 * The free plan's daily quota as the runner meets it: before an invocation runs, the check counts it in
 * its owner's day at once (so hits checked at the same time, on any node, cannot all pass on one count),
 * and the invocation holds that place until its commit adds its compute time and stored bytes, or gives it
 * back when it never commits. Compute time and bytes are known only at the commit: the run that crosses
 * either limit completes, and the next check refuses.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../../clock.ts";
import type { Config } from "../../config.ts";
import { AppError } from "../../errors.ts";
import type { Storage } from "../../storage/port.ts";
import { planLimits, usageDay } from "../accounts/quotas.ts";
import type { SourceRecord } from "../types.ts";

/** One invocation's place in its owner's daily quota, taken at the check. */
export interface QuotaHold {
  /** The check counted the invocation in its day's usage already: its commit adds compute time and bytes only. */
  readonly counted: boolean;
  /** The invocation ended without a commit: a counted invocation is given back. */
  release(): void;
}

const noHold: QuotaHold = { counted: false, release: () => undefined };

/** What the quota check reads and writes. */
export interface QuotaDeps {
  store: Storage;
  clock: Clock;
  config: Config;
  logger: FastifyBaseLogger;
}

/**
 * Throws `quota_exceeded` when the free account that created the source (or the external workflow,
 * whose every recorded event counts as an invocation) used up its day; otherwise counts the invocation
 * in the day's usage at once, in one statement of the store.
 */
export async function holdQuota(d: QuotaDeps, emitter: Pick<SourceRecord, "createdBy">): Promise<QuotaHold> {
  const user = await d.store.getUser(emitter.createdBy);
  if (user?.plan !== "free") return noHold;
  const day = usageDay(d.clock.now());
  const limits = planLimits(d.config);
  const reserved = await d.store.reserveInvocation(user.id, day, {
    invocations: limits.dailyInvocations,
    computeMs: limits.dailyComputeMs,
    storedBytes: limits.dailyStoredBytes,
  });
  if (!reserved) throw quotaExceeded(day, d.clock.now());
  let released = false;
  return {
    counted: true,
    release: () => {
      if (released) return;
      released = true;
      d.store.addUsage(user.id, day, { invocations: -1, computeMs: 0, storedBytes: 0 }).catch((err) => {
        d.logger.warn({ err, userId: user.id }, "could not give back an invocation that never ran");
      });
    },
  };
}

/** The 429 of a used-up day: `Retry-After` runs to the next UTC day. */
function quotaExceeded(day: string, nowMs: number): AppError {
  const tomorrow = new Date(day).getTime() + 86_400_000;
  return new AppError(
    "quota_exceeded",
    "The daily invocation, compute-time or stored-bytes quota of this account is used up",
    { headers: { "retry-after": String(Math.max(1, Math.ceil((tomorrow - nowMs) / 1000))) } },
  );
}

/**
 * For work that copies stored events without running anything (a replay, a backfill): throws
 * `quota_exceeded` when `userId` is a free account whose day's stored bytes are used up, and answers
 * the free account whose stored bytes the copies then count in (undefined for any other plan). As for a
 * run, the request that crosses the limit completes.
 */
export async function storedBytesPayer(
  d: Pick<QuotaDeps, "store" | "clock" | "config">,
  userId: string,
): Promise<string | undefined> {
  const user = await d.store.getUser(userId);
  if (user?.plan !== "free") return undefined;
  const day = usageDay(d.clock.now());
  const used = await d.store.getUsage(user.id, day);
  if (used.storedBytes >= planLimits(d.config).dailyStoredBytes) throw quotaExceeded(day, d.clock.now());
  return user.id;
}
