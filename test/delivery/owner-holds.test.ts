/**
 * What the claims remember of listeners is bounded: the owners of the listeners seen lately (and the
 * destination keys, through the same map), never every listener a node ever sent to; an owner's held
 * count does not depend on it.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { OwnerHolds } from "../../src/delivery/owner-holds.ts";
import { RecentListeners, rememberedListeners } from "../../src/delivery/recent-listeners.ts";
import type { Delivery } from "../../src/domain/types.ts";

const delivery = (id: string, listenerId: string, ownerId = "u_1") =>
  ({ id, listenerId, ownerId }) as Delivery;

test("an owner's listeners are remembered for the most recently seen ones only", () => {
  const holds = new OwnerHolds(3);
  holds.add(delivery("d1", "wh_1"));
  for (const n of [2, 3, 4]) holds.see(delivery(`x${n}`, `wh_${n}`));
  // wh_1 was seen longest ago: forgotten, though its delivery is still held.
  assert.deepEqual([...holds.listeners()], ["wh_2", "wh_3", "wh_4"]);
  assert.equal(holds.ownerOfListener("wh_1"), undefined);
  assert.equal(holds.held("u_1"), 1);
  // Seen again (its next delivery held), it is the most recent.
  holds.add(delivery("d5", "wh_2"));
  holds.see(delivery("x6", "wh_6"));
  assert.deepEqual([...holds.listeners()], ["wh_4", "wh_2", "wh_6"]);
  holds.finished("d1");
  holds.finished("d5");
  assert.equal(holds.held("u_1"), 0);
});

test("a node that sees a hundred thousand listeners remembers a bounded number of them", () => {
  const holds = new OwnerHolds();
  const keys = new RecentListeners<string>();
  for (let i = 0; i < 100_000; i++) {
    holds.see(delivery(`d${i}`, `wh_${i}`, `u_${i % 100}`));
    keys.set(`wh_${i}`, `host${i}`);
  }
  assert.equal([...holds.listeners()].length, rememberedListeners);
  assert.equal(keys.size, rememberedListeners);
  assert.equal(holds.ownerOfListener("wh_99999"), "u_99");
  assert.equal(keys.get("wh_99999"), "host99999");
  assert.equal(keys.get("wh_0"), undefined);
});
