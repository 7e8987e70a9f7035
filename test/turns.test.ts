/**
 * Turns (src/turns.ts), which bound the installer's processes, each account's searches and each user's
 * SSE replays: a free turn is taken at once, the rest wait first come first served, and a wait ends
 * with its time or its signal; a release passes the turn on once, however often it is called.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Turns, TurnsByKey } from "../src/turns.ts";

test("beyond the size, takers wait in order; a wait that runs out gets nothing; a release counts once", async () => {
  const turns = new Turns(1);
  const first = await turns.take(0);
  assert.ok(first);
  const order: string[] = [];
  const noting = (name: string) => (release: (() => void) | undefined) => {
    order.push(name);
    return release;
  };
  const second = turns.take(60_000).then(noting("second"));
  const third = turns.take(60_000).then(noting("third"));
  assert.equal(await turns.take(0), undefined, "no turn free, and no time to wait");
  first();
  first(); // a second call gives nothing back twice
  const secondRelease = await second;
  assert.deepEqual(order, ["second"]);
  secondRelease?.();
  (await third)?.();
  assert.deepEqual(order, ["second", "third"]);
  assert.ok(turns.idle);
  const again = await turns.take(0);
  assert.ok(again, "every turn was given back");
  again();
});

test("an aborted wait gets nothing and leaves the queue; onIdle runs when nothing is held or waited for", async () => {
  let idle = 0;
  const turns = new Turns(
    () => 1,
    () => idle++,
  );
  const held = await turns.take(0);
  const left = new AbortController();
  const waiting = turns.take(60_000, left.signal);
  const behind = turns.take(60_000);
  left.abort("left");
  assert.equal(await waiting, undefined);
  assert.equal(idle, 0);
  held?.();
  const next = await behind;
  assert.ok(next, "the turn went to the waiter behind the one that left");
  assert.equal(idle, 0);
  next();
  assert.equal(idle, 1);
  assert.ok(turns.idle);
  const late = new AbortController();
  late.abort("closed");
  assert.equal(await turns.take(60_000, late.signal), undefined, "an aborted signal takes nothing");
  assert.ok(turns.idle);
});

test("the size is read at each take", async () => {
  let size = 1;
  const turns = new Turns(() => size);
  const a = await turns.take(0);
  assert.equal(await turns.take(0), undefined);
  size = 2;
  const b = await turns.take(0);
  assert.ok(a && b);
  a();
  b();
});

test("an infinite wait ends only with a turn; turns by key are apart for each key", async () => {
  const byKey = new TurnsByKey(1);
  const a = await byKey.take("a", 0);
  const b = await byKey.take("b", 0);
  assert.ok(a && b, "another key's turn is its own");
  let waited = false;
  const next = byKey.take("a", Number.POSITIVE_INFINITY).then((r) => {
    waited = true;
    return r;
  });
  // setTimeout would take an infinite delay for 1 ms: the wait must outlast that.
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(waited, false);
  a();
  const again = await next;
  assert.ok(again);
  again();
  b();
  const fresh = await byKey.take("a", 0);
  assert.ok(fresh, "a key whose turns all came back starts over");
  fresh();
});
