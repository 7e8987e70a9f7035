/**
 * `fount listen` as a process against a running server: a delivery arrives, is verified and passed on,
 * and the webhook goes when the command stops; a key that may not reach local addresses is told why.
 * Also `fount webhook create`'s warning for a URL the delivery guard will refuse.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Webhook } from "standardwebhooks";
import { deploySource, emit, hookSourceCode, Receiver } from "../delivery/receiver.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { fount, RunningFount, tempHome } from "./run.ts";

let server: TestServer;
let user: { id: string; key: string };

before(async () => {
  // The delivery guard as a plain `npm start` has it: loopback refused.
  server = await startServer();
  user = await server.createUser("listener");
});
after(() => server.close());

const envFor = (key: string) => {
  const { home, configPath } = tempHome();
  return { HOME: home, FOUNT_CONFIG: configPath, FOUNT_URL: server.url, FOUNT_API_KEY: key };
};

const webhookIds = async (key: string) =>
  (await server.api("GET", "/v1/users/me/webhooks", { key })).body.data.map((w: { id: string }) => w.id);

test("fount listen prints a verified delivery, forwards it, and deletes its webhook when stopped", async () => {
  const app = await Receiver.start();
  const source = await deploySource(server, hookSourceCode);
  const listen = new RunningFount(envFor(adminKey), [
    "listen",
    source.id.slice(0, 8),
    "--forward-to",
    app.url,
    "--json",
  ]);
  try {
    await listen.waitFor(/Ready: /, "stderr");
    const [, webhookId, secret] =
      /Webhook (wh_\w+) → \S+; signing secret (whsec_\S+)/.exec(listen.stderr) ?? [];
    assert.ok(webhookId && secret, listen.stderr);
    const hook = (await server.api("GET", `/v1/webhooks/${webhookId}`)).body.data;
    assert.equal(hook.allow_private, true, "an admin's listen may reach its loopback receiver");
    assert.match(hook.url, /^http:\/\/127\.0\.0\.1:\d+\/$/);

    await emit(source.endpoint, { hello: "listen" });
    const line = await listen.waitFor(/^\{.*\}$/m);
    const received = JSON.parse(line);
    assert.equal(received.verified, true);
    assert.deepEqual(received.event, { hello: "listen" });
    assert.equal(received.emitter_id, source.id);
    assert.match(received.id, /^del_/);
    assert.deepEqual(received.forwarded, { url: app.url, status: 200 });
    // The forwarded request carries the body and signature as sent, which the app can verify.
    assert.equal(app.requests.length, 1);
    const forwarded = app.requests[0]!;
    const headers = Object.fromEntries(
      Object.entries(forwarded.headers).filter(([, v]) => typeof v === "string"),
    ) as Record<string, string>;
    assert.deepEqual(new Webhook(secret!).verify(forwarded.body, headers), { hello: "listen" });

    assert.equal(await listen.stop(), 0, listen.stderr);
    assert.match(listen.stderr, new RegExp(`Deleted webhook ${webhookId}`));
    assert.ok(!(await webhookIds(adminKey)).includes(webhookId), "the webhook is gone");
  } finally {
    if (listen.proc.exitCode === null) await listen.stop();
    await app.close();
  }
});

test("a fount listen killed outright leaves its webhook, which the next one on the machine removes", async () => {
  const env = envFor(adminKey);
  const first = new RunningFount(env, ["listen"]);
  await first.waitFor(/Ready: /, "stderr");
  const [, abandoned] = /Webhook (wh_\w+) →/.exec(first.stderr) ?? [];
  assert.ok(abandoned, first.stderr);
  assert.equal(await first.stop("SIGKILL"), null);
  assert.ok((await webhookIds(adminKey)).includes(abandoned), "SIGKILL left no chance to delete it");
  // A receiver that still runs keeps its webhook.
  const running = new RunningFount(env, ["listen"]);
  const second = new RunningFount(env, ["listen"]);
  try {
    await running.waitFor(/Ready: /, "stderr");
    const [, kept] = /Webhook (wh_\w+) →/.exec(running.stderr) ?? [];
    await second.waitFor(/Ready: /, "stderr");
    const all = [running.stderr, second.stderr].join("\n");
    assert.match(
      all,
      new RegExp(`Deleted webhook ${abandoned} of an earlier \`fount listen\` that was stopped outright`),
    );
    const ids = await webhookIds(adminKey);
    assert.ok(!ids.includes(abandoned), "the abandoned webhook is gone");
    assert.ok(ids.includes(kept!), "the running receiver's webhook stays");
  } finally {
    await running.stop();
    await second.stop();
  }
});

test("a request without a valid signature prints one line: its claims escaped, its body not shown", async () => {
  const listen = new RunningFount(envFor(adminKey), ["listen"]);
  try {
    await listen.waitFor(/Ready: /, "stderr");
    const [, url] = /Webhook wh_\w+ → (\S+);/.exec(listen.stderr) ?? [];
    assert.ok(url, listen.stderr);
    // Anyone who reaches the receiver may send this; a header may carry C1 controls (as latin1 bytes).
    const body = JSON.stringify({ forged: "\u001b]52;c;ZXZpbA==\u0007 \u009b2J" });
    const forged = await fetch(url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "webhook-id": "msg_\u009d0;forged",
        "webhook-timestamp": "99999999999999",
        "webhook-signature": "v1,forged",
        "x-fount-emitter-id": "dc_\u009b2J",
      },
      body,
    });
    assert.equal(forged.status, 401);
    const line = await listen.waitFor(/^.*NOT verified.*$/m);
    assert.equal(
      line.replace(/^\S+ {2}/, ""),
      `✘ signature NOT verified:  a request claiming ID msg_\\x9d0;forged from dc_\\x9b2J  (${Buffer.byteLength(body)} bytes, not shown; answered 401)`,
    );
    assert.doesNotMatch(listen.stdout, /forged"|ZXZpbA/, "the body is not shown");
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is looked for
    assert.doesNotMatch(listen.stdout, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
  } finally {
    await listen.stop();
  }
});

test("without an admin key, fount listen says the server will not deliver to it and leaves nothing", async () => {
  const res = await fount(["listen"], envFor(user.key));
  assert.equal(res.code, 1, res.stderr);
  assert.match(res.stderr, /Warning: Deliveries to 127\.0\.0\.1 will be refused/);
  assert.match(
    res.stderr,
    /fount: The server will not deliver to http:\/\/127\.0\.0\.1:\d+\/.*FOUNT_WEBHOOK_ALLOW_HOSTS/,
  );
  assert.deepEqual(await webhookIds(user.key), []);
});

test("fount webhook create warns when deliveries to the URL will be refused, and still creates it", async () => {
  const res = await fount(["webhook", "create", "http://localhost:3000/hook"], envFor(user.key));
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stderr, /^Warning: Deliveries to localhost will be refused: .* \(destination_refused\)$/m);
  assert.match(res.stdout, /^Webhook:\s+wh_/m);
  const fine = await fount(["webhook", "create", "https://hooks.example.com/in"], envFor(user.key));
  assert.equal(fine.code, 0, fine.stderr);
  assert.equal(fine.stderr, "");
});
