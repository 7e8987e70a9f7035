/**
 * Pipedream's GitLab sources, unmodified from their npm package (downloaded at test time, never
 * committed), deployed with `fount deploy <file>` against a GitLab API mock served by the test: async
 * options, a polling source (new-project) and webhook sources that register `this.http.endpoint` with
 * GitLab in `activate`, get GitLab's deliveries, answer with `http.respond` and unregister in `deactivate`.
 *
 * The app calls `https://${$auth.base_api_url}/api/v4`, so the mock speaks TLS with a self-signed
 * certificate, which the executors trust through FOUNT_EXECUTOR_CA_CERTS.
 */
import assert from "node:assert/strict";
import { readdirSync, rmSync } from "node:fs";
import https from "node:https";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { after, before, test } from "node:test";
import { bundleLocalComponent } from "../../src/cli/bundle.ts";
import { fount } from "../cli/run.ts";
import { startServer, type TestServer } from "../helpers.ts";
import { fetchPackage, selfSignedCertificate, trustInExecutors } from "./support.ts";

/** The version whose sources these tests know; bump it deliberately. */
const packageVersion = "0.5.6";
const deployTimeoutMs = 120_000;
const accessToken = "glpat-fount-test";

interface Project {
  id: number;
  name: string;
  path_with_namespace: string;
  created_at: string;
}

interface Hook {
  id: number;
  projectId: number;
  url: string;
  token: string;
  events: Record<string, unknown>;
}

/** Just the endpoints the sources call, with GitLab's shapes, and a log of what was asked. */
class GitLabMock {
  projects: Project[] = [];
  /** Each project's commits on `main`, newest first, as GitLab's Commits API gives them. */
  commits = new Map<number, Array<Record<string, unknown>>>();
  hooks = new Map<number, Hook>();
  requests: Array<{ method: string; path: string; query: URLSearchParams; auth: string | undefined }> = [];
  #nextHook = 1;
  #server: https.Server;

  constructor(tlsOptions: { key: string; cert: string }) {
    this.#server = https.createServer(tlsOptions, (req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () =>
        this.#handle(req.method ?? "GET", req.url ?? "/", req.headers.authorization, body, res),
      );
    });
  }

  listen(): Promise<string> {
    return new Promise((resolve) =>
      this.#server.listen(0, "127.0.0.1", () =>
        resolve(`127.0.0.1:${(this.#server.address() as AddressInfo).port}`),
      ),
    );
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  addProject(name: string): Project {
    const id = (this.projects.at(-1)?.id ?? 100) + 1;
    const project = {
      id,
      name,
      path_with_namespace: `ada/${name}`,
      created_at: new Date(Date.now() + id).toISOString(),
    };
    this.projects.push(project);
    return project;
  }

  #handle(
    method: string,
    rawUrl: string,
    auth: string | undefined,
    body: string,
    res: import("node:http").ServerResponse,
  ) {
    const url = new URL(rawUrl, "https://gitlab.test");
    this.requests.push({ method, path: url.pathname, query: url.searchParams, auth });
    const send = (status: number, data?: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(data === undefined ? "" : JSON.stringify(data));
    };
    if (auth !== `Bearer ${accessToken}`) return send(401, { message: "401 Unauthorized" });
    const p = url.pathname.replace(/^\/api\/v4/, "");
    if (method === "GET" && p === "/projects") {
      // Newest first, as GitLab sorts by default; id_after, per_page and page as GitLab reads them.
      const after = Number(url.searchParams.get("id_after") ?? 0);
      const perPage = Number(url.searchParams.get("per_page") ?? 20);
      const page = Number(url.searchParams.get("page") ?? 1);
      const list = this.projects.filter((x) => x.id > after).sort((a, b) => b.id - a.id);
      return send(200, list.slice((page - 1) * perPage, page * perPage));
    }
    let m = /^\/projects\/(\d+)\/repository\/commits$/.exec(p);
    if (m && method === "GET") {
      const perPage = Number(url.searchParams.get("per_page") ?? 20);
      return send(200, (this.commits.get(Number(m[1])) ?? []).slice(0, perPage));
    }
    m = /^\/projects\/(\d+)\/hooks$/.exec(p);
    if (m && method === "POST") {
      const { url: hookUrl, token, ...events } = JSON.parse(body || "{}");
      const hook = { id: this.#nextHook++, projectId: Number(m[1]), url: hookUrl, token, events };
      this.hooks.set(hook.id, hook);
      return send(201, { id: hook.id, url: hookUrl, project_id: hook.projectId, ...events });
    }
    m = /^\/projects\/(\d+)\/hooks\/(\d+)$/.exec(p);
    if (m && method === "DELETE") {
      if (!this.hooks.delete(Number(m[2]))) return send(404, { message: "404 Not found" });
      return send(204);
    }
    send(404, { message: "404 Not Found" });
  }
}

