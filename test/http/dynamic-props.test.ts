/**
 * Dynamic props over HTTP: a component's `additionalProps()` runs with `this` holding the configured
 * props (the app's `$auth` too). The reload route answers every configurable prop, declared then
 * dynamic; deploy computes them again and validates their values; an update recomputes them from the
 * new values; run and hooks see them on `this`.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { fixture, runAndRead } from "../fixtures/components/fixtures.ts";
import { startServer, type TestServer } from "../helpers.ts";

let server: TestServer;
let componentId: string;
let accountId: string;

before(async () => {
  server = await startServer();
  const saved = await server.api("POST", "/v1/components", {
    body: { component_code: fixture("dynamic-props.mjs") },
  });
  assert.equal(saved.status, 200, saved.text);
  componentId = saved.body.data.id;
  const account = await server.api("POST", "/v1/accounts", {
    body: { app: "acme", name: "Acme", credentials: { token: "tok_1", subdomain: "wile" } },
  });
  assert.equal(account.status, 200, account.text);
  accountId = account.body.data.id;
});
after(() => server.close());

const acme = () => ({ authProvisionId: accountId });

async function reload(configured: Record<string, unknown>) {
  return server.api("POST", `/v1/components/${componentId}/props/reload`, {
    body: { configured_props: configured },
  });
}

function names(res: { body: any }): string[] {
  return res.body.data.configurable_props.map((p: { name: string }) => p.name);
}

async function deployWith(configured: Record<string, unknown>) {
  return server.api("POST", "/v1/sources", {
    body: { component_id: componentId, configured_props: configured },
  });
}

test("configurable_props flags the prop that reloads props; the component alone has no dynamic ones", async () => {
  const res = await server.api("GET", `/v1/components/${componentId}`);
  const kind = res.body.data.configurable_props.find((p: { name: string }) => p.name === "kind");
  assert.equal(kind.reloadProps, true);
  assert.deepEqual(names(res), ["acme", "db", "kind"]);
});

test("reload answers the declared props then the dynamic ones, computed with the app's $auth", async () => {
  const issue = await reload({ acme: acme(), kind: "issue" });
  assert.equal(issue.status, 200, issue.text);
  assert.deepEqual(names(issue), ["acme", "db", "kind", "project", "labels", "assignee", "info"]);
  const props = issue.body.data.configurable_props;
  assert.deepEqual(props[3], { name: "project", type: "string", label: "Project on wile" });
  assert.deepEqual(props[4], { name: "labels", type: "string[]", optional: true });
  assert.deepEqual(props[5], { name: "assignee", type: "string", optional: true, remoteOptions: true });
  // previousPropDefs are the declared props; returning them again does not redefine them.
  assert.equal(props[6].description, "declared: acme,db,kind");

  const pr = await reload({ acme: acme(), kind: "pr" });
  assert.deepEqual(names(pr), ["acme", "db", "kind", "branch", "draft", "info"]);
  assert.equal(pr.body.data.configurable_props[4].reloadProps, true);
  // Setting the dynamic `draft` and reloading again brings the prop that depends on it.
  const chained = await reload({ acme: acme(), kind: "pr", draft: true });
  assert.deepEqual(names(chained), ["acme", "db", "kind", "branch", "draft", "reviewer", "info"]);
});

test("a dynamic prop's options come from the options route, given the props it depends on", async () => {
  const res = await server.api("POST", `/v1/components/${componentId}/props/assignee/options`, {
    body: { configured_props: { acme: acme(), kind: "issue" }, page: 2 },
  });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.body.data.options, ["wile-issue-2"]);
  // For a pr there is no assignee prop.
  const none = await server.api("POST", `/v1/components/${componentId}/props/assignee/options`, {
    body: { configured_props: { acme: acme(), kind: "pr" } },
  });
  assert.equal(none.status, 404, none.text);
});

test("reload reports an additionalProps() that throws or defines a prop it may not, and an unknown account", async () => {
  const broken = await reload({ acme: acme(), kind: "broken" });
  assert.equal(broken.status, 422, broken.text);
  assert.equal(broken.body.code, "component_invalid");
  assert.match(broken.body.error, /additionalProps\(\) failed: no kinds for wile/);

  const badType = await reload({ acme: acme(), kind: "bad-type" });
  assert.equal(badType.status, 422, badType.text);
  assert.match(badType.body.error, /Dynamic prop "store" has type \$\.service\.db/);

  const stranger = await reload({ acme: { authProvisionId: "apn_nobody" }, kind: "issue" });
  assert.equal(stranger.status, 422, stranger.text);
  assert.equal(stranger.body.code, "props_invalid");

  assert.equal(
    (await server.api("POST", "/v1/components/sc_missing0/props/reload", { body: {} })).status,
    404,
  );
});

test("deploy validates the dynamic props: a required one missing, a wrong type, one that does not exist", async () => {
  const missing = await deployWith({ acme: acme(), kind: "issue" });
  assert.equal(missing.status, 422, missing.text);
  assert.equal(missing.body.code, "props_invalid");
  assert.equal(missing.body.details.prop, "project");

  const wrong = await deployWith({ acme: acme(), kind: "issue", project: "p", labels: "a" });
  assert.equal(wrong.status, 422, wrong.text);
  assert.equal(wrong.body.details.prop, "labels");

  const stray = await deployWith({ acme: acme(), kind: "issue", project: "p", branch: "dev" });
  assert.equal(stray.status, 422, stray.text);
  assert.match(stray.body.error, /no prop named branch/);
});

test("a deployed source gets its dynamic props on this in run and hooks, and shows their values", async () => {
  const res = await deployWith({ acme: acme(), kind: "issue", project: "road-runner", labels: ["bug"] });
  assert.equal(res.status, 200, res.text);
  const source = res.body.data;
  assert.deepEqual(source.configured_props, {
    acme: { authProvisionId: accountId },
    kind: "issue",
    project: "road-runner",
    labels: ["bug"],
  });
  assert.deepEqual(await runAndRead(server, source.id), {
    kind: "issue",
    project: "road-runner",
    labels: ["bug"],
    branch: null,
    draft: null,
    reviewer: null,
    subdomain: "wile",
    activated: { project: "road-runner", branch: null },
  });
});

test("an update recomputes the dynamic props from the new values; without props it keeps the values", async () => {
  const source = (await deployWith({ acme: acme(), kind: "issue", project: "road-runner" })).body.data;

  // The issue's `project` is not a prop of a pr: the new values are checked against the new set.
  const stale = await server.api("PUT", `/v1/sources/${source.id}`, {
    body: { configured_props: { acme: acme(), kind: "pr", project: "road-runner" } },
  });
  assert.equal(stale.status, 422, stale.text);
  assert.match(stale.body.error, /no prop named project/);

  const pr = await server.api("PUT", `/v1/sources/${source.id}`, {
    body: { configured_props: { acme: acme(), kind: "pr", draft: true, reviewer: "coyote" } },
  });
  assert.equal(pr.status, 200, pr.text);
  // The secret dynamic prop is masked; branch took its default.
  assert.deepEqual(pr.body.data.configured_props, {
    acme: { authProvisionId: accountId },
    kind: "pr",
    branch: "main",
    draft: true,
    reviewer: "**********",
  });
  const seen = await runAndRead(server, source.id);
  assert.equal(seen.project, null);
  assert.equal(seen.branch, "main");
  assert.equal(seen.reviewer, "coyote");
  assert.deepEqual(seen.activated, { project: null, branch: "main" });

  // New code and no props: the stored values, the secret included, are carried over.
  const code = fixture("dynamic-props.mjs").replace('"1.0.0"', '"1.0.1"');
  const updated = await server.api("PUT", `/v1/sources/${source.id}`, { body: { component_code: code } });
  assert.equal(updated.status, 200, updated.text);
  const again = await runAndRead(server, source.id);
  assert.equal(again.reviewer, "coyote");
  assert.equal(again.draft, true);

  // Code without additionalProps(): the dynamic values are dropped with their definitions.
  const plain = code.replace(
    "async additionalProps(previousPropDefs)",
    "async notAdditionalProps(previousPropDefs)",
  );
  const dropped = await server.api("PUT", `/v1/sources/${source.id}`, { body: { component_code: plain } });
  assert.equal(dropped.status, 200, dropped.text);
  assert.deepEqual(dropped.body.data.configured_props, { acme: { authProvisionId: accountId }, kind: "pr" });
  assert.equal((await runAndRead(server, source.id)).branch, null);
});
