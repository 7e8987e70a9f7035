/**
 * `fount admin backup` and `restore`, run as processes beside a live server: a backup taken while a
 * source is being hit restores into an empty data dir, and a server started there has the user, the
 * source and its events (and can open the webhook's sealed secret); the refusals leave nothing behind.
 */
import assert from "node:assert/strict";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { deploy, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { fount } from "./run.ts";

let server: TestServer;
let user: { id: string; key: string };
let source: { id: string; endpoint: string };
const scratch = mkdtempSync(path.join(os.tmpdir(), "fount-backup-"));
// A data dir restored in here is used by a server whose executors (as root) run under other uids.
chmodSync(scratch, 0o711);

before(async () => {
  server = await startServer();
  user = await server.createUser("backed-up");
  const s = await deploy(server, { component_code: fixture("http-echo.mjs"), name: "kept" }, user.key);
  source = { id: s.id, endpoint: s.configured_props.http.endpoint_url };
});
after(async () => {
  await server.close();
  rmSync(scratch, { recursive: true, force: true });
});

test("a backup taken while the server takes hits restores into an empty dir that a new server starts on", async () => {
  for (let i = 0; i < 5; i++) assert.equal((await hit(source.endpoint, { method: "POST" })).status, 200);
  const hook = await server.api("POST", "/v1/webhooks", {
    key: user.key,
    body: { url: "https://example.com/h" },
  });
  assert.equal(hook.status, 200, hook.text);
  // Hits go on while the backup runs: the copy must be consistent, and the server must not notice.
  let hitting = true;
  let during = 0;
  const load = (async () => {
    while (hitting) {
      assert.equal((await hit(source.endpoint, { method: "POST" })).status, 200);
      during++;
    }
  })();
  const file = path.join(scratch, "fount.db.bak");
  const res = await fount(["admin", "backup", file, "--with-key", "--json"], {
    FOUNT_DATA_DIR: server.dataDir,
  });
  hitting = false;
  await load;
  assert.equal(res.code, 0, res.stderr);
  const out = JSON.parse(res.stdout);
  assert.equal(out.file, file);
  assert.ok(out.bytes > 0);
  assert.ok(existsSync(`${file}.key`), "--with-key copies the key");
  assert.ok(during > 0, "the server answered while the backup ran");

  const restored = path.join(scratch, "restored");
  const back = await fount(["admin", "restore", file, "--key", `${file}.key`], { FOUNT_DATA_DIR: restored });
  assert.equal(back.code, 0, back.stderr);
  assert.match(back.stdout, /Restored .* user\(s\)/);

  assert.deepEqual(
    readdirSync(restored).filter((f) => f.includes("restoring")),
    [],
    "the staging copy left no file behind",
  );
  // A search index file left in the data dir (here the live server's, of newer events) is not the
  // restored store's: the restored server makes its own, and a search finds exactly the restored events.
  copyFileSync(path.join(server.dataDir, "fount-search.db"), path.join(restored, "fount-search.db"));
  const second = await startServer({ dataDir: restored });
  try {
    const s = await second.api("GET", `/v1/sources/${source.id}`, { key: user.key });
    assert.equal(s.status, 200, "the user's key and source came back");
    const events = await second.api("GET", `/v1/sources/${source.id}/event_summaries?limit=100`, {
      key: user.key,
    });
    assert.equal(events.status, 200);
    assert.ok(
      events.body.data.length >= 5,
      `the events committed before the backup: ${events.body.data.length}`,
    );
    const found = await second.api(
      "GET",
      `/v1/sources/${source.id}/event_summaries?limit=100&q=${encodeURIComponent("POST")}`,
      { key: user.key },
    );
    assert.equal(found.status, 200, found.text);
    assert.deepEqual(
      found.body.data.map((e: { id: string }) => e.id),
      events.body.data.map((e: { id: string }) => e.id),
      "the search reads an index of the restored events",
    );
    // The webhook's signing secret is sealed with the key: the restored server opens it.
    const w = await second.api("GET", `/v1/webhooks/${hook.body.data.id}`, { key: user.key });
    assert.equal(w.status, 200, w.text);
    const hits = await hit(s.body.data.endpoint_url ?? source.endpoint, { method: "POST" });
    assert.equal(hits.status, 200, "the restored source runs");
  } finally {
    await second.close();
  }
});

test("restore refuses a data dir that holds a store, and files that are not Fount stores", async () => {
  const env = { FOUNT_DATA_DIR: server.dataDir };
  const file = path.join(scratch, "again.db");
  assert.equal((await fount(["admin", "backup", file], env)).code, 0);
  const exists = await fount(["admin", "backup", file], env);
  assert.equal(exists.code, 1);
  assert.match(exists.stderr, /exists: choose a new file/);

  const live = await fount(["admin", "restore", file], env);
  assert.equal(live.code, 1);
  assert.match(live.stderr, /already holds a store/);

  const empty = path.join(scratch, "empty");
  const junk = path.join(scratch, "junk.db");
  writeFileSync(junk, "not a database at all, just text ".repeat(200));
  const bad = await fount(["admin", "restore", junk], { FOUNT_DATA_DIR: empty });
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /not a (SQLite database|Fount store)/);
  assert.deepEqual(existsSync(empty) ? readdirSync(empty) : [], [], "nothing is left behind");

  const pg = await fount(["admin", "backup", file], { ...env, DATABASE_URL: "postgres://127.0.0.1/x" });
  assert.equal(pg.code, 2);
  assert.match(pg.stderr, /pg_dump/);
});

