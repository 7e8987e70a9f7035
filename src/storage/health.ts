/**
 * Whether the store answers, in terms every layer can use without knowing the driver: a networked store
 * (PostgreSQL) can be lost while the server runs, an embedded one (SQLite) cannot. Operations that fail
 * because the store is out of reach throw `StoreUnavailableError` (`code: "store_unavailable"`); the HTTP
 * layer answers them with 503 and `Retry-After`, background loops wait and try again.
 */

/** The store's reachability, as a driver reports it (see `Storage.health`). */
export interface StoreHealth {
  /** False from a failure that a probe of the store confirmed, until a probe succeeds again. */
  readonly available: boolean;
  /** Why the store is unavailable (a short phrase without addresses or credentials), else undefined. */
  readonly reason: string | undefined;
  /** Calls `listener` on every change of `available`; returns the unsubscribe. */
  onChange(listener: (available: boolean, reason: string | undefined) => void): () => void;
}

/** The store cannot be reached now; the operation did not happen (or its outcome is unknown: not acknowledged). */
export class StoreUnavailableError extends Error {
  readonly code = "store_unavailable";
  /** A short phrase (no addresses or credentials): "connection refused", "query timed out". */
  readonly reason: string;

  constructor(reason: string, options?: { cause?: unknown }) {
    super(`the store is unavailable: ${reason}`, options);
    this.name = "StoreUnavailableError";
    this.reason = reason;
  }
}

/** True for an error thrown because the store is out of reach (matched on `code`, across any boundary). */
export function isStoreUnavailable(err: unknown): boolean {
  return (err as { code?: unknown } | null | undefined)?.code === "store_unavailable";
}

/** The health of a store that lives in the process (SQLite): always available. */
export const alwaysAvailable: StoreHealth = {
  available: true,
  reason: undefined,
  onChange: () => () => undefined,
};
