/**
 * The statement helpers every SQLite operation file uses, on the driver's one connection: statements
 * prepared once and cached by their SQL text, rows mapped, newest-first pages. Synchronous, as
 * node:sqlite is; the operation files make them async at the port.
 */
import type { DatabaseSync, SQLInputValue, StatementSync } from "node:sqlite";
import type { Page, PageQuery } from "../../domain/types.ts";
import { limitParam, type Row } from "./rows.ts";

/** `?, ?, ?` for an IN list (never empty: an empty list matches nothing). */
export function placeholders(values: readonly unknown[]): string {
  return values.length === 0 ? "NULL" : values.map(() => "?").join(", ");
}

/**
 * Runs `fn` in a write transaction of its own (BEGIN IMMEDIATE, COMMIT, or ROLLBACK when it throws), or in
 * the transaction already open on `db`, which then commits or rolls back with it.
 */
export function inWriteTransaction<T>(db: DatabaseSync, fn: () => T): T {
  if (db.isTransaction) return fn();
  db.exec("BEGIN IMMEDIATE");
  try {
    const result = fn();
    db.exec("COMMIT");
    return result;
  } catch (err) {
    db.exec("ROLLBACK");
    throw err;
  }
}

/** The statement helpers, bound to one connection. */
export class Sql {
  readonly db: DatabaseSync;
  readonly #statements = new Map<string, StatementSync>();

  constructor(db: DatabaseSync) {
    this.db = db;
  }

  /** The prepared statement of `text`, prepared on first use. */
  prepare(text: string): StatementSync {
    let statement = this.#statements.get(text);
    if (!statement) {
      statement = this.db.prepare(text);
      this.#statements.set(text, statement);
    }
    return statement;
  }

  /** The first row, mapped. */
  get<T>(text: string, params: SQLInputValue[], map: (r: Row) => T): T | undefined {
    const row = this.prepare(text).get(...params) as Row | undefined;
    return row ? map(row) : undefined;
  }

  /** Every row, mapped. */
  all<T>(text: string, params: SQLInputValue[], map: (r: Row) => T): T[] {
    return (this.prepare(text).all(...params) as Row[]).map(map);
  }

  /** Runs a statement; returns the rows it changed. */
  run(text: string, params: SQLInputValue[]): number {
    return Number(this.prepare(text).run(...params).changes);
  }

  /** `count(*)` of a statement that selects it as `n`. */
  count(text: string, params: SQLInputValue[]): number {
    return (this.prepare(text).get(...params) as { n: number }).n;
  }

  /** `UPDATE table SET updated_at, <the defined columns> WHERE id`; returns the rows changed. */
  updateColumns(
    table: string,
    id: string,
    updatedAt: number,
    columns: Record<string, SQLInputValue | undefined>,
  ): number {
    const sets: string[] = ["updated_at = ?"];
    const params: SQLInputValue[] = [updatedAt];
    for (const [column, value] of Object.entries(columns)) {
      if (value === undefined) continue;
      sets.push(`${column} = ?`);
      params.push(value);
    }
    return this.run(`UPDATE ${table} SET ${sets.join(", ")} WHERE id = ?`, [...params, id]);
  }

  /** Newest-first page over `table` filtered by `where`, bounded by seq cursors. */
  page<T>(table: string, where: string, params: SQLInputValue[], q: PageQuery, map: (r: Row) => T): Page<T> {
    const total = this.count(`SELECT count(*) AS n FROM ${table} WHERE ${where}`, params);
    let items: T[];
    if (q.beforeSeq !== undefined) {
      // Toward newer items: take the nearest ones above the cursor, then restore newest-first order.
      items = this.all(
        `SELECT * FROM ${table} WHERE ${where} AND seq > ? ORDER BY seq ASC ${limitParam}`,
        [...params, q.beforeSeq, q.limit],
        map,
      ).reverse();
    } else if (q.afterSeq !== undefined) {
      items = this.all(
        `SELECT * FROM ${table} WHERE ${where} AND seq < ? ORDER BY seq DESC ${limitParam}`,
        [...params, q.afterSeq, q.limit],
        map,
      );
    } else {
      items = this.all(
        `SELECT * FROM ${table} WHERE ${where} ORDER BY seq DESC ${limitParam}`,
        [...params, q.limit],
        map,
      );
    }
    return { items, totalCount: total };
  }
}
