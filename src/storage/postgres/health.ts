/**
 * PostgreSQL lost while the server runs. Every operation of the driver runs through `guard`: an error
 * that means the database is out of reach (refused, reset or terminated connections, a server shutting
 * down, a connection or query timeout) becomes a `StoreUnavailableError`, and starts a probe (a fresh
 * connection and `SELECT 1`, outside the pool so that a pool full of stuck queries cannot fail it). A
 * failed probe marks the store unavailable: from then on operations fail at once instead of waiting
 * for their timeouts, and the probe repeats every second until one succeeds, which marks the store
 * available again. A failure the probe does not confirm (one query timed out, one connection was
 * dropped by a restart that is already over) fails only its own operation.
 */
import pg from "pg";
import { isStoreUnavailable, type StoreHealth, StoreUnavailableError } from "../health.ts";
import type { Queryable } from "./sql.ts";

/** Network errors (Node's `code`) that mean the database cannot be reached now. */
const networkReasons: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  EPIPE: "connection reset",
  ETIMEDOUT: "connection timed out",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  EHOSTDOWN: "host down",
  ENOTFOUND: "host name not resolved",
  EAI_AGAIN: "host name not resolved",
};

/**
 * Errors `pg` raises itself, which carry no code: matched on their text, the only thing they have. Kept
 * here, in the one place that classifies errors; everything above matches `store_unavailable`.
 */
const clientReasons: Array<[RegExp, string]> = [
  [/^Connection terminated due to connection timeout/, "connection timed out"],
  [/^Connection terminated/, "connection lost"],
  [/^timeout exceeded when trying to connect/, "no connection free within the store timeout"],
  [/^Query read timeout/, "query timed out"],
  [/not queryable/, "connection lost"],
];

/**
 * Why `err` means the store is out of reach, as a short phrase without addresses (it is shown on
 * /readyz), or undefined when it is an ordinary error of the operation (a constraint, a bug).
 */
export function unavailableReason(err: unknown): string | undefined {
  const e = err as { code?: unknown; message?: unknown; severity?: unknown } | null | undefined;
  const code = typeof e?.code === "string" ? e.code : undefined;
  if (code !== undefined) {
    if (networkReasons[code]) return networkReasons[code];
    // A protocol violation the server answers with ERROR, not FATAL, keeps the connection: a statement it
    // could not read (U+0000 in a held-back write's text, deferred.ts, is "invalid message format"), an
    // error of the operation. Taken for a lost store, a settlement holding one was retried at once, forever.
    if (code === "08P01" && e?.severity === "ERROR") return undefined;
    // SQLSTATE class 08: connection exceptions.
    if (code.startsWith("08")) return "connection failure";
    if (code === "57P01" || code === "57P02") return "the database server is shutting down";
    if (code === "57P03") return "the database server is starting up or not accepting connections";
    if (code === "53300") return "the database server has no connection slot free";
    // statement_timeout (set to the store timeout): the database did not answer in time.
    if (code === "57014") return "query timed out";
  }
  const message = typeof e?.message === "string" ? e.message : "";
  for (const [pattern, reason] of clientReasons) if (pattern.test(message)) return reason;
  return undefined;
}

/** Connects once with `config`, runs `SELECT 1` and disconnects; rejects when any step fails. */
export async function probeOnce(config: pg.ClientConfig): Promise<void> {
  const client = new pg.Client(config);
  // A connection error is also emitted as an event; unheard, it would end the process.
  client.on("error", () => undefined);
  try {
    await client.connect();
    await client.query("SELECT 1");
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The store's health as the driver sees it (see the module comment). */
export class PostgresHealth implements StoreHealth {
  readonly #probe: () => Promise<void>;
  readonly #intervalMs: number;
  readonly #listeners = new Set<(available: boolean, reason: string | undefined) => void>();
  #available = true;
  #reason: string | undefined;
  /** A probe runs or is scheduled. */
  #probing = false;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: { probe: () => Promise<void>; intervalMs: number }) {
    this.#probe = options.probe;
    this.#intervalMs = options.intervalMs;
  }

  get available(): boolean {
    return this.#available;
  }

  get reason(): string | undefined {
    return this.#reason;
  }

  onChange(listener: (available: boolean, reason: string | undefined) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Runs a store operation: at once refused while the store is unavailable, its loss classified. */
  guard<T>(op: () => Promise<T>): Promise<T> {
    if (!this.#available) return Promise.reject(new StoreUnavailableError(this.#reason ?? "unreachable"));
    return op().catch((err: unknown) => {
      throw this.classify(err);
    });
  }

  /** `queryable` with every query guarded. */
  guarded(queryable: Queryable): Queryable {
    return { query: (text, params, name) => this.guard(() => queryable.query(text, params, name)) };
  }

  /** `err` as a StoreUnavailableError when it means the store is out of reach (then probed); else `err`. */
  classify(err: unknown): unknown {
    if (isStoreUnavailable(err)) return err;
    const reason = unavailableReason(err);
    if (reason === undefined) return err;
    this.#suspect();
    return new StoreUnavailableError(reason, { cause: err });
  }

  /** Stops probing (the store is closing). */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  /** An operation failed as if the store were gone: a probe decides. */
  #suspect(): void {
    if (this.#probing || this.#closed) return;
    this.#probing = true;
    void this.#check();
  }

  /** One probe; while it fails, the store is unavailable and the next one is scheduled. */
  async #check(): Promise<void> {
    try {
      await this.#probe();
      this.#probing = false;
      this.#set(true, undefined);
    } catch (err) {
      if (this.#closed) return;
      this.#set(false, unavailableReason(err) ?? "unreachable");
      this.#timer = setTimeout(() => void this.#check(), this.#intervalMs);
      // A node waiting for its database must still exit when asked.
      this.#timer.unref();
    }
  }

  #set(available: boolean, reason: string | undefined): void {
    const changed = available !== this.#available;
    this.#available = available;
    this.#reason = reason;
    if (!changed || this.#closed) return;
    for (const listener of this.#listeners) {
      try {
        listener(available, reason);
      } catch {
        // A listener (logging) must not stop the probe.
      }
    }
  }
}
