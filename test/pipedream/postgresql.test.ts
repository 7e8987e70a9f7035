/**
 * Pipedream's PostgreSQL sources, unmodified from their npm package (downloaded at test time, never
 * committed), deployed with `fount deploy <file>` against the local PostgreSQL: async prop options,
 * deploy hooks, polling runs, dedupe and errors, as they behave on Pipedream.
 *
 * The app always asks the server for TLS (its `ssl` option is never empty), and the local server has
 * none, so the test puts a small TLS-terminating proxy in front of it and gives the account the proxy's
 * certificate as `ca`, one of the credential fields the app reads.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, test } from "node:test";
import tls from "node:tls";
import pg from "pg";
import { bundleLocalComponent } from "../../src/cli/bundle.ts";
import { fount } from "../cli/run.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { fetchPackage, selfSignedCertificate } from "./support.ts";

/** The version whose sources these tests know; bump it deliberately. */
const packageVersion = "2.2.4";
/** The local PostgreSQL (trust authentication), overridable for other machines. */
const databaseUrl = process.env.FOUNT_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
/** Deploys install the components' packages on first use; the shared npm cache makes later runs fast. */
const deployTimeoutMs = 120_000;

let skip: string | undefined;
let pkgDir: string;
let server: TestServer;
let env: Record<string, string>;
let userKey: string;
let db: pg.Client;
let proxy: { port: number; close: () => Promise<void> };
let tlsFiles: { cert: string; dir: string };
let schema: string;
let accountId: string;

/**
 * Accepts PostgreSQL's SSLRequest, answers "S", does the TLS handshake with `cert`, and relays the
 * decrypted protocol to the plain server; a client that does not ask for TLS is relayed as it is.
 */
function tlsProxy(target: URL, key: string, cert: string): Promise<typeof proxy> {
  const sockets = new Set<net.Socket>();
  const srv = net.createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.once("data", (first: Buffer) => {
      client.pause();
      const upstream = net.connect(Number(target.port || 5432), target.hostname);
      sockets.add(upstream);
      upstream.on("close", () => sockets.delete(upstream));
      const sslRequest =
        first.length === 8 && first.readInt32BE(0) === 8 && first.readInt32BE(4) === 80877103;
      let front: net.Socket = client;
      if (sslRequest) {
        client.write("S");
        front = new tls.TLSSocket(client, { isServer: true, key, cert });
      } else {
        upstream.write(first);
      }
      front.on("error", () => upstream.destroy());
      upstream.on("error", () => front.destroy());
      front.pipe(upstream).pipe(front);
      client.resume();
    });
    client.on("error", () => {});
  });
  return new Promise((resolve) =>
    srv.listen(0, "127.0.0.1", () =>
      resolve({
        port: (srv.address() as net.AddressInfo).port,
        close: () =>
          new Promise<void>((done) => {
            for (const s of sockets) s.destroy();
            srv.close(() => done());
          }),
      }),
    ),
  );
}

const source = (name: string) => path.join(pkgDir, "sources", name, `${name}.mjs`);

/** `fount <args> --json` as the test user; must succeed. */
async function json(...args: string[]): Promise<any> {
  const res = await fount([...args, "--json"], env, deployTimeoutMs);
  assert.equal(res.code, 0, `fount ${args.join(" ")}: ${res.stderr}`);
  return JSON.parse(res.stdout);
}

async function sql(text: string, values: unknown[] = []): Promise<any[]> {
  return (await db.query(text, values)).rows;
}

/** A fresh table of this test file's schema, with rows `items` (ids 1…n). */
async function table(name: string, items: string[] = []): Promise<void> {
  await sql(
    `CREATE TABLE "${schema}"."${name}" (id serial PRIMARY KEY, item text, updated_at timestamptz DEFAULT now())`,
  );
  for (const item of items) await sql(`INSERT INTO "${schema}"."${name}" (item) VALUES ($1)`, [item]);
}

async function events(id: string): Promise<any[]> {
  return json("events", id, "-n", "100");
}

