/**
 * Migrations of both drivers: several PostgreSQL nodes starting at once on an empty database all come
 * up, a store written by a newer Fount (a migration this build does not know) is refused, and what a
 * migration changes in rows already stored.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import pg from "pg";
import type { Storage } from "../../src/storage/port.ts";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { dropSchema, freshSchema, testPgUrl } from "../pg-schemas.ts";
import { remigratePostgres, remigrateSqlite } from "./remigrate.ts";

const sqliteMigrations = path.join(import.meta.dirname, "../../src/storage/sqlite/migrations");

/** Takes a SQLite store (closed) back to before the event search (migrations 014 and 019 to 022), index file included. */
function backToBeforeSearch(db: DatabaseSync, dataDir: string): void {
  db.exec(`DROP TRIGGER events_text_insert; DROP TRIGGER IF EXISTS events_text_delete; DROP TRIGGER events_text_update;
    DROP TABLE events_text_queue; DROP TABLE search_index; DROP TABLE events_text_mark;
    DELETE FROM schema_migrations WHERE version IN (14, 19, 20, 21, 22)`);
  for (const suffix of ["", "-wal", "-shm"])
    rmSync(path.join(dataDir, `fount-search.db${suffix}`), { force: true });
}
const pgVersions = readdirSync(path.join(import.meta.dirname, "../../src/storage/postgres/migrations"))
  .filter((f) => f.endsWith(".sql"))
  .map((f) => Number.parseInt(f, 10));

test("postgres: eight nodes migrating one empty schema at once all come up, and each migration ran once", async () => {
  const schema = freshSchema();
  try {
    const stores = await Promise.all(
      Array.from({ length: 8 }, () => openPostgresStorage({ url: testPgUrl, schema, poolSize: 2 })),
    );
    try {
      // Every node works on the same tables.
      await stores[0]!.insertUser({
        id: "u_one",
        username: "one",
        email: "a@example.com",
        plan: "free",
        isAdmin: false,
        createdAt: 1,
        updatedAt: 1,
      });
      for (const store of stores) assert.equal(await store.countUsers(), 1);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
    const client = new pg.Client({ connectionString: testPgUrl });
    await client.connect();
    try {
      const { rows } = await client.query(
        `SELECT version FROM "${schema}".schema_migrations ORDER BY version`,
      );
      assert.deepEqual(
        rows.map((r) => r.version),
        pgVersions.sort((a, b) => a - b),
      );
    } finally {
      await client.end();
    }
  } finally {
    await dropSchema(schema);
  }
});

test("postgres: a database written by a newer Fount is refused with a clear message, and left as it was", async () => {
  const schema = freshSchema();
  try {
    const store = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 });
    await store.close();
    const client = new pg.Client({ connectionString: testPgUrl });
    await client.connect();
    try {
      await client.query(`INSERT INTO "${schema}".schema_migrations VALUES (999, '999-future.sql', 0)`);
      await assert.rejects(openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 }), (err: Error) => {
        assert.equal((err as Error & { code: string }).code, "store_too_new");
        assert.match(
          err.message,
          /written by a newer Fount \(schema version 999; this build knows up to \d+\)/,
        );
        return true;
      });
      const { rows } = await client.query(`SELECT max(version) AS v FROM "${schema}".schema_migrations`);
      assert.equal(rows[0].v, 999);
    } finally {
      await client.end();
    }
  } finally {
    await dropSchema(schema);
  }
});

test("postgres: an unreachable server is one clear error, without the password", async () => {
  await assert.rejects(
    openPostgresStorage({ url: "postgres://postgres:hunter2@127.0.0.1:1/test" }),
    (err: Error) => {
      assert.equal((err as Error & { code: string }).code, "store_unreachable");
      assert.match(err.message, /^cannot reach PostgreSQL at 127\.0\.0\.1:1\/test: /);
      assert.doesNotMatch(err.message, /hunter2|\n/);
      return true;
    },
  );
});

test("sqlite: a store written by a newer Fount is refused with a clear message", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  openSqliteStorage({ dataDir }).close();
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  db.exec("INSERT INTO schema_migrations VALUES (999, '999-future.sql', 0)");
  db.close();
  assert.throws(
    () => openSqliteStorage({ dataDir }),
    (err: Error) => {
      assert.equal((err as Error & { code: string }).code, "store_too_new");
      assert.match(
        err.message,
        /SQLite store was written by a newer Fount \(schema version 999; this build knows up to \d+\)/,
      );
      return true;
    },
  );
});

