/**
 * PostgreSQL only: a parking batch that began while its webhook was inactive and commits after a PUT
 * made the webhook active again, whose unparking could not see the batch's rows yet. The rows are made
 * due within seconds all the same, not at the dispatcher's once-a-minute look. A trigger in the test's
 * own schema stretches the parking statement to 2 s, so that the PUT lands inside it.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import pg from "pg";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import {
  createWebhook,
  deliveries,
  deploySource,
  emit,
  hookSourceCode,
  scriptedReceivers,
  subscribe,
} from "../delivery/receiver.ts";
import { startServer } from "../helpers.ts";
import { dropSchema, freshSchema, testPgUrl } from "../pg-schemas.ts";

const scripted = scriptedReceivers();
const schema = freshSchema("fount_park");
after(() => dropSchema(schema));

test("deliveries parked by a batch that commits after their webhook was made active again go out within seconds", async () => {
  const store = await openPostgresStorage({ url: testPgUrl, schema, poolSize: 4 });
  const server = await startServer({}, { FOUNT_WEBHOOK_ALLOW_PRIVATE: "true" }, { store });
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  try {
    // Every first attempt fails, so each delivery waits for its retry, due minutes later; then all succeed.
    let failing = true;
    const r = await scripted(() => (failing ? 500 : 200));
    const source = await deploySource(server, hookSourceCode);
    const hook = await createWebhook(server, r.url);
    await subscribe(server, { emitter_id: source.id, listener_id: hook.id });
    for (let n = 1; n <= 5; n++) await emit(source.endpoint, { n });
    const { dispatcher } = server.built.services;
    await dispatcher.drain();
    assert.equal(r.requests.length, 5);
    failing = false;

    await client.query(`SET search_path = "${schema}"`);
    await client.query(`CREATE FUNCTION slow_park() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM parked WHERE next_attempt_ms IS NULL) THEN PERFORM pg_sleep(2); END IF;
        RETURN NULL;
      END $$`);
    await client.query(`CREATE TRIGGER slow_park AFTER UPDATE ON deliveries
      REFERENCING NEW TABLE AS parked FOR EACH STATEMENT EXECUTE FUNCTION slow_park()`);
    const put = async (active: boolean) => {
      const res = await server.api("PUT", `/v1/webhooks/${hook.id}`, { body: { active } });
      assert.equal(res.status, 200, res.text);
    };
    await put(false);
    // The parking statement sleeps in its trigger: the webhook is made active while it runs.
    for (let tries = 0; ; tries++) {
      assert.ok(tries < 300, "the parking statement started within 30 s");
      const { rows } = await client.query(
        "SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query ILIKE '%deliveries%'",
      );
      if (rows.length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await put(true);
    await client.query("DROP TRIGGER slow_park ON deliveries");
    for (let tries = 0; r.requests.length < 10; tries++) {
      assert.ok(
        tries < 300,
        `all five sent again within 30 s: ${JSON.stringify(await deliveries(server, hook.id))}`,
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.deepEqual(
      r.requests
        .slice(5)
        .map((q) => q.json.n)
        .sort(),
      [1, 2, 3, 4, 5],
    );
  } finally {
    await client.end();
    await server.close();
  }
});
