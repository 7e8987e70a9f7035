/** jsonText and parsedJson: the JSON text of event values, made once per object. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { jsonText, parsedJson } from "../../../src/domain/events/event-json.ts";

test("jsonText writes what JSON.stringify writes, undefined as null", () => {
  for (const value of [
    null,
    undefined,
    0,
    -1.5,
    'a "quoted" é',
    true,
    [],
    [1, { a: null }],
    { b: [1, 2], c: "x" },
  ])
    assert.equal(jsonText(value), JSON.stringify(value ?? null));
});

test("an object's text is made once: the same object gives the same text without writing it again", () => {
  let writes = 0;
  const value = {
    toJSON() {
      writes++;
      return { n: 1 };
    },
  };
  assert.equal(jsonText(value), '{"n":1}');
  assert.equal(jsonText(value), '{"n":1}');
  assert.equal(writes, 1);
  // Another object with the same content is written on its own.
  assert.equal(jsonText({ n: 1 }), '{"n":1}');
});

test("a value read with parsedJson gives back the text it was read from", () => {
  // Text JSON.stringify would not write so: the read text is kept, not made again.
  const text = '{ "a": 1.0, "b": [ 2 ] }';
  const value = parsedJson(text);
  assert.deepEqual(value, { a: 1, b: [2] });
  assert.equal(jsonText(value), text);
  assert.equal(parsedJson("3"), 3);
  assert.equal(parsedJson("null"), null);
});
