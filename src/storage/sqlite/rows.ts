/** Row shapes and SQL pieces shared by the SQLite operation classes. */
import type { SQLInputValue } from "node:sqlite";

export type Row = Record<string, SQLInputValue>;

/**
 * A LIMIT bound at run time. SQLite (3.53) reads a plain `LIMIT ?` parameter while planning and then
 * recompiles the statement on every new binding, which on each claim and window trim cost more than
 * the query itself; the cast hides the value from the planner, and the plan stays the same.
 */
export const limitParam = "LIMIT CAST(? AS INTEGER)";
