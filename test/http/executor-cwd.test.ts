/**
 * An executor's working directory is its owner's scratch folder, a tmpfs where the server may mount
 * (runtime/executors/scratch.ts). When that tmpfs is unmounted while the executor runs (`umount -l`, as
 * docs/isolation.md tells operators to clean up after a SIGKILLed server), the old directory is
 * unreachable, and every worker thread started after that failed to start with `ENOENT: process.cwd
 * failed` (a deploy answered 422, a hit 500) until the executor was replaced: seen as a flake of
 * test/cluster/forwarding.test.ts. The executor now enters its folder again by path before it starts a
 * realm.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { mountsUnder } from "../../src/runtime/executors/scratch.ts";
import { deploy, events, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

/** Writes a file to its temporary folder and emits what it read back. */
const code = (name: string) => `
import fs from "node:fs";
import os from "node:os";
export default {
  name: "${name}",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run() {
    fs.writeFileSync(os.tmpdir() + "/${name}", "${name}");
    this.$emit({ read: fs.readFileSync(os.tmpdir() + "/${name}", "utf8") });
  },
};`;

let server: TestServer;
before(async () => {
  server = await startServer();
  // Executors under uids of their own (as root) must reach the data dir.
  chmodSync(server.dataDir, 0o755);
});
after(async () => {
  await server?.close();
});

test("realms still start after the owner's scratch tmpfs was unmounted under its executor", async (t) => {
  const user = await server.createUser("unmounted");
  const first = await deploy(server, { component_code: code("first") }, user.key);
  assert.equal((await hit(first.endpoint_url, { method: "POST" })).status, 200);
  const scratch = path.join(server.dataDir, "scratch", user.id);
  if (!mountsUnder(scratch).includes(scratch)) {
    t.skip("scratch folders are not mounted here (not root, or no mount allowed): nothing to unmount");
    return;
  }
  execFileSync("umount", ["-l", scratch]);
  // The executor keeps at most one realm started ahead (the spare): three new sources need realms
  // started after the unmount.
  for (const name of ["second", "third", "fourth"]) {
    const source = await deploy(server, { component_code: code(name) }, user.key);
    const answer = await hit(source.endpoint_url, { method: "POST" });
    assert.equal(answer.status, 200, `${name}: ${answer.text}`);
    const [stored] = await events(server, source.id, undefined, user.key);
    assert.deepEqual(stored.event, { read: name });
  }
});
