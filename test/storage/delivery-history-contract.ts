/**
 * The storage contract of delivery history: an attempt's detail (what was sent and received), searching
 * a listener's or an event's deliveries with filters and owners, reading one event by ID, and marking a
 * replay's deliveries. Registered by `storageContract`, so every driver runs it.
 */
import assert from "node:assert/strict";
import type { DeliveryAttempt, EventRecord } from "../../src/domain/types.ts";
import type { DeliveryPatch } from "../../src/storage/port.ts";
import { deliveryFixtures, type WithStore } from "./delivery-contract.ts";

export function deliveryHistoryContract(withStore: WithStore, unique: (prefix: string) => string): void {
  const { delivery } = deliveryFixtures(unique);

  const settled = (code: number | null, status: DeliveryPatch["status"] = "failed"): DeliveryPatch => ({
    status,
    attempts: 1,
    roundAttempts: 1,
    nextAttemptMs: null,
    lastStatusCode: code,
    lastError: code === null ? "timed out" : `HTTP ${code}`,
    lastDurationMs: 3,
    updatedMs: 5000,
  });

  withStore(
    "an attempt keeps what was sent and received; one stored without detail reads back without it",
    async (s) => {
      const d = delivery(unique("wh"));
      const e = delivery(unique("wh"));
      await s.insertDeliveries([d, e]);
      // 64 KB of text with characters of several bytes, as a receiver's error page may be.
      const body = `<h1>é 😀</h1>${"x".repeat(64 * 1024 - 20)}`;
      const attempt: DeliveryAttempt = {
        deliveryId: d.id,
        n: 1,
        startedMs: 4000,
        durationMs: 12,
        statusCode: 500,
        error: "HTTP 500",
        response: body,
        outcome: "retry",
        detail: {
          url: "https://example.com/hook?x=1",
          requestHeaders: { "webhook-id": d.id, "webhook-signature": "v1,abc=" },
          responseHeaders: { "content-type": "text/html", "set-cookie": ["a=1", "b=2"] },
          responseTruncated: true,
          errorKind: "http",
        },
      };
      await s.transaction(async (tx) => tx.settleDelivery(d.id, settled(500, "pending"), attempt));
      const second = {
        ...attempt,
        n: 2,
        detail: { ...attempt.detail!, responseTruncated: false, errorKind: null },
      };
      await s.insertDeliveryAttempt(second);
      const legacy = { ...attempt, deliveryId: e.id, response: "old" };
      delete legacy.detail;
      await s.insertDeliveryAttempt(legacy);
      const [first, again] = await s.listDeliveryAttempts([d.id]);
      assert.deepEqual(first, attempt);
      assert.deepEqual(again, second);
      assert.deepEqual(await s.listDeliveryAttempts([e.id]), [legacy]);
    },
  );

  withStore(
    "deliveries are found by listener or by event, narrowed by owner, status, time and code",
    async (s) => {
      const hook = unique("wh");
      const other = unique("wh");
      const [alice, bob] = [unique("u"), unique("u")];
      const made = [
        delivery(hook, { ownerId: alice, eventId: "1000-0", createdMs: 1000 }),
        delivery(hook, { ownerId: alice, eventId: "2000-0", createdMs: 2000 }),
        delivery(hook, { ownerId: alice, eventId: "3000-0", createdMs: 3000 }),
        delivery(other, { ownerId: bob, eventId: "2000-0", createdMs: 2000 }),
        delivery(other, { ownerId: alice, eventId: "2000-0", emitterId: "dc_elsewhere", createdMs: 2000 }),
      ];
      await s.insertDeliveries(made);
      await s.updateDelivery(made[0]!.id, settled(503));
      await s.updateDelivery(made[1]!.id, settled(200, "succeeded"));
      await s.updateDelivery(made[3]!.id, settled(404));
      const found = async (search: Parameters<typeof s.searchDeliveries>[0], limit = 10) =>
        (await s.searchDeliveries(search, { limit })).items.map((d) => made.findIndex((m) => m.id === d.id));

      assert.deepEqual(await found({ listenerId: hook }), [2, 1, 0], "newest first");
      assert.deepEqual(await found({ listenerId: hook, status: "failed" }), [0]);
      assert.deepEqual(await found({ listenerId: hook, sinceMs: 2000 }), [2, 1]);
      assert.deepEqual(await found({ listenerId: hook, untilMs: 2000 }), [0]);
      assert.deepEqual(await found({ listenerId: hook, statusCode: { min: 500, max: 599 } }), [0]);
      assert.deepEqual(await found({ listenerId: hook, statusCode: { min: 200, max: 200 } }), [1]);
      const event = { emitterId: "dc_emitter", eventId: "2000-0" };
      assert.deepEqual(await found({ event }), [3, 1]);
      assert.deepEqual(await found({ event, ownerIds: [alice] }), [1], "another owner's are left out");
      assert.deepEqual(await found({ event, ownerIds: [] }), []);
      assert.deepEqual(await found({ event, listenerId: other }), [3]);
      const page = await s.searchDeliveries({ listenerId: hook }, { limit: 2 });
      assert.equal(page.totalCount, 3);
      const next = await s.searchDeliveries({ listenerId: hook }, { limit: 2, afterSeq: page.items[1]!.seq });
      assert.deepEqual(
        next.items.map((d) => d.id),
        [made[0]!.id],
      );
    },
  );

  withStore("an event is read by its ID, whatever its channel", async (s) => {
    const emitterId = unique("dc");
    const event = (channel: string, ms: number): EventRecord => ({
      emitterId,
      channel,
      id: `${ms}-0`,
      idMs: ms,
      idSeq: 0,
      indexedAtMs: ms,
      event: { ms },
      meta: { emit_id: `e${ms}`, name: channel, emitter_id: emitterId },
    });
    await s.transaction(async (tx) => {
      await tx.insertEvent(event("", 1000));
      await tx.insertEvent(event("alerts", 2000));
    });
    assert.deepEqual(await s.getEvent(emitterId, "2000-0"), event("alerts", 2000));
    assert.deepEqual(await s.getEvent(emitterId, "1000-0"), event("", 1000));
    assert.equal(await s.getEvent(emitterId, "3000-0"), undefined);
    assert.equal(await s.getEvent(unique("dc"), "1000-0"), undefined);
    assert.equal(await s.getEvent(emitterId, "not an id"), undefined);
  });

  withStore(
    "a replay's deliveries are marked, each with the newest earlier delivery of its event to its listener",
    async (s) => {
      const hook = unique("wh");
      const first = delivery(hook, { eventId: "1000-0" });
      const again = delivery(hook, { eventId: "1000-0" });
      const elsewhere = delivery(unique("wh"), { eventId: "2000-0" });
      await s.insertDeliveries([first, again, elsewhere]);
      const replayId = unique("rpl");
      const replays = [
        delivery(hook, { eventId: "1000-0", subscriptionId: replayId }),
        delivery(hook, { eventId: "2000-0", subscriptionId: replayId }),
      ];
      const marked = await s.transaction(async (tx) => {
        await tx.insertDeliveries(replays);
        return tx.markReplay(replayId);
      });
      assert.equal(marked, 2);
      const [one, two] = await Promise.all(replays.map((d) => s.getDelivery(d.id)));
      assert.equal(one?.replayId, replayId);
      assert.equal(one?.replayedFrom, again.id);
      assert.equal(two?.replayId, replayId);
      assert.equal(two?.replayedFrom, null, "no earlier delivery of that event to this listener");
      const routed = await s.getDelivery(first.id);
      assert.equal(routed?.replayId, undefined, "a routed delivery has no replay mark");

      // A replay written in several transactions: each call marks what its own transaction wrote.
      const later = delivery(hook, { eventId: "1000-0", subscriptionId: replayId });
      assert.equal(
        await s.transaction(async (tx) => {
          await tx.insertDeliveries([later]);
          return tx.markReplay(replayId);
        }),
        1,
      );
      assert.equal((await s.getDelivery(later.id))?.replayedFrom, replays[0]!.id, "the newest earlier one");
      assert.equal((await s.getDelivery(replays[0]!.id))?.replayedFrom, again.id, "marked once");
    },
  );
}