/** What a store held before sessions had a table: a user, its own key and a "console session" key. */
async function keysBeforeSessions(store: Storage): Promise<void> {
  await store.insertUser({
    id: "u_old",
    username: "old",
    email: "old@example.com",
    plan: "free",
    isAdmin: false,
    createdAt: 1,
    updatedAt: 1,
  });
  for (const [id, name] of [
    ["key_own", "default"],
    ["key_console", "console session"],
  ] as const)
    await store.insertApiKey({
      id,
      userId: "u_old",
      name,
      prefix: "fnt_abcd",
      hash: `hash-${id}`,
      createdAt: 1,
      revokedAt: null,
    });
}

/** Sessions are rows of their own now: migration 010 revokes the API keys sign-ins made before it. */
async function assertConsoleKeysRevoked(store: Storage): Promise<void> {
  assert.equal(await store.findApiKeyByHash("hash-key_console"), undefined);
  assert.equal((await store.findApiKeyByHash("hash-key_own"))?.key.id, "key_own");
  const revoked = (await store.listApiKeys("u_old")).find((k) => k.id === "key_console");
  assert.ok(revoked?.revokedAt && revoked.revokedAt > 1_700_000_000, "revoked at the migration's time");
}

test("sqlite: migration 010 revokes the 'console session' keys of earlier sign-ins, and only those", () =>
  remigrateSqlite({
    version: 10,
    back: ["DROP TABLE sessions"],
    seed: keysBeforeSessions,
    check: assertConsoleKeysRevoked,
  }));

test("postgres: migration 010 revokes the 'console session' keys of earlier sign-ins, and only those", () =>
  remigratePostgres({
    version: 10,
    back: ["DROP TABLE sessions"],
    seed: keysBeforeSessions,
    check: assertConsoleKeysRevoked,
  }));

/** Events stored before the event search had an index: migration 014 must index them as it is applied. */
async function eventsBeforeSearch(store: Storage): Promise<void> {
  for (let n = 0; n < 3; n++)
    await store.insertEvent(
      {
        emitterId: "dc_old",
        channel: "",
        id: `5-${n}`,
        idMs: 5,
        idSeq: n,
        indexedAtMs: 5,
        event: { text: `stored before ${n}`, user: { id: n } },
        meta: { emit_id: `e${n}`, name: "", emitter_id: "dc_old" },
      },
      100,
    );
}

async function assertEventsSearchable(store: Storage): Promise<void> {
  const search = { emitterId: "dc_old", channel: "" };
  const text = await store.searchEvents({ ...search, text: ["before 1"] }, { limit: 10 });
  assert.deepEqual(
    text.items.map((e) => e.id),
    ["5-1"],
  );
  const where = await store.searchEvents(
    { ...search, where: [{ path: ["user", "id"], value: "2" }] },
    { limit: 10 },
  );
  assert.deepEqual(
    where.items.map((e) => e.id),
    ["5-2"],
  );
}

test("sqlite: migration 014 indexes the events a store at 013 kept", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir });
  await eventsBeforeSearch(store);
  await store.close();
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  backToBeforeSearch(db, dataDir);
  db.close();
  const migrated = openSqliteStorage({ dataDir });
  try {
    await assertEventsSearchable(migrated);
  } finally {
    await migrated.close();
  }
});

test("postgres: migration 014 indexes the events a store at 013 kept", async () => {
  const schema = freshSchema();
  try {
    const store = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 });
    await eventsBeforeSearch(store);
    await store.close();
    const client = new pg.Client({ connectionString: testPgUrl });
    await client.connect();
    try {
      await client.query(
        `DROP INDEX "${schema}".events_text; DROP INDEX IF EXISTS "${schema}".events_json; DROP FUNCTION "${schema}".event_jsonb; DELETE FROM "${schema}".schema_migrations WHERE version = 14`,
      );
    } finally {
      await client.end();
    }
    const migrated = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 });
    try {
      await assertEventsSearchable(migrated);
    } finally {
      await migrated.close();
    }
  } finally {
    await dropSchema(schema);
  }
});

/**
 * Migration 011 (event retention) came after 012, 013 and 014 were written: a store that has them
 * applies it then. Its events, stored as numbered slots out of ID order, are listed in ID order afterwards, and
 * a source keeps a retention policy.
 */
const slotRows: Array<[seq: number, slot: number]> = [
  [3, 0],
  [4, 1],
  [1, 2],
  [2, 3],
];

