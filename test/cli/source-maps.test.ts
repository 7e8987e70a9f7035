/**
 * Stack traces name the author's files and lines: `fount deploy <file>` sends its bundle with a source
 * map, the server chains it into its own, and errors on `$errors` (so `fount logs`) point at them.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount } from "./run.ts";

/** Line 3 throws, when asked to. */
const helperFile = `export function check(event) {
  if (event.helper) {
    throw new Error("thrown by the helper");
  }
  return true;
}
`;

/** Line 10 throws; the padding keeps the line apart from the bundle's own numbering. */
const sourceFile = `import { check } from "../helpers.mjs";

export default {
  key: "cli-test-thrower",
  name: "Thrower",
  version: "0.0.1",
  async run(event) {
    check(event);
    if (event.own) {
      throw new Error("thrown by run");
    }
    this.$emit({ ok: true });
  },
};
`;

let server: TestServer;
let env: Record<string, string>;
let dir: string;

before(async () => {
  server = await startServer();
  const user = await server.createUser("cli-source-maps");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-maps-"));
  mkdirSync(path.join(dir, "sources", "thrower"), { recursive: true });
  writeFileSync(path.join(dir, "sources", "helpers.mjs"), helperFile);
  writeFileSync(path.join(dir, "sources", "thrower", "thrower.mjs"), sourceFile);
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

test("an error thrown in a deployed file or a file it imports names that file and line in fount logs and on $errors", async () => {
  const deployed = await fount(
    ["deploy", path.join(dir, "sources", "thrower", "thrower.mjs"), "--name", "thrower", "--json"],
    env,
  );
  assert.equal(deployed.code, 0, deployed.stderr);
  const id = JSON.parse(deployed.stdout).id as string;

  const own = await fount(["run", id, "--event", '{"own": true}'], env);
  assert.equal(own.code, 1, own.stderr);
  const helper = await fount(["run", id, "--event", '{"helper": true}'], env);
  assert.equal(helper.code, 1, helper.stderr);

  const logs = await fount(["logs", id, "--no-follow"], env);
  assert.equal(logs.code, 0, logs.stderr);
  assert.match(logs.stdout, /thrown by run\n\s+at Object\.run \(thrower\/thrower\.mjs:10:\d+\)/);
  assert.match(logs.stdout, /thrown by the helper\n\s+at check \(helpers\.mjs:3:\d+\)/);
  assert.match(logs.stdout, /at Object\.run \(thrower\/thrower\.mjs:8:\d+\)/, "the caller's frame too");
  assert.doesNotMatch(logs.stdout, new RegExp(`${os.tmpdir()}|/packages/`), "no local or server path");

  // The API (and so the console) gets the mapped stack: the server maps it before storing $errors.
  const res = await server.api("GET", `/v1/sources/${id}/event_summaries?event_name=$errors&expand=event`, {
    key: env.FOUNT_API_KEY,
  });
  const stacks = (res.body as any).data.map((e: any) => e.event.error.stack as string);
  assert.ok(
    stacks.some((s: string) => s.includes("thrower/thrower.mjs:10:")),
    stacks.join("\n---\n"),
  );
});
