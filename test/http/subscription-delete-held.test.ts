/**
 * Deleting a route while the dispatcher holds its deliveries in memory (claimed, waiting for a slot of
 * their host): none of them is sent once the DELETE answered (docs/delivery.md, "Deleting a
 * subscription"). The receiver holds every request until the test lets it answer, so the requests in
 * flight at the DELETE are exactly those it has then.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Gate } from "../delivery/receiver.ts";
import { deploy } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { unique } from "./openapi-walk.ts";

const burst = `export default { name: "burst", version: "1", async run(e) {
  for (let i = 0; i < (e.n ?? 0); i++) this.$emit({ i });
} }`;

/** Sends at once to the receiver's host: the rest of what is held waits for a slot. */
const perHost = 4;
const events = 300;

/** Waits (generously: the machine may be loaded) until `ok` holds. */
async function until(ok: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await ok())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function deliveriesOf(server: TestServer, key: string, webhook: string, status?: string) {
  const q = status ? `&status=${status}` : "";
  const res = await server.api("GET", `/v1/webhooks/${webhook}/deliveries?limit=1${q}`, { key });
  assert.equal(res.status, 200, res.text);
  return res.body.page_info.total_count as number;
}

/**
 * A webhook on a holding receiver subscribed to a source that emitted `events` at once: resolves once
 * the receiver holds `perHost` requests (the dispatcher holds more of them, waiting for a slot).
 */
async function held(server: TestServer, inOrg: boolean) {
  const dispatcher = server.built.services.dispatcher;
  dispatcher.options.maxPerHost = perHost;
  const user = await server.createUser(unique("sdh"));
  // In an organization: the user's webhook subscribed to the organization's source (the admin owns it).
  let orgId: string | undefined;
  if (inOrg) {
    const admin = (await server.api("GET", "/v1/users/me")).body.data.id;
    const org = await server.api("POST", "/v1/admin/orgs", {
      body: { orgname: unique("sdh-org"), owner_id: admin },
    });
    assert.equal(org.status, 200, org.text);
    orgId = org.body.data.id as string;
    const member = await server.api("POST", `/v1/admin/orgs/${orgId}/members`, {
      body: { user_id: user.id },
    });
    assert.equal(member.status, 200, member.text);
  }
  const receiver = await Gate.start();
  const hook = await server.api("POST", "/v1/webhooks", { key: user.key, body: { url: receiver.url } });
  assert.equal(hook.status, 200, hook.text);
  const webhook = hook.body.data.id as string;
  const source = await deploy(
    server,
    { component_code: burst, retention: { events }, ...(orgId ? { org_id: orgId } : {}) } as never,
    orgId ? undefined : user.key,
  );
  const sub = await server.api("POST", "/v1/subscriptions", {
    key: user.key,
    body: { emitter_id: source.id, listener_id: webhook },
  });
  assert.equal(sub.status, 200, sub.text);
  const run = await server.api("POST", `/v1/sources/${source.id}/run`, {
    key: orgId ? undefined : user.key,
    body: { event: { n: events } },
  });
  assert.equal(run.status, 200, run.text);
  await until(() => receiver.bodies.length === perHost, "the receiver to hold a request per slot");
  return { user, receiver, webhook, source: source.id as string, dispatcher, orgId };
}

const deletes = {
  subscription: (t: Held) => `/v1/subscriptions?emitter_id=${t.source}&listener_id=${t.webhook}`,
  webhook: (t: Held) => `/v1/webhooks/${t.webhook}`,
  // The member's routes to and from the organization go with the membership.
  membership: (t: Held) => `/v1/admin/orgs/${t.orgId}/members?user_id=${t.user.id}`,
};
type Held = Awaited<ReturnType<typeof held>>;

for (const [route, path] of Object.entries(deletes)) {
  test(`deleting the ${route} sends none of the deliveries the dispatcher holds for it`, async () => {
    const server = await startServer({ webhookAllowPrivate: true });
    const t = await held(server, route === "membership");
    try {
      const key = route === "membership" ? undefined : t.user.key;
      const del = await server.api("DELETE", path(t), { key });
      assert.equal(del.status, 200, del.text);
      // The requests in flight at the answer: the receiver holds every one, and no slot was freed.
      const inFlight = t.receiver.bodies.length;
      assert.equal(inFlight, perHost);
      // Their answers free the slots for the deliveries that waited.
      t.receiver.open();
      await t.dispatcher.drain();
      // Anything still on its way (a socket being written) has had time to arrive.
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(t.receiver.bodies.length, inFlight, "a withdrawn delivery was sent after the DELETE");
      if (route !== "webhook") {
        const left = await deliveriesOf(server, t.user.key, t.webhook);
        assert.equal(left, 0, "the deleted subscription left deliveries");
      }
    } finally {
      await t.receiver.close();
      await server.close();
    }
  });
}
