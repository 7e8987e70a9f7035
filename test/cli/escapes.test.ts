/**
 * Text from elsewhere reaches the terminal shown, never obeyed: an event's body and headers (anyone may
 * send them to a public endpoint), a component's logs and errors, a receiver's answer, and the names,
 * warnings and errors a server sends. Escape sequences (OSC 52 clipboard, OSC 8 links, OSC 0 title, CSI
 * cursor moves) and C1 controls print as `\x1b`-style text, while the CLI's own colours stay; `--json`
 * stays JSON, with C1 controls as `\u0080`-style escapes.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { deploySource } from "../delivery/receiver.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { HostileServer, json } from "./hostile.ts";
import { fount, hasScript, onTerminal } from "./run.ts";

/** The clipboard, a link, the window title, a cleared screen, and a CSI and an OSC in their C1 form. */
const evil =
  "\u001b]52;c;ZXZpbA==\u0007\u001b]8;;https://evil.example\u001b\\link\u001b]8;;\u001b\\\u001b]0;pwned\u0007\u001b[2J\u009b31m\u009d0;c1\u0007\u0085";
/** Where `evil` ends up, as its text: each control as a visible escape. */
const shown = "\\x1b]52;c;ZXZpbA==\\x07\\x1b]8;;https://evil.example\\x1b\\link";
const esc = "\u001b[";

