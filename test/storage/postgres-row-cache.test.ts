/**
 * The PostgreSQL driver's row caches (storage/postgres/row-cache.ts): two stores on one schema stand for
 * two nodes. A change made through a store is read afresh by it at once; another store hears of it over
 * the cluster channel (a real ClusterLink on LISTEN/NOTIFY), and without any message still sees it within
 * the caches' bound, well inside the 1 s in which a deleted source must answer 404 on every node.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { FastifyBaseLogger } from "fastify";
import pino from "pino";
import { hashApiKey } from "../../src/crypto/secret-box.ts";
import { Bus } from "../../src/domain/bus.ts";
import { ClusterLink } from "../../src/domain/cluster/cluster-link.ts";
import type { ApiKey, Org, SourceRecord, Subscription, User } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { rowCacheTtlMs } from "../../src/storage/postgres/row-cache.ts";
import { fount } from "../cli/run.ts";
import { dropSchema, freshSchema, openTestPostgres, schemaUrl, testPgUrl } from "../pg-schemas.ts";

let counter = 0;
const unique = (prefix: string) => `${prefix}_${process.pid}x${++counter}`;

/**
 * Two stores on one fresh schema, closed (and the schema dropped) after the test; `bTtlMs`: how long the
 * second trusts its cached rows.
 */
async function twoNodes(
  bTtlMs?: number,
  schema = freshSchema("fount_rowcache"),
): Promise<[Storage, Storage]> {
  const a = await openTestPostgres(schema);
  const b = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 4, rowCacheTtlMs: bTtlMs });
  after(async () => {
    await a.close();
    await b.close();
    await dropSchema(schema);
  });
  return [a, b];
}

function source(overrides: Partial<SourceRecord> = {}): SourceRecord {
  const owner = unique("u");
  return {
    id: unique("dc"),
    ownerId: owner,
    createdBy: owner,
    componentId: "sc_x",
    name: "s",
    nameSlug: unique("slug"),
    active: true,
    props: {},
    endpointId: unique("e").replace(/_/g, ""),
    createdAt: 1,
    updatedAt: 1,
    ...overrides,
  };
}

function subscription(emitterId: string, ownerId: string): Subscription {
  return {
    id: unique("sub"),
    ownerId,
    emitterId,
    listenerId: unique("wh"),
    eventName: "",
    createdAt: 1,
  };
}

function user(): User {
  return {
    id: unique("u"),
    username: unique("name"),
    email: "someone@example.com",
    plan: "free",
    isAdmin: false,
    createdAt: 1,
    updatedAt: 1,
  };
}

function apiKey(userId: string): ApiKey {
  return {
    id: unique("key"),
    userId,
    name: "k",
    prefix: "fnt_test",
    hash: hashApiKey(unique("fnt")),
    createdAt: 1,
    revokedAt: null,
  };
}

function org(ownerId: string): Org {
  return {
    id: unique("o"),
    orgname: unique("org"),
    name: "Org",
    email: "org@example.com",
    ownerId,
    createdAt: 1,
    updatedAt: 1,
  };
}

const silent = pino({ level: "silent" }) as unknown as FastifyBaseLogger;

/** The cluster link of a node on `store`, as app.ts wires it; stopped after the test. */
async function link(store: Storage, nodeId: string): Promise<ClusterLink> {
  const l = new ClusterLink({
    store,
    cluster: store.cluster!,
    nodeId,
    bus: new Bus(),
    logger: silent,
    onLeaseMessage: () => undefined,
    onDeleted: () => undefined,
  });
  await l.start();
  after(() => l.close());
  return l;
}

/** Polls `read` until `done` holds of its answer; returns the milliseconds that took. */
async function within<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  boundMs: number,
): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (done(await read())) return Date.now() - start;
    assert.ok(Date.now() - start < boundMs, `not seen within ${boundMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test("a source deactivated through one store is read as inactive by it at once", async () => {
  const [a] = await twoNodes();
  const s = source();
  await a.insertSource(s);
  assert.equal((await a.getSourceByEndpoint(s.endpointId!))?.active, true);
  await a.updateSource(s.id, { active: false, updatedAt: 2 });
  assert.equal((await a.getSourceByEndpoint(s.endpointId!))?.active, false);
  await a.deleteSource(s.id);
  assert.equal(await a.getSourceByEndpoint(s.endpointId!), undefined);
});

test("a cached row is frozen, and the same object on every hit until it changes", async () => {
  const [a] = await twoNodes();
  const s = source();
  await a.insertSource(s);
  const first = await a.getSourceByEndpoint(s.endpointId!);
  assert.ok(Object.isFrozen(first) && Object.isFrozen(first!.props));
  assert.equal(await a.getSourceByEndpoint(s.endpointId!), first, "one row object, reused");
});

test("another node's change is heard over the cluster channel: the next read has it", async () => {
  // b would trust its rows for a minute: only the message can make it read them afresh.
  const [a, b] = await twoNodes(60_000);
  await link(a, "node-a");
  await link(b, "node-b");
  const s = source();
  await a.insertSource(s);
  assert.equal((await b.getSourceByEndpoint(s.endpointId!))?.active, true, "cached by b");
  await a.deleteSource(s.id);
  const ms = await within(
    () => b.getSourceByEndpoint(s.endpointId!),
    (row) => row === undefined,
    1_000,
  );
  console.log(`# deleted source unseen by the other node after ${ms} ms`);

  // Routing reads: a subscription added through a is matched by b.
  const emitter = source();
  await a.insertSource(emitter);
  assert.deepEqual(await b.matchSubscriptions(emitter.id, emitter.ownerId, ""), []);
  const sub = subscription(emitter.id, emitter.ownerId);
  await a.upsertSubscription(sub);
  await within(
    () => b.matchSubscriptions(emitter.id, emitter.ownerId, ""),
    (subs) => subs.length === 1,
    1_000,
  );
});