test("backup writes nothing through a link planted at <file> or <file>.key, nor over a file there", async () => {
  const env = { FOUNT_DATA_DIR: server.dataDir };
  const dir = mkdtempSync(path.join(scratch, "planted-"));
  // Another user's links: one pointing where the copy would land, one where the key would.
  const elsewhere = path.join(dir, "elsewhere.db");
  const target = path.join(dir, "fount.db.bak");
  symlinkSync(elsewhere, target);
  const linked = await fount(["admin", "backup", target], env);
  assert.equal(linked.code, 1, linked.stderr);
  assert.equal(linked.stderr, `fount: ${target} exists: choose a new file\n`);
  assert.equal(existsSync(elsewhere), false, "nothing was written through the link");
  rmSync(target);

  const stolen = path.join(dir, "stolen");
  writeFileSync(stolen, "");
  symlinkSync(stolen, `${target}.key`);
  const keyLinked = await fount(["admin", "backup", target, "--with-key"], env);
  assert.equal(keyLinked.code, 1, keyLinked.stderr);
  assert.equal(keyLinked.stderr, `fount: ${target}.key exists: choose a new file\n`);
  assert.equal(readFileSync(stolen, "utf8"), "", "the key did not go through the link");
  assert.equal(existsSync(target), false, "no backup without the key asked for");

  rmSync(`${target}.key`);

  // A file created (and held open) by another user before the backup would receive the key.
  writeFileSync(`${target}.key`, "theirs");
  const keyThere = await fount(["admin", "backup", target, "--with-key"], env);
  assert.equal(keyThere.code, 1, keyThere.stderr);
  assert.equal(readFileSync(`${target}.key`, "utf8"), "theirs");
  rmSync(`${target}.key`);

  const done = await fount(["admin", "backup", target, "--with-key"], env);
  assert.equal(done.code, 0, done.stderr);
  for (const file of [target, `${target}.key`])
    assert.equal(lstatSync(file).mode & 0o777, 0o600, `${file} is its owner's only`);
  assert.deepEqual(
    readdirSync(dir).sort(),
    ["fount.db.bak", "fount.db.bak.key", "stolen"],
    "the folder it was written in is gone",
  );
});