/** That `text` holds no control character but tab and newline, apart from the CLI's own colours. */
function assertShownNotObeyed(text: string, what: string): void {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the colours of the CLI's painter
  const own = text.replace(/\u001b\[\d+m/g, "");
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is looked for
  const raw = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/.exec(own);
  assert.equal(raw, null, `${what} holds a raw control character at ${raw?.index}: ${JSON.stringify(own)}`);
}

/** That JSON output parses and holds no raw control character (C1 ones included). */
function assertSafeJson(text: string, what: string): any {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is looked for
  assert.doesNotMatch(text, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/, what);
  return JSON.parse(text);
}

/** Emits what it is sent, its `x-evil` header, and a summary; logs; throws when asked, with `evil` in its stack. */
const escapesCode = `export default {
  name: "Escapes",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    const evil = event.body.evil;
    if (event.body.throw) throw new Error("boom " + evil + "\\n" + evil);
    console.log("log " + evil);
    this.$emit({ body: event.body, header: event.headers["x-evil"] }, { summary: "sum " + evil });
  },
};`;

let server: TestServer;
let env: Record<string, string>;
let key: string;
let receiver: http.Server;
let receiverUrl: string;

before(async () => {
  // The receiver of the delivery test listens on loopback.
  server = await startServer({ webhookAllowPrivate: true });
  key = (await server.createUser("escapes")).key;
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: key, FORCE_COLOR: "1" };
  receiver = http.createServer((req, res) => {
    req.resume();
    // A C1 control in a header travels as its latin1 byte; ESC may not be in a header at all.
    req.on("end", () => res.writeHead(500, { "x-evil": "\u009b2J" }).end(`refused\n${evil}`));
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});
after(async () => {
  receiver.closeAllConnections();
  await new Promise((resolve) => receiver.close(resolve));
  await server.close();
});

/** POSTs `{evil}` to a source's endpoint with a C1 control in the `x-evil` header. */
function hit(endpoint: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(endpoint, {
      method: "POST",
      headers: { "content-type": "application/json", "x-evil": "\u009b31m" },
    });
    req.on("response", (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
    req.end(JSON.stringify({ evil }));
  });
}

/** Polls until `read` gives something (30 s at most). */
async function eventually<T>(read: () => Promise<T | undefined>, what: string): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const value = await read();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail(`never: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

test("events, logs and run show the escapes in events, headers, logs and errors as text, in their colours", async () => {
  const source = await deploySource(server, escapesCode, key);
  assert.equal(await hit(source.endpoint), 200);
  const path = `/v1/sources/${source.id}/event_summaries?expand=event`;
  await eventually(async () => (await server.api("GET", path, { key })).body.data[0], "the event");

  const events = await fount(["events", source.id], env);
  assert.equal(events.code, 0, events.stderr);
  assertShownNotObeyed(events.stdout, "fount events");
  assert.ok(events.stdout.includes(`sum ${shown}`), events.stdout);
  // The data as JSON, whose C0 escapes are JSON's own; the header's C1 control shown the CLI's way.
  assert.ok(events.stdout.includes('{"evil":"\\u001b]52;c;'), events.stdout);
  assert.match(events.stdout, /"header":"[^"]*\\x9b31m"/);
  assert.ok(events.stdout.includes(`${esc}2m`), "its own colours stay");

  const asJson = await fount(["events", source.id, "--json"], env);
  assert.equal(asJson.code, 0, asJson.stderr);
  const [entry] = assertSafeJson(asJson.stdout, "fount events --json");
  assert.match(entry.event.header, /\u009b31m$/, "the same data, escaped as JSON");
  assert.equal(entry.event.body.evil, evil);

  const run = await fount(
    ["run", source.id, "--event", JSON.stringify({ body: { throw: true, evil } })],
    env,
  );
  assert.equal(run.code, 1, run.stderr);
  assertShownNotObeyed(run.stdout, "fount run");
  assert.ok(run.stdout.includes(`boom ${shown}`), run.stdout);

  const logs = await fount(["logs", source.id, "--no-follow"], env);
  assert.equal(logs.code, 0, logs.stderr);
  assertShownNotObeyed(logs.stdout, "fount logs");
  assert.ok(logs.stdout.includes(`log ${shown}`), logs.stdout);
  assert.ok(logs.stdout.includes(`boom ${shown}`), logs.stdout);
  assert.ok(logs.stdout.includes(`${esc}31m[error]`), "its own colours stay");
});

test("deliveries show prints a receiver's answer, headers and body, with their escapes as text", async () => {
  const source = await deploySource(server, escapesCode, key);
  const hook = (await server.api("POST", "/v1/webhooks", { key, body: { url: receiverUrl } })).body.data;
  const sub = await server.api("POST", "/v1/subscriptions", {
    key,
    body: { emitter_id: source.id, listener_id: hook.id },
  });
  assert.equal(sub.status, 200, sub.text);
  assert.equal(await hit(source.endpoint), 200);
  const delivery = await eventually(async () => {
    const list = (await server.api("GET", `/v1/webhooks/${hook.id}/deliveries`, { key })).body.data;
    return list.find((d: { attempts: number }) => d.attempts > 0);
  }, "an attempted delivery");

  const res = await fount(["deliveries", "show", delivery.id], env);
  assert.equal(res.code, 0, res.stderr);
  assertShownNotObeyed(res.stdout, "fount deliveries show");
  assert.match(res.stdout, /^ {4}x-evil: \\x9b2J$/m);
  assert.ok(res.stdout.includes(`    refused\n    ${shown}`), res.stdout);
});

test("names, warnings and errors a server sends are printed with their escapes as text", async () => {
  const named = (n: number) => ({
    id: `wh_evil${n}`,
    name: `evil-${n} ${evil}`,
    url: `https://example.com/${evil}`,
    active: true,
    created_at: 1,
  });
  const hostile = await HostileServer.start((req, res, url) => {
    if (url.pathname === "/v1/users/me/webhooks")
      return json(res, {
        page_info: { total_count: 2, count: 2, start_cursor: null, end_cursor: null },
        data: [named(1), named(2)],
      });
    if (url.pathname === "/v1/webhooks" && req.method === "POST")
      return json(res, {
        data: { ...named(1), signing_secret: "whsec_x" },
        warnings: [{ code: "destination_refused", message: `refused ${evil}` }],
      });
    json(res, { error: `no such thing ${evil}`, code: "not_found" }, 404);
  });
  try {
    const henv = { ...hostile.env(), FORCE_COLOR: "1" };
    const list = await fount(["list", "webhooks"], henv);
    assert.equal(list.code, 0, list.stderr);
    assertShownNotObeyed(list.stdout, "fount list webhooks");
    assert.ok(list.stdout.includes(`evil-1 ${shown}`), list.stdout);
    const listed = assertSafeJson((await fount(["list", "webhooks", "--json"], henv)).stdout, "--json");
    assert.equal(listed[0].name, named(1).name);

    const created = await fount(["webhook", "create", "https://example.com/h"], henv);
    assert.equal(created.code, 0, created.stderr);
    assertShownNotObeyed(created.stdout, "fount webhook create");
    assertShownNotObeyed(created.stderr, "its warning");
    assert.ok(created.stderr.includes(`refused ${shown}`), created.stderr);
    assert.ok(created.stderr.includes(`${esc}33mWarning:`), "its own colours stay");

    const failed = await fount(["whoami"], henv);
    assert.equal(failed.code, 1);
    assertShownNotObeyed(failed.stderr, "an error");
    assert.ok(failed.stderr.includes(`no such thing ${shown}`), failed.stderr);
    assert.ok(failed.stderr.startsWith(`${esc}31mfount:`), "its own colours stay");

    const usage = await fount(["events", "x", "-n", evil], henv);
    assert.equal(usage.code, 2);
    assertShownNotObeyed(usage.stderr, "a usage error quoting an argument");
    assert.ok(usage.stderr.includes(`not "${shown}`), usage.stderr);

    const ambiguous = await fount(["webhook", "delete", "evil", "--yes"], henv);
    assert.equal(ambiguous.code, 1);
    assertShownNotObeyed(ambiguous.stderr, "the list of candidates");
    assert.match(ambiguous.stderr, /could be any of 2 webhooks/);
    assert.ok(ambiguous.stderr.includes(`  wh_evil2  https://example.com/${shown}`), ambiguous.stderr);
  } finally {
    await hostile.close();
  }
});

