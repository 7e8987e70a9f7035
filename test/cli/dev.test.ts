/**
 * `fount dev`, run as a process against a real server: it deploys a file, shows events, logs and
 * errors in one view, updates the same source (same ID, endpoint and db) when the file or a file it
 * imports is saved, survives a file that does not build, and on Ctrl-C keeps or deletes the source.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount, RunningFount } from "./run.ts";

/** Imported by the source: editing it must update the source too. */
const libFile = (label: string) => `export const label = "${label}";\n`;

/** An HTTP source counting its hits in this.db; `fail` in the body throws at line 14. */
const sourceFile = (suffix = "") => `import { label } from "../lib.mjs";

export default {
  key: "cli-test-dev-counter",
  name: "Dev Counter",
  version: "0.0.1",
  props: { db: "$.service.db", http: "$.interface.http" },
  async run(event) {
    const count = (this.db.get("count") ?? 0) + 1;
    this.db.set("count", count);
    console.log("hit " + count);
    if (event.body?.fail) {
      // Line 14 throws.
      throw new Error("failing on purpose");
    }
    this.$emit({ label: label + "${suffix}", count }, { summary: "hit " + count });
  },
};
`;

let server: TestServer;
let env: Record<string, string>;
let dir: string;
let file: string;

before(async () => {
  server = await startServer();
  const user = await server.createUser("cli-dev");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-dev-"));
  mkdirSync(path.join(dir, "sources", "counter"), { recursive: true });
  writeFileSync(path.join(dir, "sources", "lib.mjs"), libFile("v1"));
  file = path.join(dir, "sources", "counter", "counter.mjs");
  writeFileSync(file, sourceFile());
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

async function hit(endpoint: string, body: unknown = {}): Promise<void> {
  const res = await fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
}

let sourceId = "";
let endpoint = "";

test("dev deploys, streams events, logs and errors, and updates the same source on every save", async () => {
  const dev = new RunningFount(env, ["dev", file, "--name", "dev-counter"]);
  try {
    sourceId = (await dev.waitFor(/(?<=^Deployed dev-counter \()dc_\w+/m)).trim();
    endpoint = await dev.waitFor(/(?<=^Endpoint:\s+)\S+/m);
    await dev.waitFor(/Watching 2 files for changes\./, "stderr");
    await dev.waitFor(/as they come.* \(Ctrl-C to stop\)…/, "stderr");

    await hit(endpoint);
    await dev.waitFor(/hit 1\n {2}\{"label":"v1","count":1\}/);
    await dev.waitFor(/\[log\] hit 1/);

    // A save of the imported file updates the source; its db (the count) is still there.
    let mark = dev.stderr.length;
    writeFileSync(path.join(dir, "sources", "lib.mjs"), libFile("v2"));
    await dev.waitFor(new RegExp(`Updated dev-counter \\(${sourceId}\\)\\.`), "stderr", mark);
    await hit(endpoint);
    await dev.waitFor(/\{"label":"v2","count":2\}/);

    // A file that does not build is reported with its place; dev goes on watching.
    mark = dev.stderr.length;
    writeFileSync(file, `${sourceFile()}\nexport const broken = ;\n`);
    await dev.waitFor(/counter\.mjs:\d+:\d+: Unexpected ";" \(component_invalid\)/, "stderr", mark);
    await dev.waitFor(/Still watching/, "stderr", mark);

    mark = dev.stderr.length;
    writeFileSync(file, sourceFile("+fixed"));
    await dev.waitFor(/Updated dev-counter/, "stderr", mark);
    await hit(endpoint);
    await dev.waitFor(/\{"label":"v2\+fixed","count":3\}/);

    // Errors show in the same view, their stack at the author's file and line.
    await hit(endpoint, { fail: true });
    await dev.waitFor(
      /\[error\] component_error: failing on purpose\n\s+at Object\.run \(counter\/counter\.mjs:14:\d+\)/,
    );

    assert.equal(await dev.stop("SIGINT"), 0, dev.stderr);
  } finally {
    dev.proc.kill();
  }
  assert.match(dev.stderr, new RegExp(`Kept dev-counter \\(${sourceId}\\): \`fount dev --dc ${sourceId} `));
  const listed = await fount(["describe", sourceId, "--json"], env);
  assert.equal(listed.code, 0, "Ctrl-C leaves the source deployed, as pd dev does");
  const sources = await fount(["list", "sources", "--json"], env);
  assert.equal(JSON.parse(sources.stdout).length, 1, "every save updated the one source");
});

test("dev --dc attaches to the deployed source, keeping its db; --delete deletes it on Ctrl-C", async () => {
  assert.ok(sourceId, "the previous test deployed the source");
  writeFileSync(file, sourceFile("+again"));
  const dev = new RunningFount(env, ["dev", "--dc", "dev-counter", file, "--delete"]);
  try {
    await dev.waitFor(new RegExp(`^Attached to dev-counter \\(${sourceId}\\)\\.`, "m"));
    await dev.waitFor(/as they come.* \(Ctrl-C to stop\)…/, "stderr");
    await hit(endpoint);
    // 4 or 5, as the failed run's db write counts or not: the db of the earlier session is there.
    await dev.waitFor(/\{"label":"v2\+again","count":[45]\}/);
    assert.doesNotMatch(dev.stdout, /"count":3/, "an attached view starts from now, not from old events");
    assert.equal(await dev.stop("SIGINT"), 0, dev.stderr);
  } finally {
    dev.proc.kill();
  }
  assert.match(dev.stderr, new RegExp(`Deleted source ${sourceId}\\.`));
  const gone = await fount(["describe", sourceId], env);
  assert.equal(gone.code, 1);
  assert.match(gone.stderr, /\(not_found\)/);
});

test("dev refuses a missing file and a bad --prop", async () => {
  const missing = await fount(["dev", path.join(dir, "nope.mjs")], env);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /No file .*nope\.mjs \(file_not_found\)|No file/);
  const badProp = await fount(["dev", file, "--prop", "novalue"], env);
  assert.equal(badProp.code, 2);
  assert.match(badProp.stderr, /--prop takes name=value/);
});
