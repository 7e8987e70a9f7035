/**
 * What a component passes as `$emit` meta that Fount cannot use: the event is kept all the same, the
 * field that cannot be used is left out (a `ts` that is not a time leaves the event its arrival time),
 * and `$logs` says so once per kind. Published Pipedream sources rely on it: gitlab-new-commit emits
 * `ts: Date.parse(undefined)` with every real answer (test/pipedream/gitlab.test.ts runs it).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deploySource, subscribe } from "../delivery/receiver.ts";
import { deploy, events, fixture, hit } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

test("an emit whose meta cannot all be used is kept, with what can be, and a warning on $logs", async () => {
  const source = await deploy(server, { component_code: fixture("odd-meta.mjs") });
  const before = Date.now();
  const res = await hit(source.configured_props.http.endpoint_url, { method: "POST" });
  assert.equal(res.status, 200, res.text);

  const all = [...(await events(server, source.id)), ...(await events(server, source.id, "7"))];
  const byCase = new Map(all.map((e) => [e.event.case, e]));
  assert.equal(byCase.size, 14, JSON.stringify([...byCase.keys()]));
  const meta = (label: string) => byCase.get(label)!.metadata;

  // A ts that is not a time: kept without one, so its time is its arrival.
  for (const label of ["ts NaN", "ts Infinity", "ts not a date", "ts invalid Date", "ts object"]) {
    assert.equal(meta(label).ts, undefined, label);
    assert.ok(byCase.get(label)!.indexed_at_ms >= before, label);
  }
  assert.deepEqual([meta("ts NaN").id, meta("ts NaN").summary], ["ts-nan", "kept"]);
  // A delivery_ts that is not a time: delivered at once.
  assert.equal(meta("delivery_ts NaN").delivery_ts, undefined);
  assert.equal(meta("delivery_ts NaN").id, "delivery-nan");
  // An id that is neither a string nor a number is left out; a bigint is kept as its digits.
  assert.equal(meta("id NaN").id, undefined);
  assert.equal(meta("id NaN").summary, "no id");
  assert.equal(meta("id object").id, undefined);
  assert.equal(meta("id bigint").id, "12345678901234567890");
  // A number names a channel as its digits; anything else that is not text goes to the default.
  assert.equal(meta("name number").name, "7");
  assert.equal(meta("name object").name, "");
  // U+0000 cannot be in a channel name (PostgreSQL's text refuses it): U+FFFD stands in for it. No API
  // call can name such a channel (event_name takes letters, digits, _ . : -), so the store is asked.
  const store = server.built.services.store;
  assert.ok((await store.listChannels(source.id)).includes("in\uFFFDside"));
  const onNul = await store.listEvents(source.id, { channel: "in\uFFFDside", limit: 10 });
  assert.deepEqual(
    onNul.items.map((e) => e.event),
    [{ case: "name NUL" }],
  );
  assert.equal(meta("summary number").summary, "42");
  assert.equal(meta("summary object").summary, undefined);
  assert.equal(meta("meta a string").id, undefined);

  const warnings = (await events(server, source.id, "$logs"))
    .map((e) => e.event)
    .filter((l) => l.level === "warn")
    .map((l) => l.message as string);
  const expected = [
    /^\$emit: meta\.ts must be epoch ms, a Date or a date string, not NaN; the event was kept with its arrival time$/,
    /^\$emit: meta\.delivery_ts must be epoch ms or a Date, not NaN; the event is delivered at once$/,
    /^\$emit: meta\.id must be a string or a number, not NaN; the event was kept without an id$/,
    /^\$emit: meta\.name must be a string, not a value of type object; the event went to the default channel$/,
    /^\$emit: meta\.name holds the NUL character/,
    /^\$emit: meta\.summary must be a string, not a value of type object/,
    /^\$emit: meta must be an object \{id, name, summary, ts\}, not "just a summary"/,
  ];
  for (const pattern of expected) {
    assert.equal(
      warnings.filter((w) => pattern.test(w)).length,
      1,
      `${pattern}: ${JSON.stringify(warnings)}`,
    );
  }
  // One line per kind, however many emits had it.
  assert.equal(warnings.length, expected.length, JSON.stringify(warnings));
});

test("a delivery_ts past the times a Date holds is left out, with a warning, and its events are delivered at once", async () => {
  // Past 2^53 SQLite kept due times JavaScript could not read back (the deliveries lists answered 500,
  // the dispatcher failed every loop), and past 2^63 PostgreSQL's bigint refused them (the hit answered
  // 500, its events were lost).
  const values = ["1e16", "1e19", "1e300", "9223372036854775807", "-1e19"];
  const emitter = await deploySource(
    server,
    `export default { name: "Far", version: "1", props: { http: "$.interface.http" }, async run() {
      for (const ts of [${values.map((v) => `["${v}", ${v}]`).join(", ")}]) this.$emit({ ts: ts[0] }, { delivery_ts: ts[1] });
      this.$emit({ ts: "8.64e15" }, { delivery_ts: 8.64e15 });
    } };`,
  );
  const listener = await deploySource(
    server,
    `export default { name: "Listener", version: "1", props: {}, async run(event) { this.$emit(event); } };`,
  );
  await subscribe(server, { emitter_id: emitter.id, listener_id: listener.id });
  const res = await hit(emitter.endpoint, { method: "POST" });
  assert.equal(res.status, 200, res.text);

  const stored = await events(server, emitter.id);
  assert.equal(stored.length, values.length + 1);
  for (const e of stored) {
    const kept = e.event.ts === "8.64e15";
    assert.equal(e.metadata.delivery_ts, kept ? 8.64e15 : undefined, e.event.ts);
    const list = await server.api("GET", `/v1/sources/${emitter.id}/events/${e.id}/deliveries`);
    assert.equal(list.status, 200, list.text);
    assert.equal(list.body.data.length, 1);
  }
  const { dispatcher, store } = server.built.services;
  await dispatcher.drain();
  const next = await store.nextDeliveryMs();
  assert.ok(next === undefined || next <= 8.64e15, String(next));
  // The others were delivered at once; the last waits until year 275760.
  const delivered = (await events(server, listener.id)).map((e) => e.event.ts).sort();
  assert.deepEqual(delivered, [...values].sort());

  const warnings = (await events(server, emitter.id, "$logs"))
    .map((e) => e.event)
    .filter((l) => l.level === "warn")
    .map((l) => l.message as string);
  assert.deepEqual(warnings, [
    "$emit: meta.delivery_ts must be epoch ms from -8.64e15 to 8.64e15 (the times a Date holds), not 10000000000000000; the event is delivered at once",
  ]);
});
