/**
 * `fount deliveries`: a webhook's deliveries listed by its ID or URL (and filtered), one sent again with
 * `--redeliver`, the failed ones with `--redeliver-failed --since`, one shown with its attempts
 * (`deliveries show`), and events replayed (`replay`, `events replay`), against a real server
 * delivering to a local receiver.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer, type TestServer } from "../helpers.ts";
import { fount, fountJson } from "./run.ts";

let server: TestServer;
let env: Record<string, string>;
let dir: string;
let receiver: http.Server;
let hookUrl: string;
/** How an ANSI colour code starts. */
const esc = "\u001b[";
/** The status the receiver answers with. */
let answer = 400;
/** The webhook-id header of every request received, in order. */
const received: string[] = [];

before(async () => {
  // The receiver listens on loopback, where deliveries may go only when allowed.
  server = await startServer({ webhookAllowPrivate: true });
  const user = await server.createUser("cli-deliveries");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-deliveries-"));
  receiver = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received.push(String(req.headers["webhook-id"]));
      res.statusCode = answer;
      res.end(answer === 200 ? "ok" : "refused");
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});

after(async () => {
  await new Promise((resolve) => receiver.close(resolve));
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `fount <args> --json` as this test's user. */
const json = (...args: string[]) => fountJson(env, ...args);

/** `fount deliveries <ref> --json` until `done` holds of the list (30 s at most). */
async function deliveriesWhen(ref: string, done: (list: any[]) => boolean): Promise<any[]> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const list = await json("deliveries", ref);
    if (done(list)) return list;
    if (Date.now() > deadline) assert.fail(`deliveries never settled: ${JSON.stringify(list)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

test("deliveries lists a webhook's deliveries by ID or URL, and --redeliver / --redeliver-failed send them again", async () => {
  const file = path.join(dir, "emitter.mjs");
  writeFileSync(
    file,
    `export default { name: "Emitter", version: "0.0.1", async run() { this.$emit({ at: Date.now() }); } };\n`,
  );
  const source = await json("deploy", file, "--name", "emitter");
  const hook = await json("webhook", "create", hookUrl, "--name", "receiver");
  await json("subscribe", "emitter", hook.id); // a source name works as its ID
  await json("run", source.id);
  await json("run", source.id);

  // A 400 fails a delivery at once (no retry).
  const failed = await deliveriesWhen(
    hook.id,
    (l) => l.length === 2 && l.every((d) => d.status === "failed"),
  );
  for (const d of failed) {
    assert.equal(d.attempts, 1);
    assert.equal(d.last_status_code, 400);
    assert.equal(d.next_attempt_at, null);
  }
  const [newer, older] = failed.map((d) => d.id as string);

  const shown = await fount(["deliveries", hookUrl], env);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /│ ID\s+│ STATUS\s+│ ATTEMPTS │ CODE │ DURATION │ NEXT ATTEMPT │ CREATED/);
  assert.match(shown.stdout, new RegExp(`│ ${newer} │ failed\\s+│ 1\\s+│ 400\\s+│ \\d+ ms`));
  assert.ok(shown.stdout.indexOf(newer!) < shown.stdout.indexOf(older!), "newest first");
  assert.ok(!shown.stdout.includes(esc), "no colour off a terminal");
  const coloured = await fount(["deliveries", hook.id], { ...env, FORCE_COLOR: "1" });
  assert.ok(coloured.stdout.includes(`${esc}31mfailed${esc}39m`), "FORCE_COLOR colours the status");
  const noColour = await fount(["deliveries", hook.id], { ...env, FORCE_COLOR: "0", NO_COLOR: "1" });
  assert.ok(!noColour.stdout.includes(esc), "FORCE_COLOR=0 turns colour off");

  answer = 200;
  const one = await fount(["deliveries", hookUrl, "--redeliver", older!], env);
  assert.equal(one.code, 0, one.stderr);
  assert.match(one.stdout, new RegExp(`^Redelivering ${older}: it is pending again, due now\\.$`, "m"));
  await deliveriesWhen(hook.id, (l) => l.find((d) => d.id === older)?.status === "succeeded");

  const all = await fount(["deliveries", hook.id, "--redeliver-failed", "--since", "1h"], env);
  assert.equal(all.code, 0, all.stderr);
  assert.match(all.stdout, /^Redelivering 1 failed delivery of wh_\w+ created since \d{4}-/m);
  const done = await deliveriesWhen(hook.id, (l) => l.every((d) => d.status === "succeeded"));
  assert.deepEqual(
    done.map((d) => [d.attempts, d.last_status_code]),
    [
      [2, 200],
      [2, 200],
    ],
  );
  // Redeliveries keep the delivery's ID, so the receiver can deduplicate on webhook-id.
  assert.deepEqual([...received].sort(), [newer, newer, older, older].sort());

  const pending = await fount(["deliveries", hook.id, "--status", "pending"], env);
  assert.match(pending.stdout, /^No deliveries to wh_\w+ \(pending\)\.$/m);
});

test("deliveries refuses bad options and an unknown webhook URL", async () => {
  const cases: Array<[string[], number, RegExp]> = [
    [["deliveries", "wh_x", "--redeliver", "del_x", "--since", "1h"], 2, /filter a list/],
    [["deliveries", "wh_x", "--redeliver-failed", "--code", "5xx"], 2, /takes --since only/],
    [["deliveries", "wh_x", "--code", "5x"], 2, /--code takes an HTTP status/],
    [["deliveries", "show", "wh_x"], 2, /Give a delivery ID/],
    [["replay", "src", "--to", "wh_x", "nope"], 2, /Give an event ID/],
    [["replay", "src", "1-0", "--to", "wh_x", "--since", "1h"], 2, /without an event ID/],
    [["replay", "src"], 2, /Missing --to/],
    [["deliveries", "wh_x", "--redeliver-failed", "--since", "soon"], 2, /--since takes 30m/],
    [["deliveries", "wh_x", "--redeliver", "x", "--redeliver-failed"], 2, /not both/],
    [["deliveries", "wh_x", "--redeliver", "nope"], 2, /--redeliver takes a del_… ID/],
    [["deliveries", "hook"], 1, /No webhook of yours has the ID, URL or name "hook", or one starting so$/m],
    [
      ["deliveries", "https://nowhere.example/hook"],
      1,
      /No webhook of yours has the URL .* \(not_found\)|No webhook/,
    ],
    [["deliveries", "wh_unknown0000"], 1, /\(not_found\)/],
  ];
  for (const [args, code, stderr] of cases) {
    const res = await fount(args, env);
    assert.equal(res.code, code, `${args.join(" ")}: ${res.stderr}`);
    assert.match(res.stderr, stderr);
  }
});

test("deliveries show prints the attempts; replay sends one event or a confirmed range again, marked", async () => {
  answer = 422;
  const file = path.join(dir, "replayed.mjs");
  writeFileSync(
    file,
    `export default { name: "Replayed", version: "0.0.1", async run() { this.$emit({ n: 1 }); } };\n`,
  );
  const source = await json("deploy", file, "--name", "replayed");
  const hook = await json("webhook", "create", hookUrl, "--name", "replays");
  await json("subscribe", "replayed", hook.id);
  await json("run", source.id);
  await json("run", source.id);
  const [d] = await deliveriesWhen(hook.id, (l) => l.length === 2 && l.every((x) => x.status === "failed"));

  const shown = await fount(["deliveries", "show", d.id], env);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, new RegExp(`^${d.id}  failed  to ${hook.id} \\(webhook\\)$`, "m"));
  assert.match(shown.stdout, /^#1 {2}\d{4}-.*Z {2}failed 422 {2}\d+ ms$/m);
  assert.match(shown.stdout, new RegExp(`^  → POST ${hookUrl.replaceAll(".", "\\.")}$`, "m"));
  assert.match(shown.stdout, /^ {4}webhook-signature: v1,\S+$/m);
  assert.match(shown.stdout, /^ {4}\{"n":1\}$/m);
  assert.match(shown.stdout, /^ {2}← 422$/m);
  assert.match(shown.stdout, /^ {4}refused$/m);
  assert.match(shown.stdout, /^ {2}error \(http\): HTTP 422$/m);
  const asJson = await json("deliveries", "show", d.id);
  assert.equal(asJson.attempts[0].response.status, 422);

  answer = 200;
  const one = await fount(["replay", "replayed", d.event_id, "--to", hook.id], env);
  assert.equal(one.code, 0, one.stderr);
  const replayed = /delivery (del_\w+) \(replay (rpl_\w+)\)/.exec(one.stdout);
  assert.ok(replayed, one.stdout);
  const again = await deliveriesWhen(
    hook.id,
    (l) => l.find((x) => x.id === replayed[1])?.status === "succeeded",
  );
  assert.equal(again.find((x) => x.id === replayed[1]).replay.replayed_from, d.id);
  const detail = await fount(["deliveries", "show", replayed[1]!], env);
  assert.match(detail.stdout, new RegExp(`^replay ${replayed[2]} of ${d.id}$`, "m"));

  const unconfirmed = await fount(["events", "replay", "replayed", "--to", hook.id, "--since", "1h"], env);
  assert.equal(unconfirmed.code, 2);
  assert.match(unconfirmed.stderr, /pass --yes/);
  const all = await fount(["events", "replay", "replayed", "--to", "replays", "--since", "1h", "--yes"], env);
  assert.equal(all.code, 0, all.stderr);
  assert.match(
    all.stdout,
    new RegExp(`^Replaying 2 of 2 events to ${hook.id} \\(replay rpl_\\w+\\)\\.$`, "m"),
  );
  await deliveriesWhen(hook.id, (l) => l.length === 5 && l.every((x) => x.status !== "pending"));
  const none = await fount(["replay", "replayed", "--to", hook.id, "--until", "2000-01-01"], env);
  assert.match(none.stdout, /^No kept events of replayed match: nothing to replay\.$/m);
  const failedOnes = await json("deliveries", hook.id, "--code", "4xx");
  assert.deepEqual(
    failedOnes.map((x: any) => x.last_status_code),
    [422, 422],
  );
});
