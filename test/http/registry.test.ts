import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { type BuiltApp, buildApp } from "../../src/app.ts";
import { loadConfig } from "../../src/config.ts";
import { publishRegistryFolder, registryDir } from "../../src/domain/components/registry.ts";
import type { EventRecord } from "../../src/domain/types.ts";
import { adminKey, startServer, type TestServer } from "../helpers.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const semver = /^\d+\.\d+\.\d+(?:[-+].*)?$/;
const shippedKeys = ["feeds-new-item", "http-new-requests", "schedule-cron", "schedule-interval"];

let server: TestServer;
before(async () => {
  server = await startServer({}, {}, { publishRegistry: true });
});
after(() => server.close());

/** Resolves with the next default-channel event stored for `sourceId`. */
function nextEmit(built: BuiltApp, sourceId: string): Promise<EventRecord> {
  return new Promise((resolve) => {
    const off = built.services.bus.on("event.stored", (e) => {
      if (e.emitterId !== sourceId || e.channel !== "") return;
      off();
      resolve(e);
    });
  });
}

/** Runs `fount <args>` as a process, with a clean environment. */
function fount(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = { PATH: process.env.PATH, HOME: mkdtempSync(path.join(os.tmpdir(), "fount-registry-home-")) };
  return new Promise((resolve) => {
    execFile(
      path.join(root, "node_modules", ".bin", "node"),
      [path.join(root, "bin", "fount.ts"), ...args],
      { cwd: root, env, timeout: 30_000 },
      (err, stdout, stderr) => {
        rmSync(env.HOME, { recursive: true, force: true });
        resolve({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, stdout, stderr });
      },
    );
  });
}

const echoComponent = (version: string, key = "fount-test-echo") => `export default {
  key: "${key}",
  name: "Echo",
  version: "${version}",
  props: { http: "$.interface.http" },
  async run(event) { this.$emit({ echoed: event.body, version: "${version}" }, { summary: "echo" }); },
};
`;

