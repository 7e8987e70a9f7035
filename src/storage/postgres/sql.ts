/** The query helpers every PostgreSQL operation file uses: one connection or the pool, rows as objects. */
import type { Page, PageQuery } from "../../domain/types.ts";

/** A row as `pg` returns it (BIGINT parsed to number by the pool's type parsers, see driver.ts). */
export type Row = Record<string, unknown>;

/** What the operations run on: the pool outside a transaction, the transaction's client inside one. */
export interface Queryable {
  /**
   * Runs a statement. With `name`, a connection parses and plans it once and reuses that (a prepared
   * statement): for statements that run all the time and take longer to plan than to run.
   */
  query(text: string, params?: unknown[], name?: string): Promise<{ rows: Row[]; rowCount: number | null }>;
  /** Holds a write back to be sent with later ones (a transaction's connection, deferred.ts). */
  defer?(text: string, params: unknown[]): void;
  /** Holds a write back, merged with the others of its key into one statement (deferred.ts). */
  deferMerged?<T>(key: string, item: T, build: (items: T[]) => { text: string; params: unknown[] }): void;
}

/** The statement helpers, bound to one Queryable. */
export class Sql {
  readonly db: Queryable;

  constructor(db: Queryable) {
    this.db = db;
  }

  /** The first row, mapped; with `name`, as a prepared statement of that name (see `Queryable.query`). */
  async get<T>(text: string, params: unknown[], map: (r: Row) => T, name?: string): Promise<T | undefined> {
    const { rows } = await this.db.query(text, params, name);
    return rows[0] ? map(rows[0]) : undefined;
  }

  /** Every row, mapped; with `name`, as a prepared statement of that name (see `Queryable.query`). */
  async all<T>(text: string, params: unknown[], map: (r: Row) => T, name?: string): Promise<T[]> {
    const { rows } = await this.db.query(text, params, name);
    return rows.map(map);
  }

  /**
   * A write whose result nobody reads: inside a transaction it is held back and sent with the next
   * query or the commit (deferred.ts), so that its errors surface there; outside one it runs now.
   */
  async defer(text: string, params: unknown[]): Promise<void> {
    if (this.db.defer) this.db.defer(text, params);
    else await this.db.query(text, params);
  }

  /**
   * A write merged with the other held-back writes of `key` into one statement built by `build`;
   * outside a transaction it runs now, alone.
   */
  async deferMerged<T>(
    key: string,
    item: T,
    build: (items: T[]) => { text: string; params: unknown[] },
  ): Promise<void> {
    if (this.db.deferMerged) return this.db.deferMerged(key, item, build);
    const { text, params } = build([item]);
    await this.db.query(text, params);
  }

  /** Runs a statement; returns the rows it changed. */
  async run(text: string, params: unknown[]): Promise<number> {
    return (await this.db.query(text, params)).rowCount ?? 0;
  }

  /**
   * `UPDATE table SET updated_at, <the defined columns> WHERE id`, returning the row (undefined when no
   * row has that ID).
   */
  async updateColumns<T>(
    table: string,
    id: string,
    updatedAt: number,
    columns: Record<string, unknown>,
    map: (r: Row) => T,
  ): Promise<T | undefined> {
    const sets = ["updated_at = $1"];
    const params: unknown[] = [updatedAt];
    for (const [column, value] of Object.entries(columns)) {
      if (value === undefined) continue;
      params.push(value);
      sets.push(`${column} = $${params.length}`);
    }
    params.push(id);
    return this.get(
      `UPDATE ${table} SET ${sets.join(", ")} WHERE id = $${params.length} RETURNING *`,
      params,
      map,
    );
  }

  /**
   * Newest-first page over `table` filtered by `where` (whose parameters are `$1…$n` for `params`),
   * bounded by seq cursors.
   */
  async page<T>(
    table: string,
    where: string,
    params: unknown[],
    q: PageQuery,
    map: (r: Row) => T,
    /** A column `where` holds to one value, put before seq in the ORDER BY (see `searchWhere`). */
    leading?: string,
  ): Promise<Page<T>> {
    const next = params.length + 1;
    const order = (dir: "ASC" | "DESC") => (leading ? `${leading} ${dir}, seq ${dir}` : `seq ${dir}`);
    const total = await this.get(
      `SELECT count(*) AS n FROM ${table} WHERE ${where}`,
      params,
      (r) => r.n as number,
    );
    let items: T[];
    if (q.beforeSeq !== undefined) {
      // Toward newer items: take the nearest ones above the cursor, then restore newest-first order.
      items = (
        await this.all(
          `SELECT * FROM ${table} WHERE ${where} AND seq > $${next} ORDER BY ${order("ASC")} LIMIT $${next + 1}`,
          [...params, q.beforeSeq, q.limit],
          map,
        )
      ).reverse();
    } else if (q.afterSeq !== undefined) {
      items = await this.all(
        `SELECT * FROM ${table} WHERE ${where} AND seq < $${next} ORDER BY ${order("DESC")} LIMIT $${next + 1}`,
        [...params, q.afterSeq, q.limit],
        map,
      );
    } else {
      items = await this.all(
        `SELECT * FROM ${table} WHERE ${where} ORDER BY ${order("DESC")} LIMIT $${next}`,
        [...params, q.limit],
        map,
      );
    }
    return { items, totalCount: total ?? 0 };
  }
}

/** `$from, $from+1, …` for `count` values. */
export function params(from: number, count: number): string {
  return Array.from({ length: count }, (_, i) => `$${from + i}`).join(", ");
}
