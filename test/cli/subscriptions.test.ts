/** `fount subscribe` / `fount unsubscribe` take source names as well as IDs, as `fount events` does. */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount, fountJson } from "./run.ts";

let server: TestServer;
let env: Record<string, string>;
let dir: string;

before(async () => {
  server = await startServer();
  const user = await server.createUser("cli-subscriptions");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-subs-"));
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `fount <args> --json` as this test's user. */
const json = (...args: string[]) => fountJson(env, ...args);

async function deploy(name: string, code: string): Promise<{ id: string }> {
  const file = path.join(dir, `${name}.mjs`);
  writeFileSync(file, code);
  return json("deploy", file, "--name", name);
}

test("subscribe and unsubscribe by source names route one source's events to another", async () => {
  const emitter = await deploy(
    "talker",
    `export default { name: "Talker", version: "0.0.1", async run() { this.$emit({ said: "hi" }); } };\n`,
  );
  const listener = await deploy(
    "hearer",
    `export default { name: "Hearer", version: "0.0.1", async run(event) { this.$emit({ heard: event.said }); } };\n`,
  );

  const sub = await fount(["subscribe", "talker", "hearer"], env);
  assert.equal(sub.code, 0, sub.stderr);
  assert.match(
    sub.stdout,
    new RegExp(`^Subscribed ${listener.id} to the default channel of ${emitter.id} \\(sub_\\w+\\)\\.$`, "m"),
  );

  await json("run", "talker");
  const deadline = Date.now() + 30_000;
  for (;;) {
    const events = await json("events", "hearer");
    if (events.some((e: any) => e.event.heard === "hi")) break;
    if (Date.now() > deadline) assert.fail(`the listener never heard: ${JSON.stringify(events)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  const removed = await json("unsubscribe", "talker", "hearer");
  assert.deepEqual(
    removed.map((s: any) => [s.emitter_id, s.listener_id]),
    [[emitter.id, listener.id]],
  );
  assert.deepEqual(await json("list", "subscriptions"), []);

  const unknown = await fount(["subscribe", "nobody", "hearer"], env);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /\(not_found\)/);
});
