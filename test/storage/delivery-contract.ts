/**
 * The storage contract of guaranteed delivery: external workflows, subscription matching and the
 * deliveries outbox (claims, per-subscription order, attempts, redelivery, pruning). Registered by
 * `storageContract`, so every driver runs it.
 */
import assert from "node:assert/strict";
import { requeueFailed } from "../../src/delivery/replay.ts";
import type { Delivery, SourceRecord, Webhook, Workflow } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";

export type WithStore = (title: string, fn: (s: Storage) => Promise<void>) => void;

/** Rows of the delivery contracts: workflows, webhooks, sources and deliveries with unique IDs. */
export function deliveryFixtures(unique: (prefix: string) => string) {
  const workflow = (ownerId: string, overrides: Partial<Workflow> = {}): Workflow => ({
    id: unique("p"),
    ownerId,
    createdBy: ownerId,
    name: "flow",
    url: null,
    signingSecretSealed: "sealed",
    createdAt: 1,
    updatedAt: 1,
    ...overrides,
  });

  const webhook = (ownerId: string, active = true): Webhook => ({
    id: unique("wh"),
    ownerId,
    createdBy: ownerId,
    name: null,
    description: null,
    url: "https://example.com/",
    active,
    signingSecretSealed: "sealed",
    allowPrivate: false,
    createdAt: 1,
    updatedAt: 1,
  });

  const source = (ownerId: string, active = true): SourceRecord => ({
    id: unique("dc"),
    ownerId,
    createdBy: ownerId,
    componentId: "sc_x",
    name: "s",
    nameSlug: unique("slug"),
    active,
    props: {},
    endpointId: null,
    createdAt: 1,
    updatedAt: 1,
  });

  const delivery = (listenerId: string, overrides: Partial<Delivery> = {}): Delivery => ({
    id: unique("del"),
    ownerId: "u_owner",
    subscriptionId: "sub_1",
    emitterId: "dc_emitter",
    eventId: "1000-0",
    channel: "",
    listenerId,
    listenerKind: listenerId.startsWith("dc_")
      ? "source"
      : listenerId.startsWith("p_")
        ? "workflow"
        : "webhook",
    event: { n: 1, nested: { ok: true } },
    meta: { emit_id: "e", name: "", emitter_id: "dc_emitter", summary: "one" },
    indexedAtMs: 1000,
    hops: 1,
    status: "pending",
    attempts: 0,
    roundAttempts: 0,
    nextAttemptMs: 1000,
    lastStatusCode: null,
    lastError: null,
    lastDurationMs: null,
    claimedBy: null,
    createdMs: 1000,
    updatedMs: 1000,
    ...overrides,
  });
  return { workflow, webhook, source, delivery };
}

