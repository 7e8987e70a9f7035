/**
 * The run lease from one invocation's side (several nodes on one PostgreSQL database; the leases
 * themselves are in cluster/source-leases.ts). An invocation that may write runs under its source's
 * lease: it waits until this node holds the source, its commit asserts in its transaction that the lease
 * is still this node's under the generation it ran with, and it exits the lease once its outcome is
 * settled. A commit the store refused because the lease moved on tells the leases and fails `lease_lost`.
 */
import type { FastifyBaseLogger } from "fastify";
import { AppError } from "../../errors.ts";
import type { InvocationKind } from "../../runtime/types.ts";
import type { SourceLeases } from "../cluster/source-leases.ts";

/** What the PostgreSQL store raises when a commit's run lease moved on (migration 006, fount_assert_lease). */
const leaseLostSqlState = "FL001";

/** The leases an invocation runs under: none with one node, nor for reads (`options`). */
export function runLeases(
  leases: SourceLeases | undefined,
  invocation: InvocationKind,
): SourceLeases | undefined {
  return invocation.kind === "options" ? undefined : leases;
}

/**
 * The commit of a run under lease generation `gen` failed with `err`: when the lease had moved on, the
 * leases learn it, and the error to fail the run with is `lease_lost` (the client retries; the source
 * runs on another node now). Undefined for any other failure.
 */
export function leaseLost(
  err: unknown,
  leases: SourceLeases | undefined,
  sourceId: string,
  gen: number | undefined,
  logger: FastifyBaseLogger,
): AppError | undefined {
  if ((err as { code?: unknown }).code !== leaseLostSqlState || gen === undefined) return undefined;
  leases?.lost(sourceId, gen);
  logger.warn({ sourceId }, "a run was not stored: another node took the source over");
  return new AppError("lease_lost", undefined, { cause: err, headers: { "retry-after": "1" } });
}
