/**
 * `fount deploy` and `fount update` set a source's retention (`--keep-events`, `--keep-days`,
 * `--keep-default`), run as a process against a real server; `describe` shows it, and the server's
 * maximum is its answer to a policy over it.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount } from "./run.ts";

let server: TestServer;
let env: Record<string, string>;
let dir: string;
let file: string;

before(async () => {
  server = await startServer();
  const user = await server.createUser("cli-retention");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-retention-"));
  file = path.join(dir, "kept.mjs");
  writeFileSync(
    file,
    `export default { name: "Kept", version: "1", async run() { this.$emit({ ok: 1 }); } };`,
  );
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

async function json(...args: string[]): Promise<any> {
  const res = await fount([...args, "--json"], env);
  assert.equal(res.code, 0, `fount ${args.join(" ")}: ${res.stderr}`);
  return JSON.parse(res.stdout);
}

test("deploy --keep-events --keep-days sets the retention; describe shows it; update changes and resets it", async () => {
  const s = await json("deploy", file, "--name", "kept", "--keep-events", "10000", "--keep-days", "30");
  assert.deepEqual(s.retention, { events: 10000, days: 30 });
  const text = await fount(["describe", s.id], env);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /^Retention:\s+10000 events per channel, 30 days$/m);

  const changed = await json("update", s.id, "--keep-events", "500");
  assert.deepEqual(changed.retention, { events: 500 });
  const reset = await json("update", s.id, "--keep-default");
  assert.equal(reset.retention, null);
  const shown = await fount(["describe", s.id], env);
  assert.match(shown.stdout, /^Retention:\s+the server's default$/m);
});

test("a malformed --keep-events is a usage error; over the server's maximum is the server's 400", async () => {
  const bad = await fount(["deploy", file, "--keep-events", "lots"], env);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--keep-events must be a whole number of at least 1, got "lots"/);
  const both = await fount(["update", "kept", "--keep-days", "3", "--keep-default"], env);
  assert.equal(both.code, 2);
  assert.match(both.stderr, /not both/);
  const over = await fount(["deploy", file, "--keep-events", "1000001"], env);
  assert.notEqual(over.code, 0);
  assert.match(over.stderr, /retention\.events may be at most 1000000/);
});
