/**
 * How many sources, webhooks, workflows and app accounts one owner (a user or an organization) may have
 * (`FOUNT_MAX_*_PER_OWNER`, docs/errors.md, `too_many_resources`). Without a bound one tenant could
 * create them, a few thousand a minute within the API's rate limit, until the shared store filled; each
 * source also costs the server a lease, timers and a row in every sweep. Checked before a create, by the
 * count the list routes already make (an index range of the owner's rows): creates racing each other may
 * pass the bound by a few, which is all a bound on growth needs.
 */
import type { OwnerLimits } from "../config.ts";
import { AppError } from "../errors.ts";

const settings: Record<keyof OwnerLimits, string> = {
  sources: "FOUNT_MAX_SOURCES_PER_OWNER",
  webhooks: "FOUNT_MAX_WEBHOOKS_PER_OWNER",
  workflows: "FOUNT_MAX_WORKFLOWS_PER_OWNER",
  appAccounts: "FOUNT_MAX_APP_ACCOUNTS_PER_OWNER",
};

const names: Record<keyof OwnerLimits, string> = {
  sources: "sources",
  webhooks: "webhooks",
  workflows: "workflows",
  appAccounts: "app accounts",
};

/** Throws 409 `too_many_resources` when `ownerId` already has `count` of `kind`, its bound or more. */
export function refuseOverLimit(limits: OwnerLimits, kind: keyof OwnerLimits, count: number): void {
  const limit = limits[kind];
  if (count < limit) return;
  throw new AppError(
    "too_many_resources",
    `This account has ${count} ${names[kind]}, the most one account may have on this instance (${settings[kind]}); delete some first`,
    { details: { resource: kind === "appAccounts" ? "accounts" : kind, limit } },
  );
}
