/** `fount whoami` prints a free account's daily quotas, stored bytes among them; a paid account's period. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount, tempHome } from "./run.ts";

let server: TestServer;
before(async () => {
  server = await startServer({}, { FOUNT_FREE_DAILY_STORED_BYTES: String(3 * 1024 * 1024) });
});
after(() => server.close());

function envFor(key: string): Record<string, string> {
  const { home, configPath } = tempHome();
  return { HOME: home, FOUNT_CONFIG: configPath, FOUNT_URL: server.url, FOUNT_API_KEY: key };
}

test("whoami shows a free account's invocations, compute time and stored bytes of the day", async () => {
  const user = await server.createUser("whoami-free");
  const who = await fount(["whoami"], envFor(user.key));
  assert.equal(who.code, 0, who.stderr);
  assert.match(who.stdout, /^Invocations:\s+0 of 10000 today$/m);
  assert.match(who.stdout, /^Compute:\s+0 s of 1800 s today$/m);
  assert.match(who.stdout, /^Stored:\s+0\.0 MiB of 3\.0 MiB today$/m);
});

test("whoami shows no daily quotas for a paid account", async () => {
  const user = await server.createUser("whoami-paid", "paid");
  const who = await fount(["whoami"], envFor(user.key));
  assert.equal(who.code, 0, who.stderr);
  assert.doesNotMatch(who.stdout, /^Stored:/m);
  assert.match(who.stdout, /^Invocations:\s+0 this billing period$/m);
});
