/**
 * Writes held back inside a transaction and sent together. A group commit stores many events, and each
 * makes the same few writes (its row, the emitter's clock, the owner's usage, the routed deliveries);
 * sent one by one, every write costs a round trip to PostgreSQL, during which the transaction's
 * connection waits. On this 2-core machine a round trip under load took about 3 ms, so a commit of 24
 * events spent most of its time waiting. Held back, the writes go in one multi-statement query together
 * with the next read or with COMMIT, and BEGIN goes with the first of them: a group commit that reads
 * its routing once costs two round trips.
 *
 * A multi-statement query cannot carry parameters, so the values are written into the SQL as literals
 * (`textLiteral` for text, as pg's `escapeLiteral` writes them). Only the driver's own statements are held back, and their parameters are
 * text, integers, booleans or NULL.
 */
import type { PoolClient } from "pg";
import type { Queryable, Row } from "./sql.ts";

/**
 * `value` as a SQL string literal, as pg's `escapeLiteral` writes it (quotes doubled; with a backslash,
 * backslashes doubled and an `E` string). pg's builds the literal a character at a time, which for an
 * event's JSON took 6 to 7 µs per value and left a string of hundreds of pieces to flatten; this one
 * takes about 0.3 µs (issue 29).
 */
export function textLiteral(value: string): string {
  const quoted = value.includes("'") ? value.replaceAll("'", "''") : value;
  return value.includes("\\") ? ` E'${quoted.replaceAll("\\", "\\\\")}'` : `'${quoted}'`;
}

/** A SQL literal for a statement parameter. */
function literal(value: unknown): string {
  if (value === null || value === undefined) return "NULL";
  if (typeof value === "boolean") return value ? "TRUE" : "FALSE";
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError(`cannot write ${value} into SQL`);
    return String(value);
  }
  if (typeof value === "string") return textLiteral(value);
  if (Array.isArray(value)) return `ARRAY[${value.map((v) => literal(v)).join(", ")}]`;
  throw new TypeError(`cannot write a ${typeof value} into SQL as a literal`);
}

/**
 * Statement texts split at their `$n` placeholders (text, parameter index, text, …), kept per text: the
 * driver's statements are a few fixed texts, and merged ones vary only in their number of rows.
 */
const splitTexts = new Map<string, Array<string | number>>();
/** Past this many texts, further ones are split each time rather than kept (a bound, never reached by the driver's own). */
const MAX_SPLIT_TEXTS = 1024;

/** `text` with each `$n` replaced by the literal of `params[n - 1]`. */
export function inlineParams(text: string, params: unknown[]): string {
  let parts = splitTexts.get(text);
  if (!parts) {
    parts = text.split(/\$(\d+)/).map((part, i) => (i % 2 === 1 ? Number(part) - 1 : part));
    if (splitTexts.size < MAX_SPLIT_TEXTS) splitTexts.set(text, parts);
  }
  let sql = "";
  for (const part of parts) sql += typeof part === "number" ? literal(params[part]) : part;
  return sql;
}

/** A statement and its parameters. */
export interface Statement {
  text: string;
  params: unknown[];
  /**
   * The same write as an `EXECUTE` of a statement that every transaction's connection has prepared
   * (`preparedStatements` in driver.ts), sent instead of `text` inside a transaction: the statement is
   * then neither parsed nor planned again (its parameters are written as literals, as any held-back
   * write's). Outside a transaction `text` runs, as a parameterised `EXECUTE` cannot.
   */
  prepared?: Statement;
}

/** Held-back writes that become one statement when sent (see `deferMerged`). */
interface Merged {
  key: string;
  items: unknown[];
  build: (items: unknown[]) => Statement;
}

/** A transaction's connection that can hold writes back (see `Sql.defer`). */
export class DeferringClient implements Queryable {
  readonly #client: PoolClient;
  #pending: Array<string | Merged> = [];
  /** The merged entries of `#pending` by key. */
  #merged = new Map<string, Merged>();

  constructor(client: PoolClient) {
    this.#client = client;
  }

  /** Holds a write back until the next query or the commit. */
  defer(text: string, params: unknown[]): void {
    this.#pending.push(this.#inline(text, params));
  }

  /**
   * Holds back a write that is merged with the other held-back writes of the same `key` into one
   * statement, built by `build` when they are sent (the events of one window, the clock of one emitter).
   */
  deferMerged<T>(key: string, item: T, build: (items: T[]) => Statement): void {
    let entry = this.#merged.get(key);
    if (!entry) {
      entry = { key, items: [], build: build as (items: unknown[]) => Statement };
      this.#merged.set(key, entry);
      this.#pending.push(entry);
    }
    entry.items.push(item);
  }

  /** The held-back writes as SQL, and forgets them. */
  #take(): string[] {
    const pending = this.#pending;
    this.#pending = [];
    this.#merged.clear();
    return pending.map((p) => {
      if (typeof p === "string") return p;
      const built = p.build(p.items);
      const { text, params } = built.prepared ?? built;
      return this.#inline(text, params);
    });
  }

  /**
   * A statement whose answer is needed now. The held-back writes go first, in the same round trip when
   * the statement's parameters can be written as literals, so that it sees the transaction's own writes.
   */
  async query(text: string, params: unknown[] = []): Promise<{ rows: Row[]; rowCount: number | null }> {
    if (this.#pending.length === 0) return this.#client.query(text, params);
    let inlined: string;
    try {
      inlined = this.#inline(text, params);
    } catch {
      await this.flush();
      return this.#client.query(text, params);
    }
    const statements = this.#take();
    statements.push(inlined);
    const results = (await this.#client.query(statements.join(";\n"))) as unknown as
      | Array<{ rows: Row[]; rowCount: number | null }>
      | { rows: Row[]; rowCount: number | null };
    return Array.isArray(results) ? results[results.length - 1]! : results;
  }

  #inline(text: string, params: unknown[]): string {
    return inlineParams(text, params);
  }

  /** Sends the held-back writes, followed by `then` (COMMIT) in the same round trip when given. */
  async flush(then?: string): Promise<void> {
    const statements = this.#take();
    if (then !== undefined) statements.push(then);
    if (statements.length === 0) return;
    await this.#client.query(statements.join(";\n"));
  }

  /** Forgets the held-back writes (the transaction rolls back). */
  discard(): void {
    this.#pending = [];
    this.#merged.clear();
  }
}
