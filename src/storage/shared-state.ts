/**
 * SQL pieces both drivers use for what several nodes share through the store (migration 005): the
 * meta table's encryption check, a sample of the sealed secrets, and API rate-limit windows.
 */

/** Queries that each find one sealed secret of the store, if it holds any; the same SQL in both drivers. */
export const sealedSecretQueries = [
  "SELECT signing_secret_sealed AS v FROM webhooks LIMIT 1",
  "SELECT signing_secret_sealed AS v FROM workflows LIMIT 1",
  "SELECT credentials_sealed AS v FROM app_accounts LIMIT 1",
  // Secret props are stored as `{"$sealed": "v1.…"}` among a source's props.
  `SELECT props_json AS v FROM sources WHERE props_json LIKE '%"$sealed"%' LIMIT 1`,
];

/** The sealed value in a column `sealedSecretQueries` read: the column itself, or a secret prop in props JSON. */
export function sealedValueIn(column: string): string | undefined {
  if (!column.startsWith("{")) return column;
  const props = JSON.parse(column) as Record<string, unknown>;
  for (const value of Object.values(props)) {
    const sealed = (value as { $sealed?: unknown } | null)?.$sealed;
    if (typeof sealed === "string") return sealed;
  }
  return undefined;
}

/**
 * Counts a hit in a rate-limit window: a window that began `windowMs` or more before now starts over,
 * keeping its end for the prune (`pruneRateLimitsSql`). Parameters: key, now, window length. Both CASEs
 * read the row as it was before this update.
 */
export const rateLimitHitSql = (p: [string, string, string]) => {
  const over = `rate_limits.window_start_ms <= ${p[1]} - ${p[2]}`;
  return `
INSERT INTO rate_limits (key, window_start_ms, window_ends_ms, count) VALUES (${p[0]}, ${p[1]}, ${p[1]} + ${p[2]}, 1)
ON CONFLICT (key) DO UPDATE SET
  window_start_ms = CASE WHEN ${over} THEN excluded.window_start_ms ELSE rate_limits.window_start_ms END,
  window_ends_ms = CASE WHEN ${over} THEN excluded.window_ends_ms ELSE rate_limits.window_ends_ms END,
  count = CASE WHEN ${over} THEN 1 ELSE rate_limits.count + 1 END
RETURNING count, window_start_ms`;
};

/**
 * Forgets the windows that ended at or before now, whatever their length. A row with no end (0) was
 * written by a node of the version before migration 030/032 during a rolling upgrade: an API minute, as
 * that version's prune took it. Parameter: now.
 */
export const pruneRateLimitsSql = (now: string) =>
  `DELETE FROM rate_limits WHERE window_ends_ms <= ${now} AND (window_ends_ms > 0 OR window_start_ms <= ${now} - 60000)`;
