/**
 * A source's storage stays bounded however long it runs: 100 events per channel, a limited number of
 * named channels, a size cap on this.db and on each event.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { maxCustomChannels } from "../../src/domain/sources/stored-emits.ts";
import { deploy, events } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
before(async () => {
  server = await startServer({ maxDbBytes: 4096, maxEventBytes: 2048 });
});
after(() => server.close());

async function run(sourceId: string, event: unknown): Promise<any> {
  const res = await server.api("POST", `/v1/sources/${sourceId}/run`, { body: { event } });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test("each channel keeps its newest 100 events; older ones are neither listed nor kept", async () => {
  const s = await deploy(server, {
    component_code: `export default { name: "burst", version: "1", async run(e) {
      for (let i = 0; i < e.n; i++) { this.$emit({ i }); this.$emit({ i }, { name: "side" }); }
    } }`,
  });
  await run(s.id, { n: 150 });
  const main = await events(server, s.id);
  assert.equal(main.length, 100);
  assert.deepEqual(
    main.map((e) => e.event.i),
    Array.from({ length: 100 }, (_, k) => 149 - k),
  );
  const side = await server.api("GET", `/v1/sources/${s.id}/event_summaries?event_name=side&limit=1`);
  assert.equal(side.body.page_info.total_count, 100);
});

test("writes that would take this.db over its limit fail the run, and the db stays as it was", async () => {
  const s = await deploy(server, {
    component_code: `export default { name: "hoarder", version: "1", props: { db: "$.service.db" }, async run(e) {
      const runs = (this.db.get("runs") ?? 0) + 1;
      this.db.set("runs", runs);
      if (e.big) this.db.set("big", "x".repeat(e.big));
      this.$emit({ runs, big: this.db.get("big")?.length ?? 0 });
    } }`,
  });
  assert.deepEqual((await run(s.id, {})).emits[0].event, { runs: 1, big: 0 });
  const refused = await run(s.id, { big: 10_000 });
  assert.equal(refused.ok, false);
  assert.equal(refused.error.code, "db_too_large");
  assert.equal(refused.emits.length, 0, "the failed run's emits are discarded with its writes");
  const [errorEntry] = await events(server, s.id, "$errors");
  assert.equal(errorEntry.event.error.code, "db_too_large");
  // The executor's own copy of the db was replaced too: the next run sees neither write.
  assert.deepEqual((await run(s.id, {})).emits[0].event, { runs: 2, big: 0 });
  assert.deepEqual((await run(s.id, { big: 100 })).emits[0].event, { runs: 3, big: 100 });
});

test(`a source may open at most ${maxCustomChannels} named channels; emits to more are refused on $errors`, async () => {
  const s = await deploy(server, {
    component_code: `export default { name: "fanout", version: "1", async run(e) {
      for (let i = 0; i < e.n; i++) this.$emit({ i }, { name: "ch" + i });
      this.$emit({ plain: true });
    } }`,
  });
  const first = await run(s.id, { n: maxCustomChannels + 8 });
  assert.equal(first.ok, true);
  assert.equal(first.emits.length, maxCustomChannels + 1, "the allowed channels and the default one");
  const [refusal] = await events(server, s.id, "$errors");
  assert.equal(refusal.event.error.code, "too_many_channels");
  assert.match(refusal.event.error.message, new RegExp(`ch${maxCustomChannels}\\b`));
  // Channels already in use go on working.
  const again = await run(s.id, { n: 3 });
  assert.equal(again.emits.length, 4);
});

test("an event over FOUNT_MAX_EVENT_BYTES is refused at emit with an $errors entry", async () => {
  const s = await deploy(server, {
    component_code: `export default { name: "big-emit", version: "1", async run() {
      this.$emit({ small: true });
      this.$emit({ big: "y".repeat(5000) });
    } }`,
  });
  const result = await run(s.id, {});
  assert.deepEqual(
    result.emits.map((e: any) => e.event),
    [{ small: true }],
  );
  const [entry] = await events(server, s.id, "$errors");
  assert.equal(entry.event.error.code, "emit_too_large");
});