test("without any message, another node's change is seen within the caches' bound", async () => {
  const [a, b] = await twoNodes();
  const s = source();
  await a.insertSource(s);
  assert.equal((await b.getSourceByEndpoint(s.endpointId!))?.active, true, "cached by b");
  await a.updateSource(s.id, { active: false, updatedAt: 2 });
  // No link: only the entries' age bounds what b believes.
  const ms = await within(
    () => b.getSourceByEndpoint(s.endpointId!),
    (row) => row?.active === false,
    1_000,
  );
  assert.ok(ms <= rowCacheTtlMs + 500, `seen after ${ms} ms`);
});

test("a transaction sees its own subscription, and reports the change only once it committed", async () => {
  const [a] = await twoNodes();
  const emitter = source();
  await a.insertSource(emitter);
  assert.deepEqual(await a.matchSubscriptions(emitter.id, emitter.ownerId, ""), [], "cached: none");
  const reported: string[][] = [];
  a.cluster!.onStale((kinds) => reported.push(kinds));
  await a.transaction(async (tx) => {
    await tx.upsertSubscription(subscription(emitter.id, emitter.ownerId));
    assert.equal((await tx.matchSubscriptions(emitter.id, emitter.ownerId, "")).length, 1);
    assert.deepEqual(reported, [], "nothing reported before the commit");
    assert.deepEqual(await a.matchSubscriptions(emitter.id, emitter.ownerId, ""), [], "uncommitted");
  });
  assert.deepEqual(reported, [["subscriptions"]]);
  assert.equal((await a.matchSubscriptions(emitter.id, emitter.ownerId, "")).length, 1, "read afresh");
});

test("a key revoked or a membership changed through one node is read afresh by it at once, and by another over the channel", async () => {
  // b would trust its rows for a minute: only the message can make it read them afresh.
  const [a, b] = await twoNodes(60_000);
  await link(a, "node-a");
  await link(b, "node-b");
  const u = user();
  await a.insertUser(u);
  const key = apiKey(u.id);
  await a.insertApiKey(key);
  const o = org(u.id);
  await a.insertOrg(o);
  for (const store of [a, b]) {
    assert.equal((await store.findApiKeyByHash(key.hash))?.key.id, key.id, "cached");
    assert.deepEqual(await store.listOrgsOfUser(u.id), [], "cached: none");
  }

  await a.putMember(o.id, u.id, "member", 2);
  assert.deepEqual(
    (await a.listOrgsOfUser(u.id)).map((x) => x.id),
    [o.id],
  );
  await within(
    () => b.listOrgsOfUser(u.id),
    (orgs) => orgs.length === 1,
    1_000,
  );
  await a.deleteMember(o.id, u.id);
  assert.deepEqual(await a.listOrgsOfUser(u.id), []);
  await within(
    () => b.listOrgsOfUser(u.id),
    (orgs) => orgs.length === 0,
    1_000,
  );

  await a.revokeApiKey(key.id, 3);
  assert.equal(await a.findApiKeyByHash(key.hash), undefined, "refused at once where it was revoked");
  const ms = await within(
    () => b.findApiKeyByHash(key.hash),
    (found) => found === undefined,
    1_000,
  );
  console.log(`# revoked key refused by the other node after ${ms} ms`);
});

test("a key revoked without any message is refused by another node within the caches' bound", async () => {
  const [a, b] = await twoNodes();
  const u = user();
  await a.insertUser(u);
  const key = apiKey(u.id);
  await a.insertApiKey(key);
  assert.equal((await b.findApiKeyByHash(key.hash))?.key.id, key.id, "cached by b");
  await a.revokeApiKey(key.id, 2);
  const ms = await within(
    () => b.findApiKeyByHash(key.hash),
    (found) => found === undefined,
    1_000,
  );
  assert.ok(ms <= rowCacheTtlMs + 500, `refused after ${ms} ms`);
});

test("fount admin's revoke-key and remove-member are heard by the nodes over the channel", async () => {
  const schema = freshSchema("fount_rowcache");
  const [a, b] = await twoNodes(60_000, schema);
  await link(a, "node-a");
  await link(b, "node-b");
  const env = { DATABASE_URL: schemaUrl(schema) };
  const admin = async (...args: string[]) => {
    const res = await fount(["admin", ...args, "--json"], env);
    assert.equal(res.code, 0, res.stderr);
    return JSON.parse(res.stdout);
  };
  const made = await admin("create-user", "--username", unique("cli"), "--email", "cli@example.com");
  const o = await admin("create-org", "--orgname", unique("cliorg"), "--owner", made.id);
  const hash = hashApiKey(made.api_key);
  assert.equal((await b.findApiKeyByHash(hash))?.user.id, made.id, "cached by b");
  assert.deepEqual(
    (await b.listOrgsOfUser(made.id)).map((x) => x.id),
    [o.id],
    "cached by b",
  );
  const other = await admin("create-user", "--username", unique("cli"), "--email", "cli@example.com");
  await admin("add-member", o.id, other.id);
  assert.equal((await b.listOrgsOfUser(other.id)).length, 1, "cached by b");

  await admin("remove-member", o.id, other.id);
  await within(
    () => b.listOrgsOfUser(other.id),
    (orgs) => orgs.length === 0,
    1_000,
  );
  const revoked = await fount(["admin", "revoke-key", made.api_key_id], env);
  assert.equal(revoked.code, 0, revoked.stderr);
  await within(
    () => b.findApiKeyByHash(hash),
    (found) => found === undefined,
    1_000,
  );
});