let skip: string | undefined;
let pkgDir: string;
let certDir: string;
let gitlab: GitLabMock;
let server: TestServer;
let env: Record<string, string>;
let userKey: string;
let accountId: string;

const source = (name: string) => path.join(pkgDir, "sources", name, `${name}.mjs`);

async function json(...args: string[]): Promise<any> {
  const res = await fount([...args, "--json"], env, deployTimeoutMs);
  assert.equal(res.code, 0, `fount ${args.join(" ")}: ${res.stderr}`);
  return JSON.parse(res.stdout);
}

before(async () => {
  const fetched = await fetchPackage("@pipedream/gitlab", packageVersion);
  if ("skip" in fetched) {
    skip = fetched.skip;
    return;
  }
  pkgDir = fetched.dir;
  const certs = selfSignedCertificate();
  certDir = certs.dir;
  const trust = trustInExecutors(certs.certFile);
  gitlab = new GitLabMock(certs);
  const baseApiUrl = await gitlab.listen();
  // The mock listens on loopback, which component code may not reach unless allowed.
  server = await startServer({}, { ...trust, FOUNT_EXECUTOR_ALLOW_HOSTS: "127.0.0.1,::1,localhost" });
  userKey = (await server.createUser("gitlab-user")).key;
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: userKey };
  // The $auth of an OAuth app, plus the app's custom field for self-managed GitLab.
  const credentials = { oauth_access_token: accessToken, oauth_uid: "42", base_api_url: baseApiUrl };
  accountId = (await json("accounts", "create", "gitlab", "--credentials", JSON.stringify(credentials))).id;
});

after(async () => {
  if (skip) return;
  await server?.close();
  await gitlab?.close();
  rmSync(pkgDir, { recursive: true, force: true });
  rmSync(certDir, { recursive: true, force: true });
});

test("every GitLab source of the package loads, with its props as Pipedream shows them", async (t) => {
  if (skip) return t.skip(skip);
  const names = readdirSync(path.join(pkgDir, "sources")).filter((n) => n !== "common");
  assert.ok(names.length >= 10, names.join(", "));
  for (const name of names) {
    const code = await bundleLocalComponent(source(name));
    const res = await server.api("POST", "/v1/components", { key: userKey, body: { component_code: code } });
    assert.equal(res.status, 200, `${name}: ${res.text}`);
    assert.equal(res.body.data.key, `gitlab-${name}`);
    const props = Object.fromEntries(res.body.data.configurable_props.map((p: any) => [p.name, p]));
    assert.equal(props.gitlab?.app, "gitlab", name);
    if (props.http)
      assert.equal(props.http.customResponse, true, `${name}: webhook sources answer GitLab themselves`);
    if (props.projectId) assert.equal(props.projectId.remoteOptions, true, name);
  }
});

