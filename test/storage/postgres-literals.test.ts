/**
 * The literals the PostgreSQL driver writes into the held-back writes of a transaction
 * (storage/postgres/deferred.ts): each text reads back from a real PostgreSQL as it was, as pg's own
 * `escapeLiteral` writes it, and `$n` placeholders are replaced by their own parameter only. A text no
 * literal can carry (U+0000) fails its write as an error of the write, never as a lost store.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import pg from "pg";
import { isStoreUnavailable } from "../../src/storage/health.ts";
import { inlineParams, textLiteral } from "../../src/storage/postgres/deferred.ts";
import { openTestPostgres, testPgUrl } from "../pg-schemas.ts";
import { deliveryFixtures } from "./delivery-contract.ts";

const texts = [
  "",
  "plain",
  "it's",
  "''",
  "back\\slash",
  "\\",
  "a\\'b",
  "both ' and \\ and \\\\ and ''",
  "$1 and $2 inside a value",
  "line\nbreak\ttab",
  "ünïcødé — 🎉",
  JSON.stringify({ note: 'it\'s "quoted" \\ here', n: [1, 2] }),
];

test("a text literal reads back from PostgreSQL as the text it was, written as pg's escapeLiteral writes it", async () => {
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  after(() => client.end());
  for (const text of texts) {
    assert.equal(textLiteral(text), client.escapeLiteral(text), JSON.stringify(text));
    const { rows } = await client.query(`SELECT ${textLiteral(text)}::text AS v`);
    assert.equal(rows[0].v, text, JSON.stringify(text));
  }
});

test("each $n of a statement becomes the literal of its own parameter, the same text again with new values", async () => {
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  after(() => client.end());
  const text = "SELECT $1::text AS a, $10::text AS j, $2::int AS b, $11 AS k, $3::boolean AS c";
  const values = (tag: string) => [`${tag}'1`, 2, true, 4, 5, 6, 7, 8, 9, `${tag}\\10`, null];
  for (const tag of ["x", "y"]) {
    const { rows } = await client.query(inlineParams(text, values(tag)));
    assert.deepEqual(rows[0], { a: `${tag}'1`, j: `${tag}\\10`, b: 2, k: null, c: true });
  }
  assert.equal(inlineParams("SELECT 1", []), "SELECT 1");
  assert.equal(inlineParams("SELECT $1", [["a'", 1]]), "SELECT ARRAY['a''', 1]");
  assert.throws(() => inlineParams("SELECT $1", [Number.NaN]), TypeError);
});

test("a held-back write holding U+0000 fails as an error of the write, not as a lost store", async () => {
  const store = await openTestPostgres();
  after(() => store.close());
  let n = 0;
  const { delivery } = deliveryFixtures((prefix) => `${prefix}_literal${++n}`);
  const d = delivery("wh_1");
  await store.insertDeliveries([d]);
  const patch = {
    status: "pending" as const,
    attempts: 1,
    roundAttempts: 1,
    nextAttemptMs: 5000,
    lastStatusCode: null,
    lastDurationMs: 1,
    updatedMs: 2000,
  };
  // The settlement is held back and sent with COMMIT as one statement's text, which PostgreSQL reads
  // only to its first NUL: "invalid message format" (08P01), which was taken for a lost connection.
  const err = await store
    .transaction((tx) => tx.settleDelivery(d.id, { ...patch, lastError: "x\u0000y" }, undefined))
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  assert.ok(err, "the write failed");
  assert.equal(isStoreUnavailable(err), false, String(err));
  assert.equal(store.health.available, true);
  await store.transaction((tx) => tx.settleDelivery(d.id, { ...patch, lastError: "x\uFFFDy" }, undefined));
  assert.equal((await store.getDelivery(d.id))?.lastError, "x\uFFFDy");
});
