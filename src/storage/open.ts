/**
 * Opens the store a Config names: PostgreSQL when it has a `DATABASE_URL`, else the SQLite file in its
 * data dir. Apart from the composition root, and each driver loaded only when chosen, so that `fount
 * admin …` opens a store without loading the HTTP side or the other driver.
 */
import type { Config } from "../config.ts";
import type { Storage } from "./port.ts";

/** Opens the configured store; `existingOnly`: a PostgreSQL schema without a store is refused, not created. */
export async function openStorage(
  config: Config,
  options: { existingOnly?: boolean } = {},
): Promise<Storage> {
  if (config.databaseUrl) {
    const { openPostgresStorage } = await import("./postgres/driver.ts");
    return openPostgresStorage({
      url: config.databaseUrl,
      timeoutMs: config.storeTimeoutMs,
      existingOnly: options.existingOnly,
    });
  }
  const { openSqliteStorage } = await import("./sqlite/driver.ts");
  return openSqliteStorage({ dataDir: config.dataDir, searchIndexDelayMs: config.searchIndexDelayMs });
}
