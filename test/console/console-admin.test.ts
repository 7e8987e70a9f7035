/**
 * The web console in a real browser, part two: the source page's actions (pause, resume, run now, edit
 * props, delete after confirming), app accounts with `$auth` fields (never shown back) chosen by an app
 * prop, remote options and a propDefinition in the generated form, and the admin page (users,
 * organizations, members, API keys). Driven by roles and names; axe-core on each page.
 */
import assert from "node:assert/strict";
import { connect, createServer, type Socket } from "node:net";
import { test } from "node:test";
import type { Page } from "playwright-core";
import { adminKey } from "../helpers.ts";
import {
  axe,
  consoleSuite,
  fillComponentCode,
  focusedName,
  hasFocus,
  openPage,
  signInToSources,
  skip,
  wait,
  waitForFocus,
} from "./browser.ts";

const suite = consoleSuite();

const signIn = (page: Page, key: string) => signInToSources(page, suite.server.url, key);

/** Waits until `check` holds, polling the server (state changes there in its own time). */
async function eventually<T>(check: () => Promise<T | undefined>, what: string): Promise<T> {
  const deadline = Date.now() + wait;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

// An app prop, a prop whose options come from a method, and a propDefinition from the app.
const propsDemo = `const github = {
  type: "app",
  app: "github",
  propDefinitions: {
    repo: {
      type: "string",
      label: "Repository",
      async options() { return ["fount/alpha", "fount/beta"]; },
    },
  },
};
export default {
  key: "console-props-demo",
  name: "Props Demo",
  version: "0.0.1",
  type: "source",
  props: {
    github,
    http: "$.interface.http",
    color: {
      type: "string",
      label: "Color",
      async options() { return [{ label: "Red", value: "red" }, { label: "Blue", value: "blue" }]; },
    },
    repo: { propDefinition: [github, "repo"] },
    greeting: { type: "string", label: "Greeting", default: "hello" },
    // A prop name chosen to move the console's options request to another route if spliced in raw.
    "../../../users/me/webhooks?": {
      type: "string",
      label: "Hostile",
      optional: true,
      async options() { return ["x"]; },
    },
  },
  async run(event) {
    this.$emit({
      color: this.color,
      repo: this.repo,
      greeting: this.greeting,
      token_length: String(this.github.$auth.oauth_access_token).length,
    });
  },
};
`;

test("accounts, an app prop choosing one, remote options, a propDefinition, and the source page's actions", {
  skip,
}, async () => {
  const carol = await suite.server.createUser("carol");
  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 700 } });
  const { page, problems } = await openPage(context);
  await signIn(page, carol.key);

  // An app account, its $auth entered in password fields and never shown back.
  const token = "gho_consoletesttoken123456789";
  await page.getByRole("link", { name: "Accounts" }).click();
  await page.getByRole("heading", { name: "Accounts", level: 1 }).waitFor({ timeout: wait });
  await page.getByLabel("App", { exact: true }).fill("github");
  await page.getByLabel("Name (optional)").fill("carol's github");
  await page.getByLabel("Field 1 name").fill("oauth_access_token");
  const secretField = page.getByLabel("Field 1 value");
  assert.equal(await secretField.getAttribute("type"), "password");
  await secretField.fill(token);
  await page.getByRole("button", { name: "Connect account" }).click();
  const accountRow = page.getByRole("row", { name: /carol's github/ });
  await accountRow.waitFor({ timeout: wait });
  assert.match(await accountRow.innerText(), /github/);
  assert.ok(!(await page.content()).includes(token), "the token is not shown back");
  assert.equal(await page.getByLabel("Field 1 value").inputValue(), "", "the form is cleared");
  await axe(page, "accounts");

  // A component with an app prop, remote options and a propDefinition, through the generated form.
  await page.getByRole("link", { name: "Sources" }).click();
  await page.getByRole("link", { name: "New source" }).click();
  await fillComponentCode(page, propsDemo);
  await page.getByRole("button", { name: "Continue with this code" }).click();
  await page.getByRole("heading", { name: "New source: Props Demo" }).waitFor({ timeout: wait });
  await page.getByLabel("github", { exact: true }).selectOption({ label: "carol's github" });
  await page.getByRole("button", { name: "Load options for Color" }).click();
  await page
    .getByLabel("Color")
    .getByRole("option", { name: "Blue" })
    .waitFor({ state: "attached", timeout: wait });
  await page.getByLabel("Color").selectOption({ label: "Blue" });
  await page.getByRole("button", { name: "Load options for Repository" }).click();
  await page
    .getByLabel("Repository")
    .getByRole("option", { name: "fount/beta" })
    .waitFor({ state: "attached", timeout: wait });
  await page.getByLabel("Repository").selectOption({ label: "fount/beta" });
  // A prop's name is a path segment of its options request, whatever it holds.
  const hostile = page.waitForRequest((r) => r.method() === "POST" && r.url().includes("/options"));
  await page.getByRole("button", { name: "Load options for Hostile" }).click();
  const sent = new URL((await hostile).url());
  assert.match(sent.pathname, /^\/v1\/components\/[^/]+\/props\/[^/]+\/options$/, sent.href);
  await page.getByLabel("Source name (optional)").fill("demo");
  await axe(page, "new source form with an app prop and remote options");
  await page.getByRole("button", { name: "Deploy" }).click();
  await page.getByRole("heading", { name: "demo", exact: true, level: 1 }).waitFor({ timeout: wait });
  const sourceId = /#\/sources\/(dc_\w+)/.exec(page.url())?.[1];
  assert.ok(sourceId, page.url());
  const created = await suite.server.api("GET", `/v1/sources/${sourceId}`, { key: carol.key });
  assert.equal(created.body.data.configured_props.color, "blue");
  assert.equal(created.body.data.configured_props.repo, "fount/beta");
  const endpoint = await page.getByLabel("Endpoint URL").inputValue();
  await page.getByText(/^Live/).waitFor({ timeout: wait });

  // The component sees the chosen account's $auth and the chosen options.
  const hit = await fetch(endpoint, {
    method: "POST",
    body: "{}",
    headers: { "content-type": "application/json" },
  });
  assert.ok(hit.status < 300, String(hit.status));
  const events = page.getByRole("list", { name: "Events" });
  await events.getByRole("button").first().waitFor({ timeout: wait });
  const emitted = await eventually(async () => {
    const r = await suite.server.api("GET", `/v1/sources/${sourceId}/event_summaries?expand=event`, {
      key: carol.key,
    });
    return r.body.data?.[0]?.event as Record<string, unknown> | undefined;
  }, "the emitted event");
  assert.deepEqual(emitted, {
    color: "blue",
    repo: "fount/beta",
    greeting: "hello",
    token_length: token.length,
  });

  // Edit props on the Configuration tab.
  await page.getByRole("tab", { name: "Configuration" }).click();
  await page.getByLabel("Greeting").fill("bonjour");
  await page.getByLabel("Source name").fill("demo renamed");
  await axe(page, "source configuration");
  await page.getByRole("button", { name: "Save configuration" }).click();
  await page.getByText("Saved.").waitFor({ timeout: wait });
  await page.getByRole("heading", { name: "demo renamed", level: 1 }).waitFor({ timeout: wait });
  await eventually(async () => {
    const r = await suite.server.api("GET", `/v1/sources/${sourceId}`, { key: carol.key });
    return r.body.data.configured_props.greeting === "bonjour" && r.body.data.name === "demo renamed"
      ? true
      : undefined;
  }, "the saved greeting");

  // Pause, then resume.
  await page.getByRole("button", { name: "Pause" }).click();
  await page.getByText("Paused.").waitFor({ timeout: wait });
  await page.getByRole("button", { name: "Resume" }).waitFor({ timeout: wait });
  assert.match(await page.locator("main").innerText(), /· Paused ·/);
  assert.equal(
    (await suite.server.api("GET", `/v1/sources/${sourceId}`, { key: carol.key })).body.data.active,
    false,
  );
  await page.getByRole("button", { name: "Resume" }).click();
  await page.getByText("Resumed.").waitFor({ timeout: wait });
  await page.getByRole("button", { name: "Pause" }).waitFor({ timeout: wait });
  assert.equal(
    (await suite.server.api("GET", `/v1/sources/${sourceId}`, { key: carol.key })).body.data.active,
    true,
  );

  // Run now runs the component (no HTTP event): it emits with the edited greeting.
  await page.getByRole("button", { name: "Run now" }).click();
  await page.getByText("Run started.").waitFor({ timeout: wait });
  await eventually(async () => {
    const r = await suite.server.api("GET", `/v1/sources/${sourceId}/event_summaries?expand=event`, {
      key: carol.key,
    });
    const found = (r.body.data as Array<{ event: { greeting?: string } }>).find(
      (x) => x.event?.greeting === "bonjour",
    );
    return found ? true : undefined;
  }, "the run's event");

  // Delete asks first; Cancel keeps the source, Yes deletes it.
  // Focus goes to the question's safe answer, and back to Delete after Cancel.
  await page.getByRole("button", { name: "Delete" }).click();
  const confirm = page.getByRole("group", { name: "Confirm deletion" });
  await confirm.getByText("Delete demo renamed and its events?").waitFor({ timeout: wait });
  assert.equal(await focusedName(page), "BUTTON Cancel");
  await axe(page, "delete confirmation");
  await confirm.getByRole("button", { name: "Cancel" }).click();
  assert.equal(await focusedName(page), "BUTTON Delete");
  assert.equal((await suite.server.api("GET", `/v1/sources/${sourceId}`, { key: carol.key })).status, 200);
  await page.getByRole("button", { name: "Delete" }).click();
  await page.getByRole("button", { name: "Yes, delete" }).click();
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  await waitForFocus(page, "H1 Sources");
  assert.equal((await suite.server.api("GET", `/v1/sources/${sourceId}`, { key: carol.key })).status, 404);
  assert.equal(await page.getByRole("link", { name: "demo renamed" }).count(), 0);

  // The account is deleted from the Accounts page.
  await page.getByRole("link", { name: "Accounts" }).click();
  await page.getByRole("button", { name: "Delete account carol's github" }).click();
  await eventually(
    async () => ((await page.getByRole("row", { name: /carol's github/ }).count()) === 0 ? true : undefined),
    "the account's row to go",
  );
  assert.equal((await suite.server.api("GET", "/v1/accounts", { key: carol.key })).body.data.length, 0);

  assert.deepEqual(problems, []);
  await context.close();
});

test("an admin lists, creates and picks users and organizations, manages members and API keys", {
  skip,
}, async () => {
  const erin = await suite.server.createUser("erin");
  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 700 } });
  const { page, problems } = await openPage(context);
  await signIn(page, adminKey);
  await page.getByRole("link", { name: "Admin" }).click();
  await page.getByRole("heading", { name: "Admin", level: 1 }).waitFor({ timeout: wait });
  // Every user is listed, newest first, with the fields of the admin API.
  const users = page.getByRole("table", { name: /^Users: / });
  await users.getByRole("row", { name: /erin/ }).waitFor({ timeout: wait });
  assert.match(await users.getByRole("row").nth(1).innerText(), /erin\s+erin@example\.com\s+free\s+no/);
  assert.equal(await users.getByRole("rowheader", { name: "admin", exact: true }).count(), 1);
  await page.getByText("No organizations yet.").waitFor({ timeout: wait });
  await axe(page, "admin");

  // A user; their first key is shown once (and takes focus) and works; the list shows them at once.
  await page.getByLabel("Username").fill("dave");
  await page.getByLabel("Email", { exact: true }).fill("dave@example.com");
  await page.getByRole("button", { name: "Create user" }).click();
  const created = page.getByText(/^User dave created \(/);
  await created.waitFor({ timeout: wait });
  const daveId = /\((\w+)\)/.exec(await created.innerText())?.[1];
  assert.ok(daveId);
  const newKey = page.getByRole("region", { name: "New API key" });
  const daveKey = await newKey.locator("code").innerText();
  assert.equal(await hasFocus(newKey), true, "the new key has focus");
  const me = await suite.server.api("GET", "/v1/users/me", { key: daveKey });
  assert.equal(me.status, 200);
  assert.equal(me.body.data.username, "dave");
  await users.getByRole("rowheader", { name: "dave", exact: true }).waitFor({ timeout: wait });

  // An organization owned by another user, chosen by name; then dave added as a member and removed.
  await page.getByLabel("Organization name").fill("globex");
  await page.getByLabel("Owner").selectOption({ label: "erin (erin@example.com)" });
  await page.getByRole("button", { name: "Create organization" }).click();
  const orgNote = page.getByText(/^Organization globex created \(/);
  await orgNote.waitFor({ timeout: wait });
  const orgId = /\((\w+)\)/.exec(await orgNote.innerText())?.[1];
  assert.ok(orgId);
  const orgRow = page.getByRole("table", { name: /^Organizations: / }).getByRole("row", { name: /globex/ });
  await orgRow.waitFor({ timeout: wait });
  assert.match(await orgRow.innerText(), /globex\s+globex\s+erin/, "the owner by name");
  assert.equal((await suite.server.api("GET", `/v1/admin/orgs?limit=1`)).body.data[0].owner_id, erin.id);
  const memberOf = async () => {
    const r = await suite.server.api("GET", "/v1/users/me", { key: daveKey });
    return JSON.stringify(r.body.data).includes(orgId);
  };
  assert.equal(await memberOf(), false);
  await page.getByLabel("Organization", { exact: true }).selectOption({ label: "globex" });
  await page.getByLabel("User", { exact: true }).selectOption({ label: "dave (dave@example.com)" });
  await page.getByRole("button", { name: "Add member" }).click();
  await page.getByText("Member added.").waitFor({ timeout: wait });
  assert.equal(await memberOf(), true);
  await page.getByRole("button", { name: "Remove member" }).click();
  await page.getByText("Member removed.").waitFor({ timeout: wait });
  assert.equal(await memberOf(), false);

  // dave's keys, from his row: list, create one (shown once), revoke it.
  await page.getByRole("button", { name: "API keys of dave" }).click();
  const keysHeading = page.getByRole("heading", { name: "API keys of dave" });
  await keysHeading.waitFor({ timeout: wait });
  assert.equal(await hasFocus(keysHeading), true);
  const keys = page.getByRole("table", { name: "Keys of dave" });
  assert.equal(await keys.getByRole("button", { name: /^Revoke key / }).count(), 1);
  await page.getByRole("button", { name: "Create key" }).click();
  await page.getByText("Key created.").waitFor({ timeout: wait });
  const secondKey = await newKey.locator("code").innerText();
  assert.notEqual(secondKey, daveKey);
  assert.equal((await suite.server.api("GET", "/v1/users/me", { key: secondKey })).status, 200);
  await keys
    .getByRole("button", { name: /^Revoke key / })
    .nth(1)
    .waitFor({ timeout: wait });
  await axe(page, "admin with keys");
  await keys.getByRole("button", { name: `Revoke key ${secondKey.slice(0, 8)}` }).click();
  await page.getByText("Key revoked.").waitFor({ timeout: wait });
  // The Revoke button went with the key; focus is on the keys' heading, not lost to the page's body.
  assert.equal(await hasFocus(keysHeading), true);
  assert.equal((await suite.server.api("GET", "/v1/users/me", { key: secondKey })).status, 401);
  assert.equal((await suite.server.api("GET", "/v1/users/me", { key: daveKey })).status, 200);

  assert.deepEqual(problems, []);
  await context.close();

  // A user who is not an admin sees no Admin link.
  const other = await suite.browser.newContext();
  const { page: davePage } = await openPage(other);
  await signIn(davePage, daveKey);
  assert.equal(await davePage.getByRole("link", { name: "Admin" }).count(), 0);
  await other.close();
});

test("the Events stream resumes after a dropped connection, with nothing lost or shown twice", {
  skip,
}, async () => {
  const frank = await suite.server.createUser("frank");
  const made = await suite.server.api("POST", "/v1/sources", {
    key: frank.key,
    body: { key: "http-new-requests", name: "resumer" },
  });
  assert.equal(made.status, 200, made.text);
  const { id, endpoint_url: endpoint } = made.body.data as { id: string; endpoint_url: string };
  const send = async (path: string) => {
    const r = await fetch(`${endpoint}/${path}`, {
      method: "POST",
      body: "{}",
      headers: { "content-type": "application/json" },
    });
    assert.ok(r.status < 300, String(r.status));
  };
  // The browser reaches the server through a TCP relay that the test can cut: every connection through
  // it is dropped, and new ones refused, until it is let up again.
  const target = new URL(suite.server.url);
  const open = new Set<Socket>();
  let down = false;
  const relay = createServer((client) => {
    if (down) {
      client.destroy();
      return;
    }
    const upstream = connect(Number(target.port), target.hostname);
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      a.pipe(b);
      a.on("error", () => b.destroy());
      a.on("close", () => b.destroy());
      open.add(a);
      a.on("close", () => open.delete(a));
    }
  });
  await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
  relay.unref(); // never what keeps the test process alive, even if an assertion fails first
  const relayUrl = `http://127.0.0.1:${(relay.address() as { port: number }).port}`;
  const context = await suite.browser.newContext();
  // The dropped stream and its refused retries are the point here.
  const { page, problems } = await openPage(context, [
    /ERR_CONNECTION/,
    /ERR_EMPTY_RESPONSE/,
    /ERR_INCOMPLETE_CHUNKED_ENCODING/,
    /\/sse/,
  ]);
  const reconnects: string[] = [];
  page.on("request", (r) => {
    if (r.url().includes(`/sources/${id}/sse`)) reconnects.push(r.url());
  });
  await page.goto(relayUrl);
  await page.getByLabel("API key").fill(frank.key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  await page.goto(`${relayUrl}/#/sources/${id}`);
  await page.getByText(/^Live/).waitFor({ timeout: wait });
  const events = page.getByRole("list", { name: "Events" });
  await send("before");
  await events.getByRole("button", { name: /POST \/before/ }).waitFor({ timeout: wait });

  // The connection drops; events arrive meanwhile; when it is back they are replayed from Last-Event-ID.
  down = true;
  for (const socket of open) socket.destroy();
  await page.getByText(/^Connecting…/).waitFor({ timeout: wait });
  await send("while-away-1");
  await send("while-away-2");
  down = false;
  await page.getByText(/^Live/).waitFor({ timeout: wait });
  await events.getByRole("button", { name: /POST \/while-away-2/ }).waitFor({ timeout: wait });
  await events.getByRole("button", { name: /POST \/while-away-1/ }).waitFor({ timeout: wait });
  await send("after");
  await events.getByRole("button", { name: /POST \/after/ }).waitFor({ timeout: wait });
  assert.equal(await events.getByRole("button", { name: /POST \/before/ }).count(), 1, "no duplicate");
  assert.equal(await events.getByRole("listitem").count(), 4);
  // The page's own EventSource reconnected (no reload): what it missed came by the server's replay.
  assert.ok(reconnects.length >= 2, `the stream reconnected: ${reconnects.length}`);
  await axe(page, "source events after a reconnect");
  assert.deepEqual(problems, []);
  await context.close();
  for (const socket of open) socket.destroy();
  await new Promise((r) => relay.close(r));
});

test("a console link whose route parts are not IDs opens the sources, and calls no API path of its choosing", {
  skip,
}, async () => {
  const victim = await suite.server.createUser("route-victim");
  const keys = async () =>
    (await suite.server.api("GET", `/v1/admin/users/${victim.id}/keys`)).body.data.length as number;
  const before = await keys();
  const context = await suite.browser.newContext({ viewport: { width: 1000, height: 700 } });
  const { page } = await openPage(context);
  await signIn(page, adminKey);
  const called: string[] = [];
  page.on("request", (r) => called.push(new URL(r.url()).pathname));
  // `\` reads as `/` and `#` ends the path: the webhook page's calls would go to the admin's keys.
  await page.goto(`${suite.server.url}/#/webhooks/..\\admin\\users\\${victim.id}\\keys#`);
  await page.getByRole("heading", { name: "Sources", level: 1 }).waitFor({ timeout: wait });
  assert.deepEqual(
    called.filter((p) => p.includes("/admin/")),
    [],
  );
  assert.equal(await keys(), before);
  await context.close();
});