export function deliveryContract(withStore: WithStore, unique: (prefix: string) => string): void {
  const { workflow, webhook, source, delivery } = deliveryFixtures(unique);

  /** Settles a delivery as failed for good, last updated at `updatedMs`. */
  const failAt = (s: Storage, id: string, updatedMs: number) =>
    s.updateDelivery(id, {
      status: "failed",
      attempts: 1,
      roundAttempts: 1,
      nextAttemptMs: null,
      lastStatusCode: 500,
      lastError: "HTTP 500",
      lastDurationMs: 1,
      updatedMs,
    });

  const claim = (
    s: Storage,
    nowMs: number,
    extra: {
      limit?: number;
      perListener?: number;
      except?: string[];
      /** The claiming node (default `run-1`). */
      token?: string;
      leaseUntilMs?: number;
    } = {},
  ) =>
    s.claimDeliveries({
      nowMs,
      limit: extra.limit ?? 100,
      perListener: extra.perListener ?? 100,
      claimToken: extra.token ?? "run-1",
      exceptListeners: extra.except ?? [],
      ...(extra.leaseUntilMs === undefined ? {} : { leaseUntilMs: extra.leaseUntilMs }),
    });

  const ids = (list: Array<{ id: string }>) => list.map((d) => d.id);

  withStore("a workflow is stored, listed newest first, owned, and deleted", async (s) => {
    const owner = unique("u");
    const a = workflow(owner, { name: "a", url: "https://example.com/a" });
    const b = workflow(owner, { name: "b" });
    await s.insertWorkflow(a);
    await s.insertWorkflow(b);
    await s.insertWorkflow(workflow(unique("u")));
    assert.deepEqual(await s.getWorkflow(a.id), a);
    const page = await s.listWorkflows([owner], { limit: 1 });
    assert.equal(page.totalCount, 2);
    assert.deepEqual(
      page.items.map((w) => w.name),
      ["b"],
    );
    const next = await s.listWorkflows([owner], { limit: 1, afterSeq: page.items[0]!.seq });
    assert.deepEqual(
      next.items.map((w) => w.name),
      ["a"],
    );
    assert.equal(await s.resourceOwner(a.id), owner);
    assert.equal(await s.deleteWorkflow(a.id), true);
    assert.equal(await s.deleteWorkflow(a.id), false);
    assert.equal(await s.getWorkflow(a.id), undefined);
    assert.equal(await s.resourceOwner(a.id), undefined);
  });

  withStore(
    "subscriptions match an emitter exactly, or by the glob of its kind held by its owner",
    async (s) => {
      const owner = unique("u");
      const other = unique("u");
      const emitter = unique("dc");
      const sub = (ownerId: string, emitterId: string, eventName = "", listenerId = unique("wh")) =>
        s.upsertSubscription({ id: unique("sub"), ownerId, emitterId, listenerId, eventName, createdAt: 1 });
      const exact = await sub(other, emitter); // another tenant may name it (it could see it when subscribing)
      const glob = await sub(owner, "dc_*");
      await sub(other, "dc_*"); // someone else's glob never covers this owner's sources
      await sub(owner, "p_*"); // the other kind
      await sub(owner, emitter, "$errors"); // the other channel
      await sub(owner, unique("dc")); // another emitter
      const found = await s.matchSubscriptions(emitter, owner, "");
      assert.deepEqual(ids(found).sort(), [exact.id, glob.id].sort());
      assert.deepEqual(ids(await s.matchSubscriptions(emitter, undefined, "")), [exact.id]);
      assert.equal((await s.matchSubscriptions(emitter, owner, "$errors")).length, 1);
      const flow = unique("p");
      assert.equal(
        (await s.matchSubscriptions(flow, owner, "")).length,
        1,
        "p_* covers the owner's workflows",
      );
    },
  );

  withStore("a source's owner is known until the source is deleted or its insert rolled back", async (s) => {
    const owner = unique("u");
    const src = source(owner);
    assert.equal(await s.resourceOwner(src.id), undefined);
    await assert.rejects(
      s.transaction(async (tx) => {
        await tx.insertSource(src);
        assert.equal(await tx.resourceOwner(src.id), owner);
        throw new Error("roll back");
      }),
    );
    assert.equal(await s.resourceOwner(src.id), undefined, "the rolled-back source has no owner");
    await s.insertSource(src);
    assert.equal(await s.resourceOwner(src.id), owner);
    assert.equal(await s.resourceOwner(src.id), owner);
    assert.equal(await s.deleteSource(src.id), true);
    assert.equal(await s.resourceOwner(src.id), undefined);
  });

  withStore("an endpoint's source read during a transaction never sees its uncommitted change", async (s) => {
    const owner = unique("u");
    const src = { ...source(owner), endpointId: unique("e").replace(/[^a-z0-9]/g, "") };
    await s.insertSource(src);
    assert.equal((await s.getSourceByEndpoint(src.endpointId))?.active, true);
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tx = s.transaction(async (t) => {
      await t.updateSource(src.id, { active: false, updatedAt: 2 });
      // The transaction reads its own change (which a driver may cache), then rolls back.
      assert.equal((await t.getSourceByEndpoint(src.endpointId!))?.active, false);
      await held;
      throw new Error("roll back");
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const read = s.getSourceByEndpoint(src.endpointId);
    release();
    await assert.rejects(tx, /roll back/);
    assert.equal((await read)?.active, true, "the rolled-back change was never visible");
  });

  withStore("matches follow every subscription change, also after a rollback", async (s) => {
    const owner = unique("u");
    const emitter = unique("dc");
    const listener = unique("wh");
    const match = async () => ids(await s.matchSubscriptions(emitter, owner, ""));
    assert.deepEqual(await match(), []);
    const base = { ownerId: owner, listenerId: listener, eventName: "", createdAt: 1 };
    const exact = await s.upsertSubscription({ id: unique("sub"), emitterId: emitter, ...base });
    assert.deepEqual(await match(), [exact.id]);
    const glob = await s.upsertSubscription({ id: unique("sub"), emitterId: "dc_*", ...base });
    assert.deepEqual((await match()).sort(), [exact.id, glob.id].sort());
    await s.deleteSubscriptions([owner], { emitterId: "dc_*", listenerId: listener, eventName: "" });
    assert.deepEqual(await match(), [exact.id]);
    await assert.rejects(
      s.transaction(async (tx) => {
        await tx.upsertSubscription({ id: unique("sub"), emitterId: "dc_*", ...base });
        assert.equal((await tx.matchSubscriptions(emitter, owner, "")).length, 2);
        throw new Error("roll back");
      }),
    );
    assert.deepEqual(await match(), [exact.id], "the rolled-back subscription is not matched");
    assert.equal(await s.deleteSubscriptionsOf(listener), 1);
    assert.deepEqual(await match(), []);
  });

  withStore("deliveries keep their own copy of the event and are claimed once, when due", async (s) => {
    const hook = webhook(unique("u"));
    await s.insertWebhook(hook);
    const due = delivery(hook.id, { nextAttemptMs: 1000 });
    const later = delivery(hook.id, { nextAttemptMs: 5000 });
    await s.insertDeliveries([due, later]);
    assert.deepEqual(await s.getDelivery(due.id), due);
    const first = await claim(s, 2000);
    assert.deepEqual(ids(first), [due.id]);
    assert.equal(first[0]!.claimedBy, "run-1");
    assert.deepEqual(first[0]!.event, due.event);
    assert.deepEqual(await claim(s, 2000), [], "a claimed delivery is not handed out twice");
    assert.equal(await s.nextDeliveryMs(), 5000, "the soonest unclaimed one");
    assert.deepEqual(
      await s.countPendingDeliveries(2000),
      { pending: 2, due: 1 },
      "a claimed one is still pending",
    );
    assert.deepEqual(await s.countPendingDeliveries(5000), { pending: 2, due: 2 });
    await s.releaseDeliveries([due.id], "another-run");
    assert.deepEqual(await claim(s, 2000), [], "only the claim's holder releases it");
    await s.releaseDeliveries([due.id], "run-1");
    assert.deepEqual(ids(await claim(s, 2000)), [due.id], "released, it can be claimed again");
    assert.deepEqual(ids(await claim(s, 6000)), [later.id]);
    assert.equal(await s.resetDeliveryClaims("run-1"), 2);
    assert.equal(await s.resetDeliveryClaims("run-1"), 0);
    assert.deepEqual(ids(await claim(s, 6000, { limit: 1 })), [due.id], "soonest first, up to the limit");
  });

  withStore("a delivery keeps the trace its event was stored under, for each claim of it", async (s) => {
    const hook = webhook(unique("u"));
    await s.insertWebhook(hook);
    const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 vendor=a1,other=b2";
    const traced = delivery(hook.id, { nextAttemptMs: 1000, trace });
    const plain = delivery(hook.id, { nextAttemptMs: 1000 });
    await s.insertDeliveries([traced, plain]);
    assert.deepEqual(await s.getDelivery(traced.id), traced);
    assert.deepEqual(await s.getDelivery(plain.id), plain, "one routed with traces off has none");
    const claimed = await claim(s, 2000);
    assert.equal(claimed.find((d) => d.id === traced.id)?.trace, trace);
    assert.equal(claimed.find((d) => d.id === plain.id)?.trace, undefined);
  });

  withStore(
    "claims leave out inactive listeners, busy listeners, and take a bounded number per listener",
    async (s) => {
      const owner = unique("u");
      const active = webhook(owner);
      const inactive = webhook(owner, false);
      const paused = source(owner, false);
      await s.insertWebhook(active);
      await s.insertWebhook(inactive);
      await s.insertSource(paused);
      const a = [delivery(active.id), delivery(active.id), delivery(active.id)];
      await s.insertDeliveries([
        ...a,
        delivery(inactive.id),
        delivery(paused.id, { subscriptionId: "sub_p" }),
      ]);
      assert.deepEqual(await claim(s, 2000, { except: [active.id] }), []);
      assert.deepEqual(ids(await claim(s, 2000, { perListener: 2 })), ids(a.slice(0, 2)));
      await s.resetDeliveryClaims("run-1");
      await s.updateWebhook(inactive.id, { active: true, updatedAt: 2 });
      assert.equal((await claim(s, 2000)).length, 3, "made active, its parked delivery waits to be unparked");
      await s.resetDeliveryClaims("run-1");
      assert.deepEqual(await s.listUnparkableListeners(), [inactive.id]);
      assert.equal(await s.unparkDeliveries(inactive.id, 2000, 10), 1);
      const claimed = await claim(s, 2000);
      assert.equal(claimed.length, 4, "reactivated and unparked, the waiting delivery goes out");
    },
  );

  withStore(
    "an inactive listener's due deliveries are parked in batches, and unparked in batches once it is not, oldest first",
    async (s) => {
      const owner = unique("u");
      const hook = webhook(owner);
      const paused = source(owner);
      const gone = webhook(owner);
      for (const w of [hook, gone]) await s.insertWebhook(w);
      await s.insertSource(paused);
      const made = Array.from({ length: 7 }, (_, i) => delivery(hook.id, { nextAttemptMs: 1000 + i }));
      const toPaused = delivery(paused.id, { subscriptionId: "sub_p" });
      const toGone = delivery(gone.id);
      await s.insertDeliveries([...made, toPaused, toGone]);
      // One of the hook's in flight when it is made inactive: kept by its claimer, parked when released.
      const [inFlight] = await claim(s, 1000, { limit: 1 });
      assert.equal(inFlight?.id, made[0]!.id);
      assert.deepEqual(await s.parkDeliveries(hook.id, 10), { parked: 0 }, "an active listener's stay due");
      await s.updateWebhook(hook.id, { active: false, updatedAt: 2 });
      await s.updateSource(paused.id, { active: false, updatedAt: 2 });
      await s.updateWebhook(gone.id, { active: false, updatedAt: 2 });
      assert.equal(
        (await s.getDelivery(made[1]!.id))?.nextAttemptMs,
        1001,
        "made inactive, nothing parked yet",
      );
      // In batches, soonest due first, each from where the last one stopped.
      const first = await s.parkDeliveries(hook.id, 4);
      assert.equal(first.parked, 4);
      const dues = await Promise.all(made.map(async (d) => (await s.getDelivery(d.id))?.nextAttemptMs));
      assert.deepEqual(
        dues,
        [1000, null, null, null, null, 1005, 1006],
        "the claimed one is left to its claimer",
      );
      const second = await s.parkDeliveries(hook.id, 4, first.last);
      assert.equal(second.parked, 2);
      assert.deepEqual(await s.parkDeliveries(hook.id, 4, second.last), { parked: 0 });
      assert.equal((await s.parkDeliveries(paused.id, 4)).parked, 1);
      assert.equal((await s.parkDeliveries(gone.id, 4)).parked, 1);
      await s.releaseDeliveries([inFlight!.id], "run-1");
      for (const d of [...made, toPaused, toGone])
        assert.equal((await s.getDelivery(d.id))?.nextAttemptMs, null, d.id);
      assert.deepEqual(await claim(s, 5000), [], "nothing parked is claimed");
      assert.deepEqual(await s.listUnparkableListeners(), [], "every listener with parked rows is inactive");

      // Made active again, and deleted: both have their parked rows unparked; the paused source does not.
      await s.updateWebhook(hook.id, { active: true, updatedAt: 3 });
      await s.deleteWebhook(gone.id);
      assert.deepEqual([...(await s.listUnparkableListeners())].sort(), [gone.id, hook.id].sort());
      assert.equal(await s.unparkDeliveries(paused.id, 3000, 10), 0, "an inactive listener's stay parked");
      assert.equal(await s.unparkDeliveries(hook.id, 3000, 3), 3);
      const firstBatch = await Promise.all(made.map(async (d) => (await s.getDelivery(d.id))?.nextAttemptMs));
      assert.deepEqual(firstBatch, [3000, 3000, 3000, null, null, null, null], "the oldest first");
      assert.equal(await s.unparkDeliveries(hook.id, 3000, 3), 3);
      assert.equal(await s.unparkDeliveries(hook.id, 3000, 3), 1);
      assert.equal(await s.unparkDeliveries(hook.id, 3000, 3), 0);
      assert.equal(await s.unparkDeliveries(gone.id, 3000, 3), 1);
      assert.deepEqual(await s.listUnparkableListeners(), []);
      const claimed = ids(await claim(s, 3000, { token: "run-2" }));
      assert.deepEqual(
        [...claimed].sort(),
        [...made, toGone].map((d) => d.id).sort(),
        "the one released while inactive too",
      );
      await s.releaseDeliveries([made[1]!.id], "run-2");
      assert.equal(
        (await s.getDelivery(made[1]!.id))?.nextAttemptMs,
        3000,
        "released while active, still due",
      );
      assert.equal((await s.getDelivery(toPaused.id))?.nextAttemptMs, null);

      // Made inactive again between two batches: the rest stays parked.
      await s.resetDeliveryClaims("run-2");
      await s.updateWebhook(hook.id, { active: false, updatedAt: 4 });
      assert.equal((await s.parkDeliveries(hook.id, 10)).parked, 7);
      await s.updateWebhook(hook.id, { active: true, updatedAt: 5 });
      assert.equal((await s.parkDeliveries(hook.id, 10)).parked, 0, "made active, nothing is parked");
      assert.equal(await s.unparkDeliveries(hook.id, 4000, 2), 2);
      await s.updateWebhook(hook.id, { active: false, updatedAt: 6 });
      assert.equal(await s.unparkDeliveries(hook.id, 4000, 2), 0);
      assert.equal((await s.parkDeliveries(hook.id, 10)).parked, 2);
      assert.deepEqual(ids(await claim(s, 5000, { token: "run-2" })), [toGone.id], "only the deleted one's");
    },
  );

  withStore(
    "a listener source's pending deliveries are listed newest first, counted and paged",
    async (s) => {
      const owner = unique("u");
      const listener = source(owner);
      const other = source(owner);
      await s.insertSource(listener);
      await s.insertSource(other);
      const made = Array.from({ length: 5 }, (_, i) =>
        delivery(listener.id, { subscriptionId: `sub_${i % 2}` }),
      );
      await s.insertDeliveries([...made, delivery(other.id, { subscriptionId: "sub_o" })]);
      // One succeeded, one failed for good, one parked (its source made inactive and active again).
      await s.updateDelivery(made[1]!.id, {
        status: "succeeded",
        attempts: 1,
        roundAttempts: 1,
        nextAttemptMs: null,
        lastStatusCode: null,
        lastError: null,
        lastDurationMs: 1,
        updatedMs: 2000,
      });
      await failAt(s, made[3]!.id, 2000);
      await s.updateSource(listener.id, { active: false, updatedAt: 2 });
      await s.parkDeliveries(listener.id, 10);
      await s.updateSource(listener.id, { active: true, updatedAt: 3 });
      const page = await s.listDeliveries(listener.id, { limit: 2 }, "pending");
      assert.equal(page.totalCount, 3);
      assert.deepEqual(ids(page.items), [made[4]!.id, made[2]!.id]);
      const older = await s.listDeliveries(
        listener.id,
        { limit: 2, afterSeq: page.items[1]!.seq },
        "pending",
      );
      assert.deepEqual(ids(older.items), [made[0]!.id]);
      assert.equal(older.items[0]!.nextAttemptMs, null, "parked, and listed");
      assert.deepEqual(ids((await s.listDeliveries(listener.id, { limit: 10 }, "failed")).items), [
        made[3]!.id,
      ]);
    },
  );

  withStore("two nodes claiming at once never get the same delivery", async (s) => {
    const owner = unique("u");
    const hooks = [webhook(owner), webhook(owner), webhook(owner)];
    for (const h of hooks) await s.insertWebhook(h);
    const made = Array.from({ length: 60 }, (_, i) =>
      delivery(hooks[i % 3]!.id, { nextAttemptMs: 1000 + i }),
    );
    await s.insertDeliveries(made);
    // Twelve claims at once, alternating nodes, each taking a few; then more until none is left (rows a
    // concurrent claim looked at are skipped, not waited for, so a round may come back short).
    const rounds: Array<{ token: string; got: Delivery[] }> = [];
    for (let left = made.length; left > 0; ) {
      const tokens = Array.from({ length: 12 }, (_, i) => (i % 2 ? "node-b" : "node-a"));
      const got = await Promise.all(tokens.map((token) => claim(s, 5000, { limit: 5, token })));
      for (const [i, token] of tokens.entries()) rounds.push({ token, got: got[i]! });
      const n = got.flat().length;
      assert.ok(n > 0, "claims make progress");
      left -= n;
    }
    const taken = rounds.flatMap((r) => r.got);
    assert.equal(new Set(ids(taken)).size, taken.length, "no delivery handed to two claims");
    assert.deepEqual(ids(taken).sort(), ids(made).sort());
    for (const r of rounds) for (const d of r.got) assert.equal(d.claimedBy, r.token);
    assert.deepEqual(await claim(s, 5000, { token: "node-c" }), [], "nothing is left for a third node");
  });

  withStore("a node's reset releases its own claims and leaves another node's", async (s) => {
    const hook = webhook(unique("u"));
    await s.insertWebhook(hook);
    const made = [1, 2, 3, 4].map((i) => delivery(hook.id, { nextAttemptMs: 1000 + i }));
    await s.insertDeliveries(made);
    const a = await claim(s, 2000, { limit: 2, token: "node-a" });
    const b = await claim(s, 2000, { limit: 2, token: "node-b" });
    assert.deepEqual(ids([...a, ...b]), ids(made));
    assert.equal(await s.resetDeliveryClaims("node-a"), 2, "node A restarted: its own claims");
    assert.equal(await s.resetDeliveryClaims("node-a"), 0);
    assert.deepEqual(ids(await claim(s, 2000, { token: "node-c" })), ids(a), "B's claims stay B's");
    assert.equal((await s.getDelivery(made[3]!.id))?.claimedBy, "node-b");
  });

  withStore("a claim whose lease ran out can be taken by another node; a renewed one cannot", async (s) => {
    const hook = webhook(unique("u"));
    await s.insertWebhook(hook);
    const [lapsed, renewed] = [delivery(hook.id), delivery(hook.id)];
    await s.insertDeliveries([lapsed, renewed]);
    assert.deepEqual(ids(await claim(s, 2000, { token: "node-a", leaseUntilMs: 5000, limit: 1 })), [
      lapsed.id,
    ]);
    assert.deepEqual(ids(await claim(s, 2000, { token: "node-b", leaseUntilMs: 5000 })), [renewed.id]);
    assert.deepEqual(await claim(s, 4999, { token: "node-c" }), [], "both leases are live");
    // Node B keeps working and renews what it works on; node A died and does not.
    assert.equal(await s.renewDeliveryClaims("node-b", 20_000, []), 0, "nothing named, nothing renewed");
    assert.equal(await s.renewDeliveryClaims("node-b", 20_000, [renewed.id, lapsed.id]), 1, "only its own");
    const taken = await claim(s, 5000, { token: "node-c", leaseUntilMs: 9000 });
    assert.deepEqual(ids(taken), [lapsed.id], "the dead node's delivery, and only it");
    assert.equal(taken[0]!.claimedBy, "node-c");
    assert.equal(await s.renewDeliveryClaims("node-a", 30_000, [lapsed.id]), 0, "A lost its claim for good");
    assert.equal((await s.getDelivery(renewed.id))?.claimedBy, "node-b");
  });

  withStore("other nodes' live claims count against the per-listener limit", async (s) => {
    const owner = unique("u");
    const [busy, calm] = [webhook(owner), webhook(owner)];
    await s.insertWebhook(busy);
    await s.insertWebhook(calm);
    await s.insertDeliveries([
      ...Array.from({ length: 6 }, (_, i) => delivery(busy.id, { nextAttemptMs: 1000 + i })),
      delivery(calm.id, { nextAttemptMs: 1100 }),
    ]);
    const lease = { leaseUntilMs: 5000 };
    const a = await claim(s, 2000, { token: "node-a", perListener: 3, ...lease });
    assert.equal(a.filter((d) => d.listenerId === busy.id).length, 3);
    const b = await claim(s, 2000, { token: "node-b", perListener: 3, ...lease });
    assert.deepEqual(ids(b), [], "A holds the busy listener's 3; the calm one's went to A too");
    assert.equal((await claim(s, 2000, { token: "node-b", perListener: 4, ...lease })).length, 1);
    // Once the leases ran out (A died), A's rows count no more and may be taken.
    const later = await claim(s, 6000, { token: "node-b", perListener: 4 });
    assert.equal(later.filter((d) => d.listenerId === busy.id).length, 4);
    assert.equal(later.filter((d) => d.listenerId === calm.id).length, 1);
  });

  withStore("a source listener gets its subscription's deliveries in order, one at a time", async (s) => {
    const listener = source(unique("u"));
    await s.insertSource(listener);
    const [one, two] = [delivery(listener.id), delivery(listener.id)];
    const other = delivery(listener.id, { subscriptionId: "sub_2" });
    await s.insertDeliveries([one, two, other]);
    assert.deepEqual(ids(await claim(s, 2000)), [one.id, other.id]);
    assert.deepEqual(await claim(s, 2000), [], "the second waits while the first is in flight");
    // The first fails and waits for a retry: the second still waits behind it.
    const retry = { status: "pending" as const, attempts: 1, roundAttempts: 1, nextAttemptMs: 9000 };
    const patch = { ...retry, lastStatusCode: null, lastError: "boom", lastDurationMs: 5, updatedMs: 2000 };
    assert.equal(await s.updateDelivery(one.id, patch), true);
    assert.deepEqual(await claim(s, 3000), []);
    assert.deepEqual(ids(await claim(s, 9000)), [one.id]);
    await s.updateDelivery(one.id, { ...patch, status: "succeeded", attempts: 2, nextAttemptMs: null });
    assert.deepEqual(ids(await claim(s, 9000)), [two.id]);
  });

  withStore("a settlement stores the result and its attempt, in or out of a transaction", async (s) => {
    const hook = webhook(unique("u"));
    await s.insertWebhook(hook);
    const [one, two] = [delivery(hook.id), delivery(hook.id)];
    await s.insertDeliveries([one, two]);
    assert.equal((await claim(s, 2000)).length, 2);
    const done = {
      status: "succeeded" as const,
      attempts: 1,
      roundAttempts: 1,
      nextAttemptMs: null,
      lastStatusCode: 200,
      lastError: null,
      lastDurationMs: 4,
      updatedMs: 2000,
    };
    const attempt = (deliveryId: string) => ({
      deliveryId,
      n: 1,
      startedMs: 1996,
      durationMs: 4,
      statusCode: 200,
      error: null,
      response: "it's ok",
      outcome: "succeeded" as const,
    });
    await s.settleDelivery(one.id, done, attempt(one.id));
    await s.transaction(async (tx) => {
      await tx.settleDelivery(two.id, done, attempt(two.id));
      // A delivery no longer there stays absent, and no attempt is stored for it.
      await tx.settleDelivery("del_missing", done, attempt("del_missing"));
    });
    for (const d of [one, two]) {
      const stored = await s.getDelivery(d.id);
      assert.equal(stored?.status, "succeeded");
      assert.equal(stored?.lastStatusCode, 200);
      assert.equal(stored?.claimedBy, null, "the claim is released");
    }
    assert.equal(await s.getDelivery("del_missing"), undefined);
    const attempts = await s.listDeliveryAttempts([one.id, two.id, "del_missing"]);
    assert.deepEqual(
      attempts.map((a) => [a.deliveryId, a.response]),
      [one.id, two.id].sort().map((id) => [id, "it's ok"]),
    );
  });

  withStore(
    "a group commit's outbox writes are seen inside it, kept in order, and dropped with a rollback",
    async (s) => {
      const hook = webhook(unique("u"));
      const parked = webhook(unique("u"), false);
      await s.insertWebhook(hook);
      await s.insertWebhook(parked);
      // 85 rows: more than one multi-row statement of each size the driver may use.
      const made = Array.from({ length: 85 }, (_, i) => delivery(hook.id, { createdMs: 1000 + i }));
      const toParked = delivery(parked.id);
      const retry = (deliveryId: string, n: number) => ({
        deliveryId,
        n,
        startedMs: 2000,
        durationMs: 3,
        statusCode: 503,
        error: "HTTP 503",
        response: "busy",
        outcome: "retry" as const,
      });
      const patch = {
        status: "pending" as const,
        attempts: 1,
        roundAttempts: 1,
        nextAttemptMs: 9000,
        lastStatusCode: 503,
        lastError: "HTTP 503",
        lastDurationMs: 3,
        updatedMs: 2000,
      };
      await s.transaction(async (tx) => {
        await tx.insertDeliveries(made.slice(0, 40));
        await tx.insertDeliveries([...made.slice(40), toParked]);
        // Read inside the transaction: the held inserts are made first, in routing order.
        const page = await tx.listDeliveries(hook.id, { limit: 100 });
        assert.deepEqual(
          page.items.map((d) => d.id),
          made.map((d) => d.id).reverse(),
        );
        for (const [i, d] of made.slice(0, 70).entries())
          await tx.settleDelivery(d.id, patch, retry(d.id, i));
        await tx.settleDelivery(toParked.id, patch, retry(toParked.id, 1));
        const settled = await tx.getDelivery(made[69]!.id);
        assert.equal(
          settled?.lastError,
          "HTTP 503",
          "a read inside the transaction sees the held settlement",
        );
      });
      const after = await s.listDeliveries(hook.id, { limit: 100 }, "pending");
      assert.equal(after.items.length, 85);
      assert.equal(after.items.filter((d) => d.attempts === 1 && d.nextAttemptMs === 9000).length, 70);
      assert.equal(
        (await s.getDelivery(toParked.id))?.nextAttemptMs,
        null,
        "an inactive listener's stays parked",
      );
      const attempts = await s.listDeliveryAttempts(made.map((d) => d.id));
      assert.equal(attempts.length, 70);
      assert.ok(attempts.every((a) => a.response === "busy" && a.outcome === "retry"));

      const dropped = delivery(hook.id);
      await assert.rejects(
        s.transaction(async (tx) => {
          await tx.insertDeliveries([dropped]);
          await tx.settleDelivery(
            made[80]!.id,
            { ...patch, status: "succeeded", nextAttemptMs: null },
            retry(made[80]!.id, 9),
          );
          throw new Error("rolled back");
        }),
        /rolled back/,
      );
      assert.equal(await s.getDelivery(dropped.id), undefined);
      assert.equal((await s.getDelivery(made[80]!.id))?.status, "pending");
      assert.equal((await s.listDeliveryAttempts([made[80]!.id])).length, 0);
    },
  );

  withStore(
    "attempts are recorded, deliveries listed newest first by status, and failed ones requeued",
    async (s) => {
      const listener = unique("wh");
      const made = [1, 2, 3].map((i) => delivery(listener, { createdMs: i * 1000 }));
      await s.insertDeliveries(made);
      await s.insertDeliveries([delivery(unique("wh"))]);
      const fail = { status: "failed" as const, attempts: 1, roundAttempts: 1, nextAttemptMs: null };
      for (const d of made.slice(0, 2)) {
        await s.updateDelivery(d.id, {
          ...fail,
          lastStatusCode: 400,
          lastError: "HTTP 400",
          lastDurationMs: 7,
          updatedMs: 5000,
        });
        await s.insertDeliveryAttempt({
          deliveryId: d.id,
          n: 1,
          startedMs: 4000,
          durationMs: 7,
          statusCode: 400,
          error: "HTTP 400",
          response: "nope",
          outcome: "failed",
        });
      }
      assert.equal(
        await s.updateDelivery("del_missing", {
          ...fail,
          lastStatusCode: null,
          lastError: null,
          lastDurationMs: null,
          updatedMs: 1,
        }),
        false,
      );
      const page = await s.listDeliveries(listener, { limit: 2 });
      assert.equal(page.totalCount, 3);
      assert.deepEqual(ids(page.items), [made[2]!.id, made[1]!.id]);
      const older = await s.listDeliveries(listener, { limit: 2, afterSeq: page.items[1]!.seq });
      assert.deepEqual(ids(older.items), [made[0]!.id]);
      const failed = await s.listDeliveries(listener, { limit: 10 }, "failed");
      assert.deepEqual(ids(failed.items), [made[1]!.id, made[0]!.id]);
      assert.equal(failed.items[0]!.lastError, "HTTP 400");
      const attempts = await s.listDeliveryAttempts([made[0]!.id, made[2]!.id]);
      assert.deepEqual(attempts, [
        {
          deliveryId: made[0]!.id,
          n: 1,
          startedMs: 4000,
          durationMs: 7,
          statusCode: 400,
          error: "HTTP 400",
          response: "nope",
          outcome: "failed",
        },
      ]);
      assert.deepEqual(await s.listDeliveryAttempts([]), []);

      assert.equal(
        (await s.requeueFailedDeliveries(listener, 2000, 7000, { limit: 10 })).requeued,
        1,
        "only those created since",
      );
      const requeued = await s.getDelivery(made[1]!.id);
      assert.equal(requeued?.status, "pending");
      assert.equal(requeued?.nextAttemptMs, 7000);
      assert.equal(requeued?.roundAttempts, 0, "a fresh retry schedule");
      assert.equal(requeued?.attempts, 1, "the attempt count is history");
      assert.equal(await s.requeueDelivery(made[0]!.id, 8000), true);
      await claim(s, 8000);
      assert.equal(await s.requeueDelivery(made[0]!.id, 8000), false, "not while claimed");
      assert.equal(await s.requeueDelivery("del_missing", 8000), false);
    },
  );

  withStore("finished deliveries past their retention are pruned with their attempts", async (s) => {
    const listener = unique("wh");
    const old = delivery(listener);
    const pending = delivery(listener);
    await s.insertDeliveries([old, pending]);
    const done = { status: "succeeded" as const, attempts: 1, roundAttempts: 1, nextAttemptMs: null };
    await s.updateDelivery(old.id, {
      ...done,
      lastStatusCode: 200,
      lastError: null,
      lastDurationMs: 1,
      updatedMs: 1000,
    });
    await s.insertDeliveryAttempt({
      deliveryId: old.id,
      n: 1,
      startedMs: 1000,
      durationMs: 1,
      statusCode: 200,
      error: null,
      response: null,
      outcome: "succeeded",
    });
    assert.equal(await s.pruneDeliveries(500, 10), 0);
    assert.equal(await s.pruneDeliveries(2000, 10), 1, "pending ones stay whatever their age");
    assert.equal(await s.getDelivery(old.id), undefined);
    assert.deepEqual(await s.listDeliveryAttempts([old.id]), []);
    assert.ok(await s.getDelivery(pending.id));
  });

  withStore(
    "failed deliveries are requeued a batch at a time, oldest first, each once per redeliver",
    async (s) => {
      const listener = unique("wh");
      const other = unique("wh");
      const made = [0, 1, 2, 3, 4].map((i) => delivery(listener, { createdMs: 1000 + i }));
      const elsewhere = delivery(other, { createdMs: 1000 });
      await s.insertDeliveries([...made, elsewhere]);
      for (const d of [...made, elsewhere]) await failAt(s, d.id, 2000);
      const status = async () =>
        (await Promise.all(made.map((d) => s.getDelivery(d.id)))).map((d) => d?.status);

      // Created at 1001 or later: the first is left; two a batch, oldest first, each past the one before.
      const first = await s.requeueFailedDeliveries(listener, 1001, 5000, { limit: 2 });
      assert.equal(first.requeued, 2);
      assert.deepEqual(await status(), ["failed", "pending", "pending", "failed", "failed"]);
      // One of them failed again meanwhile, after the redeliver began: the next batches leave it.
      await failAt(s, made[1]!.id, 6000);
      const second = await s.requeueFailedDeliveries(listener, 1001, 5000, {
        afterSeq: first.lastSeq,
        limit: 2,
      });
      assert.equal(second.requeued, 2);
      assert.deepEqual(await status(), ["failed", "failed", "pending", "pending", "pending"]);
      assert.equal(
        (await s.requeueFailedDeliveries(listener, 1001, 5000, { afterSeq: second.lastSeq, limit: 2 }))
          .requeued,
        0,
      );
      assert.equal((await s.getDelivery(elsewhere.id))?.status, "failed", "another listener's stay");

      // The whole redeliver, one at a time: the rest of the listener's failed ones, created since 1000.
      assert.equal(await requeueFailed(s, listener, 1000, 7000, 1), 2);
      assert.deepEqual(await status(), ["pending", "pending", "pending", "pending", "pending"]);
    },
  );

  withStore("finished deliveries are pruned at most a batch at a time, the oldest first", async (s) => {
    const listener = unique("wh");
    const made = [delivery(listener), delivery(listener), delivery(listener), delivery(listener)];
    await s.insertDeliveries(made);
    // Finished in an order other than their creation's: the last updated go last.
    const updated = [4000, 1000, 3000, 2000];
    for (const [i, d] of made.entries()) await failAt(s, d.id, updated[i]!);
    const left = async () =>
      (await Promise.all(made.map((d) => s.getDelivery(d.id)))).map((d) => d !== undefined);
    assert.equal(await s.pruneDeliveries(3500, 2), 2);
    assert.deepEqual(await left(), [true, false, true, false], "the two oldest");
    assert.equal(await s.pruneDeliveries(3500, 2), 1, "only what is past the bound");
    assert.deepEqual(await left(), [true, false, false, false]);
    assert.equal(await s.pruneDeliveries(3500, 2), 0);
  });

  withStore("deliveries written in a transaction that rolls back are gone with it", async (s) => {
    const d = delivery(unique("wh"));
    await assert.rejects(
      s.transaction(async (tx) => {
        await tx.insertDeliveries([d]);
        throw new Error("abort");
      }),
    );
    assert.equal(await s.getDelivery(d.id), undefined);
  });
}