async function assertRetentionMigrated(store: Storage, applied: number[]): Promise<void> {
  assert.ok(applied.includes(11) && applied.includes(13) && applied.includes(14), `versions ${applied}`);
  const page = await store.listEvents("dc_old", { channel: "", limit: 10, window: { keep: 3 } });
  assert.deepEqual(
    page.items.map((e) => e.idSeq),
    [4, 3, 2],
  );
  assert.equal(page.totalCount, 3);
  assert.equal(await store.countEvents("dc_old", ""), 4);
  const source = {
    id: "dc_kept",
    ownerId: "u_x",
    createdBy: "u_x",
    componentId: "c_x",
    name: "kept",
    nameSlug: "kept",
    active: true,
    props: {},
    endpointId: null,
    retention: { events: 1000, days: 30 },
    createdAt: 1,
    updatedAt: 1,
  };
  await store.insertSource(source);
  assert.deepEqual((await store.getSource("dc_kept"))?.retention, { events: 1000, days: 30 });
  await store.updateSource("dc_kept", { retention: null, updatedAt: 2 });
  assert.equal((await store.getSource("dc_kept"))?.retention, null);
}

test("sqlite: a store with every migration but 011 (013, 014 and on) applies 011, and keeps its events in ID order", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const dir = path.join(import.meta.dirname, "../../src/storage/sqlite/migrations");
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  db.exec(
    "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
  );
  for (const file of readdirSync(dir).sort()) {
    const version = Number.parseInt(file, 10);
    if (version === 11) continue;
    db.exec(readFileSync(path.join(dir, file), "utf8"));
    db.prepare("INSERT INTO schema_migrations VALUES (?, ?, 0)").run(version, file);
  }
  const insert = db.prepare(
    "INSERT INTO events (emitter_id, channel, slot, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json) VALUES ('dc_old', '', ?, ?, 9, ?, 9, '{}', '{}')",
  );
  for (const [seq, slot] of slotRows) insert.run(slot, `9-${seq}`, seq);
  db.close();
  const store = openSqliteStorage({ dataDir });
  try {
    // A search has the index brought up to date first.
    await store.searchEvents({ emitterId: "dc_old", channel: "", text: ["nothing"] }, { limit: 1 });
    const check = new DatabaseSync(path.join(dataDir, "fount.db"));
    const applied = (
      check.prepare("SELECT version FROM schema_migrations").all() as Array<{ version: number }>
    ).map((r) => r.version);
    // The event search's index (its own file since migration 020) is sound after 011 rewrote the rows.
    check.prepare("ATTACH DATABASE ? AS search").run(path.join(dataDir, "fount-search.db"));
    const generations = check.prepare("SELECT gen FROM search.text_generations").all() as Array<{
      gen: number;
    }>;
    assert.ok(generations.length > 0, "the events were indexed");
    for (const { gen } of generations) {
      check.exec(`INSERT INTO search.events_text_${gen} (events_text_${gen}) VALUES ('integrity-check')`);
    }
    check.close();
    await assertRetentionMigrated(store, applied);
  } finally {
    await store.close();
  }
});

