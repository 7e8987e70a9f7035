/**
 * The storage contract of what several nodes share through the store: the meta table, finding a
 * sealed secret, transaction locks, API rate-limit windows and quota reservations. Registered by
 * `storageContract`, so every driver runs it.
 */
import assert from "node:assert/strict";
import type { SourceRecord, User } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";

type WithStore = (title: string, fn: (s: Storage) => Promise<void>) => void;

export function sharedStateContract(
  withStore: WithStore,
  unique: (prefix: string) => string,
  /** A new user with unique names (contract.ts). */
  user: () => User,
): void {
  withStore("a meta key keeps the first value put", async (s) => {
    assert.equal(await s.getMeta("check"), undefined);
    assert.equal(await s.putMetaIfAbsent("check", "first"), "first");
    assert.equal(await s.putMetaIfAbsent("check", "second"), "first", "the earlier value is returned");
    assert.equal(await s.getMeta("check"), "first");
  });

  withStore("a sealed secret is found in a source's secret prop or a signing secret", async (s) => {
    assert.equal(await s.anySealedSecret(), undefined, "an empty store has none");
    const owner = unique("u");
    const source: SourceRecord = {
      id: unique("dc"),
      ownerId: owner,
      createdBy: owner,
      componentId: "sc_x",
      name: "s",
      nameSlug: unique("slug"),
      active: true,
      props: { plain: "not sealed", token: { $sealed: "v1.iv.tag.data" } },
      endpointId: null,
      createdAt: 1,
      updatedAt: 1,
    };
    await s.insertSource({ ...source, id: unique("dc"), nameSlug: unique("slug"), props: { plain: "x" } });
    assert.equal(await s.anySealedSecret(), undefined, "plain props hold none");
    await s.insertSource(source);
    assert.equal(await s.anySealedSecret(), "v1.iv.tag.data");
    await s.insertWebhook({
      id: unique("wh"),
      ownerId: owner,
      createdBy: owner,
      name: null,
      description: null,
      url: "https://example.com/",
      active: true,
      signingSecretSealed: "v1.webhook",
      allowPrivate: false,
      createdAt: 1,
      updatedAt: 1,
    });
    assert.match((await s.anySealedSecret()) ?? "", /^v1\./);
  });

  withStore("a transaction lock makes transactions that check, then write, take turns", async (s) => {
    // Each transaction creates a user only if none exists, with a pause between the check and the
    // write: without the lock, PostgreSQL's concurrent transactions would both see none.
    const once = () =>
      s.transaction(async (tx) => {
        await tx.acquireTransactionLock("first-user");
        if ((await tx.countUsers()) > 0) return false;
        await new Promise((resolve) => setTimeout(resolve, 50));
        await tx.insertUser(user());
        return true;
      });
    const created = await Promise.all([once(), once(), once()]);
    assert.deepEqual(created.filter(Boolean), [true], "exactly one transaction created the user");
    assert.equal(await s.countUsers(), 1);
  });

  withStore("rate-limit hits of a key count in one window and start over after it", async (s) => {
    const hits = await Promise.all(
      Array.from({ length: 10 }, () => s.countRateLimitHit("k:a", 1000, 60_000)),
    );
    assert.deepEqual(
      hits.map((h) => h.count).sort((a, b) => a - b),
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
      "concurrent hits each get their own count",
    );
    assert.ok(hits.every((h) => h.windowStartMs === 1000));
    assert.deepEqual(await s.countRateLimitHit("k:b", 30_000, 60_000), { count: 1, windowStartMs: 30_000 });
    assert.deepEqual(await s.countRateLimitHit("k:a", 60_999, 60_000), { count: 11, windowStartMs: 1000 });
    assert.deepEqual(await s.countRateLimitHit("k:a", 61_000, 60_000), { count: 1, windowStartMs: 61_000 });
    // A window of an hour (a backfill's) beside the minutes; the prune forgets what ended, by its own end.
    assert.deepEqual(await s.countRateLimitHit("k:h", 1000, 3_600_000), { count: 1, windowStartMs: 1000 });
    assert.equal(await s.pruneRateLimits(89_999), 0, "no window ended yet");
    assert.equal(await s.pruneRateLimits(90_000), 1, "k:b's minute ended at 90 s");
    assert.deepEqual(await s.countRateLimitHit("k:b", 90_000, 60_000), { count: 1, windowStartMs: 90_000 });
    assert.deepEqual(await s.countRateLimitHit("k:h", 3_000_000, 3_600_000), {
      count: 2,
      windowStartMs: 1000,
    });
    assert.equal(await s.pruneRateLimits(3_600_999), 2, "k:a's and k:b's minutes, not k:h's hour");
    assert.equal(await s.pruneRateLimits(3_601_000), 1, "k:h's hour ended");
  });

  withStore("an invocation is reserved only while the day's usage is below every limit", async (s) => {
    const id = unique("u");
    const limits = { invocations: 5, computeMs: 1000, storedBytes: 4096 };
    const asked = await Promise.all(
      Array.from({ length: 12 }, () => s.reserveInvocation(id, "2024-01-01", limits)),
    );
    assert.equal(asked.filter(Boolean).length, 5, "concurrent reservations stop at the limit");
    assert.deepEqual(await s.getUsage(id, "2024-01-01"), { invocations: 5, computeMs: 0, storedBytes: 0 });
    assert.equal(await s.reserveInvocation(id, "2024-01-02", limits), true, "a new day");
    await s.addUsage(id, "2024-01-02", { invocations: 0, computeMs: 1000, storedBytes: 0 });
    assert.equal(await s.reserveInvocation(id, "2024-01-02", limits), false, "compute time used up");
    assert.equal(
      await s.reserveInvocation(unique("u"), "2024-01-01", { invocations: 0, computeMs: 1, storedBytes: 1 }),
      false,
    );
    assert.deepEqual(await s.getUsage(id, "2024-01-02"), { invocations: 1, computeMs: 1000, storedBytes: 0 });
    // Stored bytes: one byte under the limit lets one more run; at the limit, none.
    const bytes = unique("u");
    await s.addUsage(bytes, "2024-01-01", { invocations: 0, computeMs: 0, storedBytes: 4095 });
    assert.equal(await s.reserveInvocation(bytes, "2024-01-01", limits), true, "below the stored bytes");
    await s.addUsage(bytes, "2024-01-01", { invocations: 0, computeMs: 0, storedBytes: 1 });
    assert.equal(await s.reserveInvocation(bytes, "2024-01-01", limits), false, "stored bytes used up");
    assert.equal(
      await s.reserveInvocation(unique("u"), "2024-01-01", { invocations: 1, computeMs: 1, storedBytes: 0 }),
      false,
      "a zero limit refuses the day's first invocation",
    );
  });
}
