/**
 * The literals the PostgreSQL driver writes into the held-back writes of a transaction
 * (storage/postgres/deferred.ts): each text reads back from a real PostgreSQL as it was, as pg's own
 * `escapeLiteral` writes it, and `$n` placeholders are replaced by their own parameter only.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import pg from "pg";
import { inlineParams, textLiteral } from "../../src/storage/postgres/deferred.ts";
import { testPgUrl } from "../pg-schemas.ts";

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