test("postgres: a store with every migration but 011 (013, 014 and on) applies 011, and keeps its events in ID order", async () => {
  const schema = freshSchema();
  const dir = path.join(import.meta.dirname, "../../src/storage/postgres/migrations");
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA "${schema}"; SET search_path TO "${schema}"`);
    await client.query(
      "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    );
    for (const file of readdirSync(dir).sort()) {
      const version = Number.parseInt(file, 10);
      if (version === 11) continue;
      await client.query(readFileSync(path.join(dir, file), "utf8"));
      await client.query("INSERT INTO schema_migrations VALUES ($1, $2, 0)", [version, file]);
    }
    for (const [seq] of slotRows)
      await client.query(
        `INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
         VALUES ('dc_old', '', $1, 9, $2, 9, '{}', '{}')`,
        [`9-${seq}`, seq],
      );
    const store = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 });
    try {
      const { rows } = await client.query("SELECT version FROM schema_migrations");
      await assertRetentionMigrated(
        store,
        rows.map((r) => r.version as number),
      );
    } finally {
      await store.close();
    }
  } finally {
    await client.end();
    await dropSchema(schema);
  }
});

test("sqlite: migration 019 keeps a search index that 014's triggers kept exact, through overwrites and deletes", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  await openSqliteStorage({ dataDir }).close();
  // Back to a store at 014 whose events the triggers indexed as they were written.
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  backToBeforeSearch(db, dataDir);
  db.exec(readFileSync(path.join(sqliteMigrations, "014-event-search.sql"), "utf8"));
  db.exec("INSERT INTO schema_migrations VALUES (14, '014-event-search.sql', 0)");
  const insert = db.prepare(
    `INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
     VALUES ('dc_old', '', ?, 5, ?, 5, ?, '{}')`,
  );
  // The store has migration 011, which took the slot column away.
  for (let n = 0; n < 2; n++) insert.run(`5-${n}`, n, JSON.stringify({ text: `indexed by 014 number${n}` }));
  db.close();
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  try {
    // A window of 2: the new event overwrites the oldest (5-0), whose text the index held since 014.
    await store.insertEvent(
      {
        emitterId: "dc_old",
        channel: "",
        id: "6-0",
        idMs: 6,
        idSeq: 0,
        indexedAtMs: 6,
        event: { text: "written after 019" },
        meta: { emit_id: "e6", name: "", emitter_id: "dc_old" },
      },
      2,
    );
    const ids = async (text: string) =>
      (await store.searchEvents({ emitterId: "dc_old", channel: "", text: [text] }, { limit: 10 })).items.map(
        (e) => e.id,
      );
    assert.deepEqual(await ids("indexed by 014"), ["5-1"]);
    assert.deepEqual(await ids("number0"), []);
    assert.deepEqual(await ids("after 019"), ["6-0"]);
    await store.deleteEvents("dc_old", undefined, undefined, "");
    assert.deepEqual(await ids("indexed by 014"), []);
    assert.deepEqual(await ids("after 019"), []);
  } finally {
    await store.close();
  }
});

test("sqlite: migration 022 keeps what 021 queued and indexed, and indexes later events from the mark", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-store-"));
  const store = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  const put = (s: Storage, n: number, text: string) =>
    s.insertEvent(
      {
        emitterId: "dc_old",
        channel: "",
        id: `7-${n}`,
        idMs: 7,
        idSeq: n,
        indexedAtMs: 7,
        event: { text },
        meta: { emit_id: `e${n}`, name: "", emitter_id: "dc_old" },
      },
      10,
    );
  const ids = async (s: Storage, text: string) =>
    (await s.searchEvents({ emitterId: "dc_old", channel: "", text: [text] }, { limit: 10 })).items.map(
      (e) => e.id,
    );
  try {
    for (let n = 0; n < 2; n++) await put(store, n, `indexedword${n}`);
    assert.deepEqual(await ids(store, "indexedword"), ["7-1", "7-0"]);
  } finally {
    await store.close();
  }
  const db = new DatabaseSync(path.join(dataDir, "fount.db"));
  // Back to 021: the triggers of 020 (021 dropped only the delete one) queue every insert and rewrite,
  // and the store has no mark.
  const at020 = readFileSync(path.join(sqliteMigrations, "020-event-search-file.sql"), "utf8");
  const triggers = at020.match(/CREATE TRIGGER events_text_(insert|update) [\s\S]*?END;/g) ?? [];
  assert.equal(triggers.length, 2);
  db.exec(`DROP TRIGGER events_text_insert; DROP TRIGGER events_text_update; DROP TABLE events_text_mark;
    DELETE FROM schema_migrations WHERE version = 22; ${triggers.join("\n")}`);
  // Written at 021 and not indexed yet: a new row and a rewrite of an indexed one, both queued.
  db.exec(`INSERT INTO events (emitter_id, channel, id, id_ms, id_seq, indexed_at_ms, event_json, meta_json)
      VALUES ('dc_old', '', '7-2', 7, 2, 7, '{"text":"queuedword2"}', '{}');
    UPDATE events SET id = '7-3', id_seq = 3, event_json = '{"text":"queuedword3"}' WHERE id = '7-0';`);
  assert.equal((db.prepare("SELECT count(*) AS n FROM events_text_queue").get() as { n: number }).n, 2);
  db.close();
  const migrated = openSqliteStorage({ dataDir, searchIndexDelayMs: 3_600_000 });
  try {
    await put(migrated, 4, "laterword4");
    assert.deepEqual(await ids(migrated, "indexedword"), ["7-1"]);
    assert.deepEqual(await ids(migrated, "queuedword"), ["7-3", "7-2"]);
    assert.deepEqual(await ids(migrated, "laterword"), ["7-4"]);
  } finally {
    await migrated.close();
  }
});