before(async () => {
  const fetched = await fetchPackage("@pipedream/postgresql", packageVersion);
  if ("skip" in fetched) {
    skip = fetched.skip;
    return;
  }
  pkgDir = fetched.dir;
  db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  schema = `pd_${randomBytes(4).toString("hex")}`;
  await sql(`CREATE SCHEMA "${schema}"`);
  const certs = selfSignedCertificate();
  tlsFiles = certs;
  proxy = await tlsProxy(new URL(databaseUrl), certs.key, certs.cert);
  // The components reach the database through the proxy on loopback, which they may not unless allowed.
  server = await startServer({}, { FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.1" });
  userKey = (await server.createUser("pg-user")).key;
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: userKey };
  const target = new URL(databaseUrl);
  // The $auth fields postgresql.app.mjs reads: host, port, user, password, database, ca/key/cert and
  // ssl_verification_mode. The certificate is the proxy's own, so verification is real.
  const credentials = {
    host: "127.0.0.1",
    port: proxy.port,
    user: decodeURIComponent(target.username || "postgres"),
    password: decodeURIComponent(target.password),
    database: target.pathname.slice(1) || "postgres",
    ca: certs.cert,
  };
  const credsFile = path.join(certs.dir, "credentials.json");
  writeFileSync(credsFile, JSON.stringify(credentials));
  accountId = (await json("accounts", "create", "postgresql", "--credentials", `@${credsFile}`)).id;
});

after(async () => {
  if (skip) return;
  await server?.close();
  await proxy?.close();
  await sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
  await db?.end();
  rmSync(pkgDir, { recursive: true, force: true });
  rmSync(tlsFiles.dir, { recursive: true, force: true });
});

test("the app's async options list schemas, tables and columns through the account", async (t) => {
  if (skip) return t.skip(skip);
  await table("customers", ["ada"]);
  const code = await bundleLocalComponent(source("new-row"));
  const saved = await server.api("POST", "/v1/components", { key: userKey, body: { component_code: code } });
  assert.equal(saved.status, 200, saved.text);
  const c = saved.body.data;
  assert.equal(c.key, "postgresql-new-row");
  const byName = Object.fromEntries(c.configurable_props.map((p: any) => [p.name, p]));
  assert.equal(byName.postgresql.type, "app");
  assert.equal(byName.postgresql.app, "postgresql");
  assert.deepEqual(byName.timer.default, { intervalSeconds: 900 }, "DEFAULT_POLLING_SOURCE_TIMER_INTERVAL");
  assert.equal(byName.schema.remoteOptions, true);
  assert.equal(byName.column.optional, true, "the source's override of the propDefinition wins");

  const options = async (prop: string, configured: Record<string, unknown>) => {
    const res = await server.api("POST", `/v1/components/${c.id}/props/${prop}/options`, {
      key: userKey,
      body: { configured_props: { postgresql: { authProvisionId: accountId }, ...configured } },
    });
    assert.equal(res.status, 200, res.text);
    return res.body.data.options as string[];
  };
  // Each propDefinition's third element maps the configured props to the options() input.
  assert.ok((await options("schema", {})).includes(schema));
  assert.deepEqual(await options("table", { schema }), ["customers"]);
  assert.deepEqual((await options("column", { schema, table: "customers" })).sort(), [
    "id",
    "item",
    "updated_at",
  ]);

  const noAccount = await server.api("POST", `/v1/components/${c.id}/props/schema/options`, {
    key: userKey,
    body: {},
  });
  assert.equal(noAccount.status, 422, "without an account the app cannot connect");
  assert.equal(noAccount.body.code, "component_invalid");
});

test("new-row: the deploy hook emits the existing rows, runs emit only rows added since", async (t) => {
  if (skip) return t.skip(skip);
  await table("orders", ["first", "second"]);
  const s = await json(
    "deploy",
    source("new-row"),
    "--name",
    "orders",
    "--prop",
    `postgresql=${accountId}`,
    "--prop",
    `schema=${schema}`,
    "--prop",
    "table=orders",
  );
  assert.deepEqual(s.configured_props.timer, { cron: null, interval_seconds: 900 });
  assert.deepEqual(s.configured_props.postgresql, { authProvisionId: accountId });
  // Without `column` the hook finds the primary key and emits the last 10 rows, newest first.
  const initial = await events(s.id);
  assert.deepEqual(
    initial.map((e) => [e.event.id, e.event.item, e.metadata.id, e.metadata.summary]),
    [
      [2, "second", 2, "New Row Added"],
      [1, "first", 1, "New Row Added"],
    ],
  );

  await sql(`INSERT INTO "${schema}".orders (item) VALUES ('third'), ('fourth')`);
  const ran = await json("run", "orders");
  assert.equal(ran.ok, true, JSON.stringify(ran.error));
  assert.deepEqual(ran.emits.map((e: any) => e.event.item).sort(), ["fourth", "third"]);
  const again = await json("run", s.id);
  assert.deepEqual(again.emits, [], "the last id is kept in the source's db");

  // An inserted row with an old id is below the last result and unique dedupe would drop it anyway.
  await sql(`INSERT INTO "${schema}".orders (id, item) VALUES (100, 'jump')`);
  assert.deepEqual(
    (await json("run", s.id)).emits.map((e: any) => e.metadata.id),
    [100],
  );
});

test("new-row: a column with duplicate values fails the deploy with the hook's message", async (t) => {
  if (skip) return t.skip(skip);
  await table("dupes", ["same", "same"]);
  const res = await fount(
    [
      "deploy",
      source("new-row"),
      "--prop",
      `postgresql=${accountId}`,
      "--prop",
      `schema=${schema}`,
      "--prop",
      "table=dupes",
      "--prop",
      "column=item",
    ],
    env,
    deployTimeoutMs,
  );
  assert.equal(res.code, 1);
  assert.match(
    res.stderr,
    /The deploy hook failed: The column selected contains duplicate values\. Column must be unique \(hook_failed\)/,
  );
  const list = await json("list", "sources");
  assert.ok(!list.some((x: any) => x.configured_props.table === "dupes"), "a failed deploy leaves no source");
});

test("new-table and new-column emit what appears between runs", async (t) => {
  if (skip) return t.skip(skip);
  const tables = await json(
    "deploy",
    source("new-table"),
    "--prop",
    `postgresql=${accountId}`,
    "--prop",
    `schema=${schema}`,
  );
  await table("watched", ["x"]);
  const columns = await json(
    "deploy",
    source("new-column"),
    "--prop",
    `postgresql=${accountId}`,
    "--prop",
    `schema=${schema}`,
    "--prop",
    "table=watched",
  );

  const firstTables = await json("run", tables.id);
  assert.ok(
    firstTables.emits.some((e: any) => e.event === "watched"),
    "the first run emits every table",
  );
  assert.deepEqual((await json("run", columns.id)).emits.map((e: any) => e.event).sort(), [
    "id",
    "item",
    "updated_at",
  ]);

  await table("newcomer");
  await sql(`ALTER TABLE "${schema}".watched ADD COLUMN price numeric`);
  assert.deepEqual(
    (await json("run", tables.id)).emits.map((e: any) => e.event),
    ["newcomer"],
  );
  const newColumns = (await json("run", columns.id)).emits;
  assert.deepEqual(
    newColumns.map((e: any) => [e.event, e.metadata.summary]),
    [["price", "price"]],
  );
});

test("new-row-custom-query emits each row of the query once (unique dedupe); a bad values count fails the deploy", async (t) => {
  if (skip) return t.skip(skip);
  await table("tickets", ["alpha", "beta", "apple"]);
  const query = `SELECT * FROM "${schema}".tickets WHERE item LIKE $1`;
  const common = [
    "--prop",
    `postgresql=${accountId}`,
    "--prop",
    `schema=${schema}`,
    "--prop",
    "table=tickets",
  ];
  const s = await json(
    "deploy",
    source("new-row-custom-query"),
    ...common,
    "--prop",
    "column=id",
    "--prop",
    `query=${query}`,
    "--prop",
    'values=["a%"]',
  );
  assert.deepEqual(s.configured_props.values, ["a%"]);
  assert.deepEqual((await json("run", s.id)).emits.map((e: any) => e.event.item).sort(), ["alpha", "apple"]);
  await sql(`INSERT INTO "${schema}".tickets (item) VALUES ('avocado'), ('banana')`);
  assert.deepEqual(
    (await json("run", s.id)).emits.map((e: any) => e.event.item),
    ["avocado"],
  );

  const bad = await fount(
    [
      "deploy",
      source("new-row-custom-query"),
      ...common,
      "--prop",
      "column=id",
      "--prop",
      `query=${query}`,
      "--prop",
      'values=["a","b"]',
    ],
    env,
    deployTimeoutMs,
  );
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /does not match the number of values in the query/);
});

