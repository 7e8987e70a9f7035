/**
 * The storage port's contract: every driver runs these same cases unchanged (see sqlite.test.ts).
 * A driver lacking a capability skips the cases that need it, naming the capability.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { EventRecord, SessionRecord, User, Webhook } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";
import { componentContract } from "./component-contract.ts";
import { deliveryContract } from "./delivery-contract.ts";
import { deliveryHistoryContract } from "./delivery-history-contract.ts";
import { eventSearchContract } from "./event-search-contract.ts";
import { eventWindowContract } from "./event-window-contract.ts";
import { sharedStateContract } from "./shared-state-contract.ts";

let counter = 0;
const unique = (prefix: string) => `${prefix}_${process.pid}x${++counter}`;

function user(overrides: Partial<User> = {}): User {
  return {
    id: unique("u"),
    username: unique("name"),
    email: "a@example.com",
    plan: "free",
    isAdmin: false,
    createdAt: 1,
    updatedAt: 1,
    ...overrides,
  };
}

function webhook(ownerId: string, overrides: Partial<Webhook> = {}): Webhook {
  return {
    id: unique("wh"),
    ownerId,
    createdBy: ownerId,
    name: null,
    description: null,
    url: "https://example.com/",
    active: true,
    signingSecretSealed: "sealed",
    allowPrivate: false,
    createdAt: 1,
    updatedAt: 1,
    ...overrides,
  };
}

function session(userId: string, overrides: Partial<SessionRecord> = {}): SessionRecord {
  return {
    id: unique("ses"),
    userId,
    createdAt: 1,
    expiresAt: 1000,
    address: null,
    userAgent: null,
    ...overrides,
  };
}

/** Registers the contract tests; `open` gives a fresh, empty store for each test. */
export function storageContract(name: string, open: () => Promise<Storage>): void {
  const withStore = (title: string, fn: (s: Storage) => Promise<void>) =>
    test(`${name}: ${title}`, async () => {
      const store = await open();
      try {
        await fn(store);
      } finally {
        await store.close();
      }
    });

  withStore("a user is stored and found by id and by username", async (s) => {
    const u = user({ plan: "paid", isAdmin: true });
    await s.insertUser(u);
    assert.deepEqual(await s.getUser(u.id), u);
    assert.deepEqual(await s.getUserByUsername(u.username), u);
    assert.equal(await s.getUser("u_missing"), undefined);
    assert.equal(await s.countUsers(), 1);
  });

  withStore("usernames are unique", async (s) => {
    const u = user();
    await s.insertUser(u);
    await assert.rejects(s.insertUser(user({ username: u.username })));
  });

  withStore("memberships list the orgs of a user and can be removed", async (s) => {
    const u = user();
    await s.insertUser(u);
    const org = {
      id: unique("o"),
      orgname: unique("org"),
      name: "Org",
      email: "o@example.com",
      ownerId: u.id,
      createdAt: 1,
      updatedAt: 1,
    };
    await s.insertOrg(org);
    await s.putMember(org.id, u.id, "owner", 1);
    await s.putMember(org.id, u.id, "owner", 2);
    assert.deepEqual(await s.listOrgsOfUser(u.id), [org]);
    assert.deepEqual(await s.getOrgByName(org.orgname), org);
    assert.deepEqual(await s.listMembers(org.id), [{ userId: u.id, role: "owner" }]);
    assert.equal(await s.deleteMember(org.id, u.id), true);
    assert.equal(await s.deleteMember(org.id, u.id), false);
    assert.deepEqual(await s.listOrgsOfUser(u.id), []);
  });

  withStore("users and organizations list newest first, paged in both cursor directions", async (s) => {
    const users: User[] = [];
    for (let i = 0; i < 5; i++) {
      const u = user({ createdAt: i });
      await s.insertUser(u);
      users.push(u);
    }
    const first = await s.listUsers({ limit: 2 });
    assert.equal(first.totalCount, 5);
    assert.deepEqual(
      first.items.map(({ seq: _, ...u }) => u),
      [users[4], users[3]],
    );
    const second = await s.listUsers({ limit: 2, afterSeq: first.items[1]!.seq });
    assert.deepEqual(
      second.items.map((u) => u.id),
      [users[2]!.id, users[1]!.id],
    );
    const back = await s.listUsers({ limit: 2, beforeSeq: second.items[0]!.seq });
    assert.deepEqual(
      back.items.map((u) => u.id),
      [users[4]!.id, users[3]!.id],
    );

    assert.deepEqual(await s.listOrgs({ limit: 10 }), { items: [], totalCount: 0 });
    const orgs = [];
    for (let i = 0; i < 3; i++) {
      const org = {
        id: unique("o"),
        orgname: unique("org"),
        name: `Org ${i}`,
        email: "o@example.com",
        ownerId: users[i]!.id,
        createdAt: i,
        updatedAt: i,
      };
      await s.insertOrg(org);
      orgs.push(org);
    }
    const page = await s.listOrgs({ limit: 2 });
    assert.equal(page.totalCount, 3);
    assert.deepEqual(
      page.items.map(({ seq: _, ...o }) => o),
      [orgs[2], orgs[1]],
    );
    const rest = await s.listOrgs({ limit: 2, afterSeq: page.items[1]!.seq });
    assert.deepEqual(
      rest.items.map((o) => o.id),
      [orgs[0]!.id],
    );
  });

  withStore("an API key is found by hash until it is revoked", async (s) => {
    const u = user();
    await s.insertUser(u);
    const key = {
      id: unique("key"),
      userId: u.id,
      name: "k",
      prefix: "fnt_abcd",
      hash: unique("hash"),
      createdAt: 1,
      revokedAt: null,
    };
    await s.insertApiKey(key);
    const found = await s.findApiKeyByHash(key.hash);
    assert.deepEqual(found, { key, user: u });
    assert.equal(await s.revokeApiKey(key.id, 5), true);
    assert.equal(await s.revokeApiKey(key.id, 6), false);
    assert.equal(await s.findApiKeyByHash(key.hash), undefined);
    assert.equal((await s.listApiKeys(u.id))[0]?.revokedAt, 5);
  });

  withStore("a session is found with its user until it expires, and listed newest first", async (s) => {
    const u = user();
    const other = user();
    await s.insertUser(u);
    await s.insertUser(other);
    const first = session(u.id, { createdAt: 100, expiresAt: 200, address: "192.0.2.1", userAgent: "A" });
    const second = session(u.id, { createdAt: 150, expiresAt: 300 });
    await s.insertSession(first);
    await s.insertSession(second);
    await s.insertSession(session(other.id, { createdAt: 100, expiresAt: 300 }));
    assert.deepEqual(await s.findSession(first.id, 199), { session: first, user: u });
    assert.equal(await s.findSession(first.id, 200), undefined, "expired at expires_at");
    assert.equal(await s.findSession("ses_missing", 0), undefined);
    assert.deepEqual(await s.listSessions(u.id, 100), [second, first]);
    assert.deepEqual(await s.listSessions(u.id, 250), [second]);
  });

  withStore("a session is deleted only by its own user's ID", async (s) => {
    const u = user();
    const other = user();
    await s.insertUser(u);
    await s.insertUser(other);
    const mine = session(u.id);
    await s.insertSession(mine);
    assert.equal(await s.deleteSession(other.id, mine.id), false);
    assert.ok(await s.findSession(mine.id, 0));
    assert.equal(await s.deleteSession(u.id, mine.id), true);
    assert.equal(await s.deleteSession(u.id, mine.id), false);
    assert.equal(await s.findSession(mine.id, 0), undefined);
  });

  withStore("trimming keeps a user's newest sessions, and pruning deletes the expired", async (s) => {
    const u = user();
    const other = user();
    await s.insertUser(u);
    await s.insertUser(other);
    const made: string[] = [];
    for (let i = 0; i < 5; i++) {
      const one = session(u.id, { createdAt: 10, expiresAt: 100 + i });
      await s.insertSession(one);
      made.push(one.id);
    }
    const others = session(other.id, { expiresAt: 100 });
    await s.insertSession(others);
    assert.equal(await s.trimSessions(u.id, 3), 2);
    assert.deepEqual(
      (await s.listSessions(u.id, 0)).map((x) => x.id),
      made.slice(2).reverse(),
      "the oldest two went",
    );
    assert.equal(await s.trimSessions(u.id, 3), 0);
    // Expired at or before 103: the other user's (100) and the sessions expiring at 102 and 103.
    assert.equal(await s.pruneSessions(103), 3);
    assert.deepEqual(
      (await s.listSessions(u.id, 0)).map((x) => x.id),
      [made[4]],
    );
    assert.deepEqual(await s.listSessions(other.id, 0), []);
  });

  withStore("webhooks page newest first in both cursor directions", async (s) => {
    const owner = unique("u");
    const made: Webhook[] = [];
    for (let i = 0; i < 5; i++) {
      const w = webhook(owner, { name: `w${i}` });
      await s.insertWebhook(w);
      made.push(w);
    }
    await s.insertWebhook(webhook(unique("u")));
    const first = await s.listWebhooks([owner], { limit: 2 });
    assert.equal(first.totalCount, 5);
    assert.deepEqual(
      first.items.map((w) => w.name),
      ["w4", "w3"],
    );
    const second = await s.listWebhooks([owner], { limit: 2, afterSeq: first.items[1]!.seq });
    assert.deepEqual(
      second.items.map((w) => w.name),
      ["w2", "w1"],
    );
    const back = await s.listWebhooks([owner], { limit: 2, beforeSeq: second.items[0]!.seq });
    assert.deepEqual(
      back.items.map((w) => w.name),
      ["w4", "w3"],
    );
    assert.deepEqual((await s.listWebhooks([], { limit: 10 })).items, []);
  });

  withStore("a webhook update changes only the given fields", async (s) => {
    const w = webhook(unique("u"), { name: "before", description: "d" });
    await s.insertWebhook(w);
    const updated = await s.updateWebhook(w.id, { active: false, name: null, updatedAt: 9 });
    assert.equal(updated?.active, false);
    assert.equal(updated?.name, null);
    assert.equal(updated?.description, "d");
    assert.equal(updated?.updatedAt, 9);
    assert.equal(await s.updateWebhook("wh_missing", { updatedAt: 1 }), undefined);
    assert.equal(await s.resourceOwner(w.id), w.ownerId);
    assert.equal(await s.deleteWebhook(w.id), true);
    assert.equal(await s.resourceOwner(w.id), undefined);
  });

  withStore("a webhook keeps whether it may reach private addresses, and an update changes it", async (s) => {
    const open = webhook(unique("u"), { allowPrivate: true });
    const guarded = webhook(unique("u"));
    await s.insertWebhook(open);
    await s.insertWebhook(guarded);
    assert.equal((await s.getWebhook(open.id))?.allowPrivate, true);
    assert.equal((await s.getWebhook(guarded.id))?.allowPrivate, false);
    assert.equal((await s.updateWebhook(open.id, { name: "n", updatedAt: 2 }))?.allowPrivate, true);
    assert.equal(
      (await s.updateWebhook(open.id, { allowPrivate: false, updatedAt: 3 }))?.allowPrivate,
      false,
    );
    assert.equal((await s.getWebhook(open.id))?.allowPrivate, false);
  });

  withStore("a webhook read after a change, a rollback or a delete shows the stored row", async (s) => {
    const w = webhook(unique("u"), { name: "first" });
    await s.insertWebhook(w);
    assert.equal((await s.getWebhook(w.id))?.name, "first");
    await s.updateWebhook(w.id, { name: "second", updatedAt: 2 });
    assert.equal((await s.getWebhook(w.id))?.name, "second");
    await assert.rejects(
      s.transaction(async (tx) => {
        await tx.updateWebhook(w.id, { url: "https://example.com/rolled-back", updatedAt: 3 });
        assert.equal((await tx.getWebhook(w.id))?.url, "https://example.com/rolled-back");
        throw new Error("roll back");
      }),
    );
    assert.equal((await s.getWebhook(w.id))?.url, w.url);
    assert.equal(await s.deleteWebhook(w.id), true);
    assert.equal(await s.getWebhook(w.id), undefined);
  });

  withStore("the same subscription is stored once and deleted by its match", async (s) => {
    const owner = unique("u");
    const base = { ownerId: owner, emitterId: "dc_*", listenerId: "wh_x", eventName: "", createdAt: 1 };
    const a = await s.upsertSubscription({ id: unique("sub"), ...base });
    const b = await s.upsertSubscription({ id: unique("sub"), ...base });
    assert.equal(a.id, b.id);
    await s.upsertSubscription({ id: unique("sub"), ...base, eventName: "$errors" });
    const listed = await s.listSubscriptions([owner], { limit: 10 });
    assert.equal(listed.totalCount, 2);
    assert.deepEqual(
      listed.items.map((x) => x.eventName),
      ["$errors", ""],
      "newest first",
    );
    const older = await s.listSubscriptions([owner], { limit: 10, afterSeq: listed.items[0]?.seq });
    assert.deepEqual(
      older.items.map((x) => x.id),
      [a.id],
    );
    const removed = await s.deleteSubscriptions([owner], {
      emitterId: "dc_*",
      listenerId: "wh_x",
      eventName: "",
    });
    assert.deepEqual(
      removed.map((r) => r.id),
      [a.id],
    );
    assert.equal(await s.deleteSubscriptionsOf("wh_x"), 1);
    assert.deepEqual((await s.listSubscriptions([owner], { limit: 10 })).items, []);
  });

  withStore("auto-subscriptions are stored once per listener and channel", async (s) => {
    const owner = unique("u");
    const a = await s.upsertAutoSubscription({
      id: unique("asub"),
      ownerId: owner,
      listenerId: "wh_y",
      eventName: "$logs",
      createdAt: 1,
    });
    const b = await s.upsertAutoSubscription({
      id: unique("asub"),
      ownerId: owner,
      listenerId: "wh_y",
      eventName: "$logs",
      createdAt: 2,
    });
    assert.equal(a.id, b.id);
    assert.equal((await s.listAutoSubscriptions([owner])).length, 1);
  });

  withStore("usage counters add up per user and day", async (s) => {
    await s.addUsage("u_1", "2026-01-01", { invocations: 2, computeMs: 30, storedBytes: 700 });
    await s.addUsage("u_1", "2026-01-01", { invocations: 1, computeMs: 5, storedBytes: 11 });
    assert.deepEqual(await s.getUsage("u_1", "2026-01-01"), {
      invocations: 3,
      computeMs: 35,
      storedBytes: 711,
    });
    assert.deepEqual(await s.getUsage("u_1", "2026-01-02"), { invocations: 0, computeMs: 0, storedBytes: 0 });
  });

  withStore("a transaction commits all of its writes or none", async (s) => {
    const u1 = user();
    const u2 = user();
    await assert.rejects(
      s.transaction(async (tx) => {
        await tx.insertUser(u1);
        throw new Error("abort");
      }),
      /abort/,
    );
    assert.equal(await s.getUser(u1.id), undefined);
    await s.transaction(async (tx) => {
      await tx.insertUser(u1);
      await tx.insertUser(u2);
    });
    assert.equal(await s.countUsers(), 2);
  });

  withStore("operations outside a transaction wait for it instead of joining it", async (s) => {
    const u1 = user();
    const u2 = user();
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const tx = s
      .transaction(async (t) => {
        await t.insertUser(u1);
        await gate;
        throw new Error("rollback");
      })
      .catch(() => undefined);
    const outside = s.insertUser(u2);
    release();
    await tx;
    await outside;
    assert.equal(await s.getUser(u1.id), undefined);
    assert.deepEqual(await s.getUser(u2.id), u2);
  });

  withStore("events keep their channel, and an emitter's channels are listed", async (s) => {
    const base = {
      emitterId: "dc_chan",
      event: { a: 1 },
      indexedAtMs: 1,
      meta: { emit_id: "e", name: "", emitter_id: "dc_chan" },
    };
    await s.insertEvent({ ...base, channel: "", id: "1-0", idMs: 1, idSeq: 0 });
    await s.insertEvent({ ...base, channel: "b", id: "1-1", idMs: 1, idSeq: 1 });
    await s.insertEvent({ ...base, channel: "$logs", id: "1-2", idMs: 1, idSeq: 2 });
    assert.deepEqual(await s.listChannels("dc_chan"), ["", "$logs", "b"]);
    assert.deepEqual(await s.listChannels("dc_other"), []);
  });

  withStore(
    "one transaction of many events keeps the window, the clock and usage exact, and reads see them",
    async (s) => {
      const event = (n: number): EventRecord => ({
        emitterId: "dc_many",
        channel: "",
        id: `5-${n}`,
        idMs: 5,
        idSeq: n,
        indexedAtMs: 5,
        event: { n },
        meta: { emit_id: `e${n}`, name: "", emitter_id: "dc_many" },
      });
      const window = { keep: 100 };
      await s.transaction(async (tx) => {
        for (let n = 0; n < 130; n++) {
          await tx.insertEvent(event(n));
          await tx.putEmitterClock("dc_many", 5, n);
          await tx.addUsage("u_many", "2026-01-01", { invocations: 1, computeMs: 2, storedBytes: 3 });
        }
        // Reads inside the transaction see every write made so far.
        assert.deepEqual(await tx.getEmitterClock("dc_many"), { ms: 5, seq: 129 });
        assert.deepEqual(await tx.getUsage("u_many", "2026-01-01"), {
          invocations: 130,
          computeMs: 260,
          storedBytes: 390,
        });
        assert.equal((await tx.listEvents("dc_many", { channel: "", limit: 1, window })).totalCount, 100);
        await tx.insertEvent(event(130));
        await tx.addUsage("u_many", "2026-01-01", { invocations: 1, computeMs: 2, storedBytes: 3 });
      });
      const page = await s.listEvents("dc_many", { channel: "", limit: 100, window });
      assert.equal(page.totalCount, 100);
      assert.deepEqual(
        page.items.map((e) => e.idSeq),
        Array.from({ length: 100 }, (_, i) => 130 - i),
      );
      assert.deepEqual(await s.getUsage("u_many", "2026-01-01"), {
        invocations: 131,
        computeMs: 262,
        storedBytes: 393,
      });
      // A rolled-back transaction leaves none of them behind.
      await assert.rejects(
        s.transaction(async (tx) => {
          await tx.insertEvent(event(131));
          await tx.putEmitterClock("dc_many", 5, 131);
          await tx.addUsage("u_many", "2026-01-01", { invocations: 1, computeMs: 2, storedBytes: 3 });
          throw new Error("abort");
        }),
        /abort/,
      );
      assert.deepEqual(await s.getEmitterClock("dc_many"), { ms: 5, seq: 129 });
      assert.deepEqual(await s.getUsage("u_many", "2026-01-01"), {
        invocations: 131,
        computeMs: 262,
        storedBytes: 393,
      });
      assert.equal((await s.listEvents("dc_many", { channel: "", limit: 1 })).items[0]?.idSeq, 130);
    },
  );

  withStore("ping answers and close is idempotent", async (s) => {
    await s.ping();
    await s.close();
  });

  deliveryContract(withStore, unique);
  eventWindowContract(withStore, unique);
  deliveryHistoryContract(withStore, unique);
  eventSearchContract(withStore);
  sharedStateContract(withStore, unique, () => user());
  componentContract(withStore, unique);
}
