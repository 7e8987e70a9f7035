import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { storageContract } from "./contract.ts";

storageContract("sqlite", async () =>
  openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-store-")) }),
);