test("projectId's options come from GET /projects through the account, one page at a time", async (t) => {
  if (skip) return t.skip(skip);
  gitlab.addProject("options-a");
  gitlab.addProject("options-b");
  const code = await bundleLocalComponent(source("new-issue"));
  const saved = await server.api("POST", "/v1/components", { key: userKey, body: { component_code: code } });
  assert.equal(saved.status, 200, saved.text);
  const res = await server.api("POST", `/v1/components/${saved.body.data.id}/props/projectId/options`, {
    key: userKey,
    body: { page: 0, configured_props: { gitlab: { authProvisionId: accountId } } },
  });
  assert.equal(res.status, 200, res.text);
  const options = res.body.data.options as Array<{ label: string; value: number }>;
  assert.ok(options.some((o) => o.label === "ada/options-a" && typeof o.value === "number"));
  const asked = gitlab.requests.findLast((r) => r.path === "/api/v4/projects")!;
  assert.equal(asked.query.get("owned"), "true");
  assert.equal(asked.query.get("page"), "1", "options' 0-based page becomes GitLab's 1-based one");
  assert.equal(asked.auth, `Bearer ${accessToken}`);
});

test("new-project: activate remembers the newest project, runs emit only projects created since, oldest first", async (t) => {
  if (skip) return t.skip(skip);
  gitlab.addProject("existing");
  const s = await json("deploy", source("new-project"), "--prop", `gitlab=${accountId}`);
  assert.deepEqual(s.configured_props.timer, { cron: null, interval_seconds: 900 });
  const first = await json("run", s.id);
  assert.equal(first.ok, true, JSON.stringify(first.error));
  assert.deepEqual(first.emits, []);
  assert.ok(first.logs.some((l: any) => l.message === "No new GitLab projects detected"));

  const a = gitlab.addProject("fresh-a");
  const b = gitlab.addProject("fresh-b");
  const ran = await json("run", s.id);
  assert.deepEqual(
    ran.emits.map((e: any) => [e.event.name, e.metadata.id, e.metadata.summary]),
    [
      ["fresh-a", a.id, "New project: fresh-a"],
      ["fresh-b", b.id, "New project: fresh-b"],
    ],
  );
  assert.equal(gitlab.requests.at(-1)!.query.get("id_after"), String(a.id - 1));
  assert.deepEqual((await json("run", s.id)).emits, [], "the last project id is kept in the db");
});

/** A GitLab `issues` webhook payload; `previous` set means an edit rather than a new issue. */
function issueEvent(id: number, title: string, previous: string | null) {
  return {
    object_kind: "issue",
    event_type: "issue",
    user: { name: "Ada Lovelace", username: "ada" },
    project: { id: 1 },
    object_attributes: {
      id,
      iid: id - 1000,
      title,
      created_at: "2025-01-01T10:00:00Z",
      action: previous ? "update" : "open",
    },
    changes: { updated_at: { previous, current: "2025-01-01T10:00:00Z" } },
  };
}

test("new-issue registers its endpoint as a project hook, checks GitLab's token, emits new issues, and unregisters", async (t) => {
  if (skip) return t.skip(skip);
  const project = gitlab.addProject("tracked");
  const s = await json(
    "deploy",
    source("new-issue"),
    "--prop",
    `gitlab=${accountId}`,
    "--prop",
    `projectId=${project.id}`,
  );
  const hook = [...gitlab.hooks.values()].find((h) => h.url === s.endpoint_url);
  assert.ok(hook, "activate created a hook pointing at the source's endpoint");
  assert.equal(hook.projectId, project.id);
  assert.deepEqual(hook.events, { issues_events: true });
  assert.match(hook.token, /^[0-9a-f-]{36}$/, "a uuid v4 secret token");

  const deliver = (payload: unknown, token: string) =>
    fetch(s.endpoint_url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-gitlab-event": "Issue Hook",
        "x-gitlab-token": token,
      },
      body: JSON.stringify(payload),
    });
  const forged = await deliver(issueEvent(1001, "forged", null), "wrong-token");
  assert.equal(forged.status, 404, "a request without GitLab's token is turned away");
  const created = await deliver(issueEvent(1002, "Crash on start", null), hook.token);
  assert.equal(created.status, 200);
  const edited = await deliver(
    issueEvent(1002, "Crash on start (edited)", "2025-01-01T09:00:00Z"),
    hook.token,
  );
  assert.equal(edited.status, 200, "edits are acknowledged but not emitted");

  const emitted = await json("events", s.id);
  assert.deepEqual(
    emitted.map((e: any) => [e.metadata.id, e.metadata.summary]),
    [[1002, "New issue by Ada Lovelace (ada): #2 Crash on start"]],
  );

  const logs = await fount(["logs", s.id, "--no-follow"], env);
  assert.match(logs.stdout, /Created "issues_events" webhook for project ID \d+/);
  await json("delete", s.id, "--yes");
  assert.ok(!gitlab.hooks.has(hook.id), "deactivate deleted the hook");
});