test("on a terminal, a confirmation and the picker show the names a server sends with their escapes as text", {
  skip: !hasScript,
}, async () => {
  const hostile = await HostileServer.start((_req, res, url) => {
    if (url.pathname === "/v1/webhooks/wh_evil")
      return json(res, { data: { id: "wh_evil", name: null, url: `https://example.com/${evil}` } });
    if (url.pathname === "/v1/components/registry")
      return json(res, {
        page_info: { total_count: 1, count: 1, start_cursor: null, end_cursor: null },
        data: [{ key: `evil-key ${evil}`, id: "sc_evil", name: `Evil ${evil}`, version: "1.0.0" }],
      });
    json(res, { error: "not here", code: "not_found" }, 404);
  });
  try {
    // The screen keeps everything but CSI sequences (the CLI's colours and cursor moves) and the carriage
    // returns of the terminal and the picker; `evil` has none.
    const screen = (text: string) => text.replace(/\r/g, "");
    const asked = await onTerminal(["webhook", "delete", "wh_evil"], hostile.env(), [[/\[y\/N\] /, "n\r"]]);
    assert.equal(asked.code, 1, asked.screen);
    assertShownNotObeyed(screen(asked.screen), "the question");
    assert.ok(asked.screen.includes(`Delete webhook wh_evil (https://example.com/${shown}`), asked.screen);

    // Ctrl-C leaves the picker once it shows the registry's component. In an empty folder: the picker
    // lists local component files first, and the system's temporary folder holds other tests' (those of
    // runs that were killed stay there), which pushed the registry's off its first screen.
    const empty = mkdtempSync(path.join(os.tmpdir(), "fount-esc-"));
    const picked = await onTerminal(["deploy"], hostile.env(), [[/evil-key/, "\u0003"]], empty).finally(() =>
      rmSync(empty, { recursive: true, force: true }),
    );
    assert.equal(picked.code, 130, picked.screen);
    assertShownNotObeyed(screen(picked.screen), "the picker");
    assert.ok(picked.screen.includes(`evil-key ${shown}`), picked.screen);
  } finally {
    await hostile.close();
  }
});