describe("the shipped registry", () => {
  test("every shipped component is published at start with a key, a semantic version and a description", async () => {
    for (const key of shippedKeys) {
      const res = await server.api("GET", `/v1/components/registry/${key}`);
      assert.equal(res.status, 200, `${key}: ${res.text}`);
      assert.equal(res.body.data.key, key);
      assert.match(res.body.data.id, /^sc_/);
      assert.match(res.body.data.version, semver);
      assert.ok(res.body.data.description.length > 10);
    }
  });

  test("GET /v1/components/registry/http-new-requests returns its configurable props", async () => {
    const res = await server.api("GET", "/v1/components/registry/http-new-requests");
    const props = res.body.data.configurable_props as Array<{
      name: string;
      type: string;
      default?: unknown;
    }>;
    assert.deepEqual(
      props.map((p) => [p.name, p.type]),
      [
        ["httpInterface", "$.interface.http"],
        ["emitBodyOnly", "boolean"],
        ["resStatusCode", "string"],
        ["resContentType", "string"],
        ["resBody", "string"],
      ],
    );
    // Pipedream's names, types and defaults, so its docs carry over.
    assert.deepEqual(
      props.slice(1).map((p) => [p.name, p.default]),
      [
        ["emitBodyOnly", false],
        ["resStatusCode", "200"],
        ["resContentType", "application/json"],
        ["resBody", '{ "success": true }'],
      ],
    );
    const interval = await server.api("GET", "/v1/components/registry/schedule-interval");
    assert.deepEqual(interval.body.data.configurable_props[0].default, { intervalSeconds: 900 });
    const cron = await server.api("GET", "/v1/components/registry/schedule-cron");
    assert.deepEqual(cron.body.data.configurable_props[0].default, { cron: "0 * * * *" });
  });

  test("an unknown registry key is a 404", async () => {
    const res = await server.api("GET", "/v1/components/registry/no-such-component");
    assert.equal(res.status, 404);
  });

  test("publishing the folder again stores nothing new", async () => {
    const before = await server.api("GET", "/v1/components/registry/feeds-new-item");
    const report = await publishRegistryFolder(server.built.services);
    assert.deepEqual(report.published, []);
    assert.deepEqual(report.failed, []);
    assert.equal(report.unchanged.length, 4);
    const again = await server.api("GET", "/v1/components/registry/feeds-new-item");
    assert.equal(again.body.data.id, before.body.data.id);
  });

  test("a file that does not load is reported and the others are still published", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "fount-registry-dir-"));
    try {
      writeFileSync(path.join(dir, "broken.mjs"), "export default {");
      writeFileSync(path.join(dir, "good.mjs"), echoComponent("1.0.0", "fount-test-folder"));
      const report = await publishRegistryFolder(server.built.services, dir);
      assert.deepEqual(report.published, ["good.mjs"]);
      assert.deepEqual(
        report.failed.map((f) => f.file),
        ["broken.mjs"],
      );
      assert.equal((await server.api("GET", "/v1/components/registry/fount-test-folder")).status, 200);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("http-new-requests", () => {
  test("deployed by key, it emits each request with a `METHOD /path` summary and answers 200", async () => {
    const user = await server.createUser("http-registry-user");
    const created = await server.api("POST", "/v1/sources", {
      key: user.key,
      body: { key: "http-new-requests" },
    });
    assert.equal(created.status, 200, created.text);
    const source = created.body.data;
    assert.equal(source.component_key, "http-new-requests");
    assert.match(source.endpoint_url, /\/e\/[a-z0-9]+$/);

    const stored = nextEmit(server.built, source.id);
    const res = await fetch(`${source.endpoint_url}/hooks/order?ref=42`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-test": "yes" },
      body: JSON.stringify({ order: 7 }),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { success: true });
    await stored;

    const events = await server.api("GET", `/v1/sources/${source.id}/event_summaries`, { key: user.key });
    assert.equal(events.status, 200);
    assert.equal(events.body.data.length, 1);
    const [entry] = events.body.data;
    assert.equal(entry.metadata.summary, "POST /hooks/order");
    assert.equal(entry.event.method, "POST");
    assert.equal(entry.event.path, "/hooks/order");
    assert.deepEqual(entry.event.query, { ref: "42" });
    assert.equal(entry.event.headers["x-test"], "yes");
    assert.deepEqual(entry.event.body, { order: 7 });
    // The whole HTTP event, as Pipedream's component emits it.
    assert.deepEqual(Object.keys(entry.event).sort(), [
      "body",
      "bodyRaw",
      "headers",
      "method",
      "path",
      "query",
      "url",
    ]);
  });

  test("emitBodyOnly emits the body alone, and the response status and body are configurable", async () => {
    const created = await server.api("POST", "/v1/sources", {
      body: {
        key: "http-new-requests",
        configured_props: {
          emitBodyOnly: true,
          resStatusCode: "202",
          resContentType: "text/plain; charset=utf-8",
          resBody: "queued",
        },
      },
    });
    assert.equal(created.status, 200, created.text);
    const source = created.body.data;
    const stored = nextEmit(server.built, source.id);
    const res = await fetch(source.endpoint_url, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ hello: "world" }),
    });
    assert.equal(res.status, 202);
    assert.equal(res.headers.get("content-type"), "text/plain; charset=utf-8");
    assert.equal(await res.text(), "queued");
    const event = await stored;
    assert.deepEqual(event.event, { hello: "world" });
    assert.equal(event.meta.summary, "PUT /");
  });
});

describe("browsing and shadowing", () => {
  test("a user's component with a registry key wins for that user only, never for others", async () => {
    const registry = (await server.api("GET", "/v1/components/registry/http-new-requests")).body.data;
    const alice = await server.createUser("shadow-alice");
    const bob = await server.createUser("shadow-bob");
    const own = await server.api("POST", "/v1/components", {
      key: alice.key,
      body: { component_code: echoComponent("9.9.9", "http-new-requests") },
    });
    assert.equal(own.status, 200, own.text);
    const deployBy = async (key: string) => {
      const res = await server.api("POST", "/v1/sources", { key, body: { key: "http-new-requests" } });
      assert.equal(res.status, 200, res.text);
      return res.body.data.component_id as string;
    };
    assert.equal(await deployBy(alice.key), own.body.data.id, "Alice's own version, as she asked");
    assert.equal(await deployBy(bob.key), registry.id, "Bob still gets the registry's");
    assert.equal(await deployBy(adminKey), registry.id);
    const shown = await server.api("GET", "/v1/components/registry/http-new-requests", { key: bob.key });
    assert.equal(shown.body.data.id, registry.id);
    const browse = await server.api("GET", "/v1/components/registry?q=requests", { key: bob.key });
    assert.deepEqual(
      browse.body.data.map((c: { id: string }) => c.id),
      [registry.id],
    );
    const search = await server.api("GET", "/v1/components/search?query=requests", { key: bob.key });
    assert.deepEqual(
      search.body.data.map((c: { id: string }) => c.id),
      [registry.id],
    );
  });

  test("fount list components browses the registry, with words to search", async () => {
    const env = ["--url", server.url, "--api-key", adminKey];
    const all = await fount(["list", "components", ...env, "--json"]);
    assert.equal(all.code, 0, all.stderr);
    const keys = (JSON.parse(all.stdout) as Array<{ key: string }>).map((c) => c.key);
    for (const key of shippedKeys) assert.ok(keys.includes(key), `${key} in ${keys}`);
    const cron = await fount(["list", "components", "cron", ...env]);
    assert.equal(cron.code, 0, cron.stderr);
    assert.match(cron.stdout, /schedule-cron/);
    assert.doesNotMatch(cron.stdout, /http-new-requests/);
  });
});