test("updating a webhook source to another project moves its hook (deactivate, then activate)", async (t) => {
  if (skip) return t.skip(skip);
  const one = gitlab.addProject("mr-one");
  const two = gitlab.addProject("mr-two");
  const s = await json(
    "deploy",
    source("new-merge-request"),
    "--prop",
    `gitlab=${accountId}`,
    "--prop",
    `projectId=${one.id}`,
  );
  const before = [...gitlab.hooks.values()].filter((h) => h.url === s.endpoint_url);
  assert.deepEqual(
    before.map((h) => [h.projectId, h.events]),
    [[one.id, { merge_requests_events: true }]],
  );

  await json("update", s.id, "--prop", `projectId=${two.id}`);
  const after = [...gitlab.hooks.values()].filter((h) => h.url === s.endpoint_url);
  assert.deepEqual(
    after.map((h) => h.projectId),
    [two.id],
    "the old hook is gone, the new one uses the same endpoint",
  );

  const res = await fetch(s.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json", "x-gitlab-token": after[0]!.token },
    body: JSON.stringify({
      object_kind: "merge_request",
      user: { name: "Grace Hopper", username: "grace" },
      object_attributes: {
        id: 77,
        title: "Add compiler",
        action: "open",
        created_at: "2025-02-01T00:00:00Z",
      },
    }),
  });
  assert.equal(res.status, 200);
  const emitted = await json("events", s.id);
  assert.deepEqual(
    emitted.map((e: any) => e.metadata.summary),
    ['New Merge Request: "Add compiler" by Grace Hopper (grace)'],
  );
  await json("delete", s.id, "--yes");
});

test("new-commit: a push emits the pushed commits though the source's meta.ts is NaN, with their arrival time and a warning", async (t) => {
  if (skip) return t.skip(skip);
  const project = gitlab.addProject("pushed");
  // The Commits API's shape: snake_case, so the source's `committedDate` is undefined and its
  // `ts: +new Date(committedDate)` is NaN with every real answer.
  const commit = (n: number) => ({
    id: `c0ffee${n}`.padEnd(40, "0"),
    short_id: `c0ffee${n}`,
    title: `Commit ${n}`,
    message: `Commit ${n}\n`,
    author_name: "Ada Lovelace",
    committed_date: `2025-03-0${n}T10:00:00.000+00:00`,
  });
  gitlab.commits.set(project.id, [commit(2), commit(1)]);
  const s = await json(
    "deploy",
    source("new-commit"),
    "--prop",
    `gitlab=${accountId}`,
    "--prop",
    `projectId=${project.id}`,
    "--prop",
    "refName=main",
  );
  const hook = [...gitlab.hooks.values()].find((h) => h.url === s.endpoint_url);
  assert.ok(hook, "activate created a push hook");
  const res = await fetch(s.endpoint_url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-gitlab-event": "Push Hook",
      "x-gitlab-token": hook.token,
    },
    body: JSON.stringify({
      object_kind: "push",
      ref: "refs/heads/main",
      total_commits_count: 2,
      project_id: project.id,
    }),
  });
  assert.equal(res.status, 200, await res.text());

  const emitted = await json("events", s.id);
  assert.deepEqual(
    emitted.map((e: any) => [e.metadata.id, e.metadata.ts]),
    [
      [commit(1).id, undefined],
      [commit(2).id, undefined],
    ],
  );
  const logs = await fount(["logs", s.id, "--no-follow"], env);
  assert.match(
    logs.stdout,
    /meta\.ts must be epoch ms, a Date or a date string, not NaN; the event was kept with its arrival time/,
  );
  await json("delete", s.id, "--yes");
});