// The source passes the row's timestamp column, a Date, as meta.ts, as Pipedream allows.
test("new-or-updated-row emits a row again when its timestamp moves", async (t) => {
  if (skip) return t.skip(skip);
  await table("profiles", ["ada"]);
  const s = await json(
    "deploy",
    source("new-or-updated-row"),
    "--prop",
    `postgresql=${accountId}`,
    "--prop",
    `schema=${schema}`,
    "--prop",
    "table=profiles",
    "--prop",
    "identifierColumn=id",
    "--prop",
    "timestampColumn=updated_at",
  );
  const initial = await events(s.id);
  assert.equal(initial.length, 1);
  assert.equal(initial[0].event.item, "ada");
  assert.match(String(initial[0].metadata.id), /^1-/, "id is `<identifier>-<timestamp>`");

  await sql(
    `UPDATE "${schema}".profiles SET item = 'ada lovelace', updated_at = now() + interval '1 second' WHERE id = 1`,
  );
  const ran = await json("run", s.id);
  assert.equal(ran.ok, true, JSON.stringify(ran.error));
  assert.deepEqual(
    ran.emits.map((e: any) => e.event.item),
    ["ada lovelace"],
  );
  assert.deepEqual((await json("run", s.id)).emits, []);
});

test("a timer tick runs the source like a manual run; deleting it leaves the database alone", async (t) => {
  if (skip) return t.skip(skip);
  await table("ticks", ["one"]);
  const s = await json(
    "deploy",
    source("new-row"),
    "--prop",
    `postgresql=${accountId}`,
    "--prop",
    `schema=${schema}`,
    "--prop",
    "table=ticks",
    "--prop",
    'timer={"intervalSeconds":1}',
  );
  await sql(`INSERT INTO "${schema}".ticks (item) VALUES ('two')`);
  const deadline = Date.now() + 15_000;
  let items: string[] = [];
  while (Date.now() < deadline) {
    items = (await events(s.id)).map((e) => e.event.item);
    if (items.includes("two")) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  assert.deepEqual(items, ["one", "two"], "the scheduler ran the source within its interval");
  await json("delete", s.id, "--yes");
  assert.equal((await sql(`SELECT count(*)::int AS n FROM "${schema}".ticks`))[0].n, 2);
});