describe("admin publishing", () => {
  test("POST /v1/admin/registry by a non-admin is a 403", async () => {
    const user = await server.createUser("registry-non-admin");
    const res = await server.api("POST", "/v1/admin/registry", {
      key: user.key,
      body: { component_code: echoComponent("1.0.0") },
    });
    assert.equal(res.status, 403);
    assert.equal(res.body.code, "forbidden");
  });

  test("code without a key, or without a semantic version, is a 422 and stores nothing", async () => {
    const noKey = await server.api("POST", "/v1/admin/registry", {
      body: { component_code: echoComponent("1.0.0").replace(/ {2}key: .*\n/, "") },
    });
    assert.equal(noKey.status, 422);
    assert.equal(noKey.body.code, "component_invalid");
    assert.equal(noKey.body.details.field, "key");

    const badVersion = await server.api("POST", "/v1/admin/registry", {
      body: { component_code: echoComponent("v1", "fount-test-bad-version") },
    });
    assert.equal(badVersion.status, 422);
    assert.equal(badVersion.body.details.field, "version");
    assert.equal((await server.api("GET", "/v1/components/registry/fount-test-bad-version")).status, 404);
  });

  test("the same code published by several requests at once is stored once", async () => {
    const code = echoComponent("1.0.0", "fount-test-at-once");
    const answers = await Promise.all(
      Array.from({ length: 4 }, () =>
        server.api("POST", "/v1/admin/registry", { body: { component_code: code } }),
      ),
    );
    for (const a of answers) assert.equal(a.status, 200, a.text);
    assert.equal(answers.filter((a) => a.body.data.created).length, 1);
    assert.equal(new Set(answers.map((a) => a.body.data.id)).size, 1);
  });

  test("a published component deploys by key for any user; publishing it twice does not duplicate it", async () => {
    const first = await server.api("POST", "/v1/admin/registry", {
      body: { component_code: echoComponent("1.0.0") },
    });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.data.created, true);
    assert.equal(first.body.data.key, "fount-test-echo");
    const second = await server.api("POST", "/v1/admin/registry", {
      body: { component_code: echoComponent("1.0.0") },
    });
    assert.equal(second.status, 200);
    assert.equal(second.body.data.created, false);
    assert.equal(second.body.data.id, first.body.data.id);

    const user = await server.createUser("registry-deployer");
    const deployed = await server.api("POST", "/v1/sources", {
      key: user.key,
      body: { key: "fount-test-echo" },
    });
    assert.equal(deployed.status, 200, deployed.text);
    assert.equal(deployed.body.data.component_id, first.body.data.id);
  });

  test("a changed component is a new version that key lookups and deploys then find", async () => {
    const v1 = await server.api("POST", "/v1/admin/registry", {
      body: { component_code: echoComponent("1.0.0", "fount-test-versions") },
    });
    const v2 = await server.api("POST", "/v1/admin/registry", {
      body: { component_code: echoComponent("1.1.0", "fount-test-versions") },
    });
    assert.equal(v2.body.data.created, true);
    assert.notEqual(v2.body.data.id, v1.body.data.id);
    const found = await server.api("GET", "/v1/components/registry/fount-test-versions");
    assert.equal(found.body.data.version, "1.1.0");
    const deployed = await server.api("POST", "/v1/sources", { body: { key: "fount-test-versions" } });
    assert.equal(deployed.body.data.component_id, v2.body.data.id);
  });

  test("`fount registry publish <file>` bundles a local file and publishes it", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "fount-registry-cli-"));
    try {
      writeFileSync(path.join(dir, "greeting.mjs"), 'export const greeting = "hello";\n');
      const file = path.join(dir, "greeter.mjs");
      writeFileSync(
        file,
        `import { greeting } from "./greeting.mjs";
export default {
  key: "fount-test-greeter",
  name: "Greeter",
  version: "2.0.0",
  props: { http: "$.interface.http" },
  async run() { this.$emit({ greeting }); },
};
`,
      );
      const args = ["registry", "publish", file, "--url", server.url, "--api-key", adminKey];
      const published = await fount([...args, "--json"]);
      assert.equal(published.code, 0, published.stderr);
      const data = JSON.parse(published.stdout);
      assert.equal(data.key, "fount-test-greeter");
      assert.equal(data.created, true);

      const again = await fount(args);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stdout, /already in the registry/);

      const found = await server.api("GET", "/v1/components/registry/fount-test-greeter");
      assert.equal(found.body.data.version, "2.0.0");
      const source = await server.api("POST", "/v1/sources", { body: { key: "fount-test-greeter" } });
      const run = await server.api("POST", `/v1/sources/${source.body.data.id}/run`, { body: {} });
      assert.deepEqual(run.body.data.emits[0].event, { greeting: "hello" });

      const user = await server.createUser("registry-cli-user");
      const refused = await fount(["registry", "publish", file, "--url", server.url, "--api-key", user.key]);
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /\(forbidden\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** A Fount app on a fake clock without the real-time timer loop; the test calls `scheduler.tick()`. */
describe("timer and feed sources on a fake clock", () => {
  // 10:59 UTC, so that one minute later both the 60 s interval and the hourly cron are due.
  let now = Date.UTC(2030, 0, 1, 10, 59, 0);
  const clock = { now: () => now };
  let built: BuiltApp;
  let dataDir: string;
  let feeds: Server;
  let feedsUrl: string;
  const documents = new Map<string, { type: string; body: string }>();
  const feedRequests: Array<{ path: string; ifNoneMatch: string | undefined }> = [];

  const inject = async (method: "GET" | "POST", url: string, payload?: unknown) => {
    const res = await built.app.inject({
      method,
      url,
      headers: {
        authorization: `Bearer ${adminKey}`,
        ...(payload ? { "content-type": "application/json" } : {}),
      },
      payload: payload ? JSON.stringify(payload) : undefined,
    });
    return { status: res.statusCode, body: res.json() };
  };

  before(async () => {
    dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-registry-clock-"));
    const config = loadConfig(
      {
        FOUNT_BOOTSTRAP_API_KEY: adminKey,
        FOUNT_RATE_LIMIT: "0",
        FOUNT_NPM_CACHE: path.join(os.tmpdir(), "fount-test-npm-cache"),
        // The feeds are served on loopback, which component code may not reach unless allowed.
        FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.1",
      },
      { dataDir, port: 0 },
    );
    built = await buildApp(config, { clock, startScheduler: false, logger: false });
    await built.app.ready();

    feeds = createServer((req, res) => {
      const doc = documents.get(req.url ?? "");
      const etag = doc ? `"${createHash("sha256").update(doc.body).digest("hex").slice(0, 16)}"` : undefined;
      feedRequests.push({ path: req.url ?? "", ifNoneMatch: req.headers["if-none-match"] });
      if (!doc) return res.writeHead(404).end();
      if (req.headers["if-none-match"] === etag) return res.writeHead(304).end();
      res.writeHead(200, { "content-type": doc.type, etag }).end(doc.body);
    });
    await new Promise<void>((resolve) => feeds.listen(0, "127.0.0.1", resolve));
    const address = feeds.address();
    feedsUrl = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
  });
  after(async () => {
    await new Promise((resolve) => feeds.close(resolve));
    await built.app.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test("schedule-interval and schedule-cron emit the timer event when their time comes", async () => {
    const interval = await inject("POST", "/v1/sources", {
      key: "schedule-interval",
      configured_props: { timer: { intervalSeconds: 60 } },
    });
    assert.equal(interval.status, 200, JSON.stringify(interval.body));
    assert.deepEqual(interval.body.data.configured_props.timer, { cron: null, interval_seconds: 60 });
    const cron = await inject("POST", "/v1/sources", { key: "schedule-cron" });
    assert.equal(cron.status, 200, JSON.stringify(cron.body));
    assert.equal(cron.body.data.configured_props.timer.cron, "0 * * * *");

    assert.deepEqual(await built.services.scheduler.tick(), []);
    now += 60_000;
    const outcomes = await built.services.scheduler.tick();
    const byId = new Map(outcomes.map((o) => [o.emits[0]?.emitterId, o]));
    const fired = Math.floor(now / 1000);
    assert.deepEqual(
      byId.get(interval.body.data.id)?.emits.map((e) => e.event),
      [{ timestamp: fired, interval_seconds: 60 }],
    );
    assert.deepEqual(
      byId.get(cron.body.data.id)?.emits.map((e) => e.event),
      [{ timestamp: fired, cron: "0 * * * *", timezone: "UTC" }],
    );

    const events = await inject("GET", `/v1/sources/${interval.body.data.id}/event_summaries`);
    assert.deepEqual(events.body.data[0].event, { timestamp: fired, interval_seconds: 60 });
  });

  const longGuid = `https://example.com/articles/${"very-long-slug-".repeat(6)}1`;
  const rss = (items: string[]) => `<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/" xmlns:atom="http://www.w3.org/2005/Atom">
<channel>
  <title>Example &amp; Co</title>
  <link>https://example.com/</link>
  <atom:link href="https://example.com/rss.xml" rel="self" type="application/rss+xml"/>
  <!-- <item><title>not an item</title></item> -->
  ${items.join("\n  ")}
</channel>
</rss>`;
  const rssItems = {
    first: `<item><title><![CDATA[First <post> & more]]></title><link>https://example.com/1</link><guid isPermaLink="false">post-1</guid><pubDate>Mon, 06 Jan 2025 10:00:00 GMT</pubDate><description>One &lt;b&gt;bold&lt;/b&gt;</description></item>`,
    second: `<item><title>Second post</title><link>https://example.com/2</link><guid>${longGuid}</guid><pubDate>Tue, 07 Jan 2025 10:00:00 GMT</pubDate><content:encoded><![CDATA[<p>Body</p>]]></content:encoded></item>`,
    third: `<item><title>Third post</title><link>https://example.com/3</link><pubDate>Wed, 08 Jan 2025 10:00:00 GMT</pubDate></item>`,
  };
  const atom = (entries: string[]) => `<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title type="html">Atom &lt;i&gt;example&lt;/i&gt;</title>
  <link href="https://atom.example/" />
  <link rel="self" href="https://atom.example/feed.xml" />
  <id>urn:uuid:feed</id>
  <updated>2025-01-08T10:00:00Z</updated>
  ${entries.join("\n  ")}
</feed>`;
  const atomEntry = (n: number) =>
    `<entry><title>Entry ${n}</title><link rel="alternate" href="https://atom.example/${n}"/><link rel="edit" href="https://atom.example/edit/${n}"/><id>urn:uuid:entry-${n}</id><updated>2025-01-0${n}T10:00:00Z</updated><author><name>Ann</name></author><summary>Summary ${n}</summary><source><title>Elsewhere</title><id>urn:other</id></source></entry>`;
  const jsonFeed = (ids: number[]) =>
    JSON.stringify({
      version: "https://jsonfeed.org/version/1.1",
      title: "JSON example",
      home_page_url: "https://json.example/",
      items: ids.map((n) => ({
        id: String(n),
        url: `https://json.example/${n}`,
        title: `Item ${n}`,
        content_text: `Text ${n}`,
        date_published: `2025-01-0${n}T10:00:00Z`,
      })),
    });

  async function deployFeed(file: string) {
    const res = await inject("POST", "/v1/sources", {
      key: "feeds-new-item",
      configured_props: { url: `${feedsUrl}/${file}`, timer: { intervalSeconds: 3600 } },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body.data.id as string;
  }

  async function poll(sourceId: string) {
    const res = await inject("POST", `/v1/sources/${sourceId}/run`, {});
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.data.ok, true, JSON.stringify(res.body.data.error));
    return res.body.data.emits as Array<{ event: any; metadata: any }>;
  }

  test("feeds-new-item emits the items of an RSS feed, then only a new one", async () => {
    documents.set("/rss.xml", { type: "application/rss+xml", body: rss([rssItems.second, rssItems.first]) });
    const id = await deployFeed("rss.xml");
    const first = await poll(id);
    assert.deepEqual(
      first.map((e) => e.metadata.summary),
      ["First <post> & more", "Second post"],
    );
    const [one, two] = first;
    assert.equal(one!.metadata.id, "post-1");
    assert.equal(one!.metadata.ts, Date.parse("2025-01-06T10:00:00Z"));
    assert.equal(one!.event.link, "https://example.com/1");
    assert.equal(one!.event.summary, "One <b>bold</b>");
    assert.equal(one!.event.published, "2025-01-06T10:00:00.000Z");
    assert.deepEqual(one!.event.feed, {
      title: "Example & Co",
      link: "https://example.com/",
      url: `${feedsUrl}/rss.xml`,
    });
    // A guid over 64 characters is hashed into the dedupe id; the event keeps it whole.
    assert.match(two!.metadata.id, /^[0-9a-f]{64}$/);
    assert.equal(two!.event.id, longGuid);
    assert.equal(two!.event.content, "<p>Body</p>");

    documents.set("/rss.xml", {
      type: "application/rss+xml",
      body: rss([rssItems.third, rssItems.second, rssItems.first]),
    });
    const second = await poll(id);
    assert.deepEqual(
      second.map((e) => [e.metadata.summary, e.metadata.id]),
      [["Third post", "https://example.com/3"]],
    );
    const stored = await inject("GET", `/v1/sources/${id}/event_summaries`);
    assert.equal(stored.body.data.length, 3);
  });

  test("feeds-new-item reads Atom entries and sends the ETag back, emitting nothing on 304", async () => {
    documents.set("/atom.xml", { type: "application/atom+xml", body: atom([atomEntry(2), atomEntry(1)]) });
    const id = await deployFeed("atom.xml");
    const first = await poll(id);
    assert.deepEqual(
      first.map((e) => [e.metadata.id, e.event.title, e.event.link, e.event.author]),
      [
        ["urn:uuid:entry-1", "Entry 1", "https://atom.example/1", "Ann"],
        ["urn:uuid:entry-2", "Entry 2", "https://atom.example/2", "Ann"],
      ],
    );
    assert.equal(first[0]!.event.feed.title, "Atom example");
    assert.equal(first[0]!.event.updated, "2025-01-01T10:00:00.000Z");

    const unchanged = await poll(id);
    assert.deepEqual(unchanged, []);
    assert.ok(feedRequests.filter((r) => r.path === "/atom.xml").at(-1)?.ifNoneMatch, "sent If-None-Match");

    documents.set("/atom.xml", {
      type: "application/atom+xml",
      body: atom([atomEntry(3), atomEntry(2), atomEntry(1)]),
    });
    const next = await poll(id);
    assert.deepEqual(
      next.map((e) => e.metadata.id),
      ["urn:uuid:entry-3"],
    );
  });

  test("feeds-new-item reads a JSON Feed, and dedupe keeps an item that comes back from being emitted twice", async () => {
    documents.set("/feed.json", { type: "application/feed+json", body: jsonFeed([2, 1]) });
    const id = await deployFeed("feed.json");
    const first = await poll(id);
    assert.deepEqual(
      first.map((e) => [e.metadata.id, e.metadata.summary, e.event.link, e.event.content]),
      [
        ["1", "Item 1", "https://json.example/1", "Text 1"],
        ["2", "Item 2", "https://json.example/2", "Text 2"],
      ],
    );
    documents.set("/feed.json", { type: "application/feed+json", body: jsonFeed([3, 2]) });
    assert.deepEqual(
      (await poll(id)).map((e) => e.metadata.id),
      ["3"],
    );
    // Item 1 left the feed and is back: the unique dedupe cache still holds its id.
    documents.set("/feed.json", { type: "application/feed+json", body: jsonFeed([4, 3, 2, 1]) });
    assert.deepEqual(
      (await poll(id)).map((e) => e.metadata.id),
      ["4"],
    );
  });

  test("a feed URL that fails is recorded as an error of the run", async () => {
    const id = await deployFeed("missing.xml");
    const res = await inject("POST", `/v1/sources/${id}/run`, {});
    assert.equal(res.body.data.ok, false);
    assert.match(res.body.data.error.message, /answered 404/);
  });
});

test("the registry folder holds only components that import node built-ins", () => {
  for (const file of [
    "http/new-requests.mjs",
    "schedule/interval.mjs",
    "schedule/cron.mjs",
    "feeds/new-item.mjs",
  ]) {
    const code = readFileSync(path.join(registryDir, file), "utf8");
    for (const [, spec] of code.matchAll(/\bfrom\s+["']([^"']+)["']/g))
      assert.match(spec!, /^node:/, `${file} imports ${spec}`);
  }
});
