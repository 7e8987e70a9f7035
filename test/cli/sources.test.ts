/**
 * The source commands of the CLI (`deploy`, `update`, `describe`, `list sources`, `events`, `logs`,
 * `delete`, `run`, `accounts …`), run as a process against a real server, as a user would.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { fount, RunningFount } from "./run.ts";

/** An app file with a propDefinition and a method reading `$auth`, as Pipedream's app files have. */
const appFile = `export default {
  type: "app",
  app: "greeting",
  propDefinitions: {
    who: {
      type: "string",
      label: "Who",
      async options({ page }) {
        return [this.$auth.prefix + "ada", this.$auth.prefix + "grace"].map((v) => v + page);
      },
    },
  },
  methods: {
    greet(who) {
      return \`\${this.$auth.prefix ?? ""}hello \${who}\`;
    },
  },
};
`;

/** Shared helpers, imported relatively like `../common/base.mjs` in Pipedream's components. */
const commonFile = `export const deployedMessage = "deployed";
export function summary(text) { return "greeting: " + text; }
`;

/** A source that imports both: it emits in its deploy hook, logs, greets, and throws on request. */
const sourceFile = (version: string) => `import greeting from "../../greeting.app.mjs";
import { deployedMessage, summary } from "../common.mjs";

export default {
  key: "cli-test-hello",
  name: "Hello Source",
  version: "${version}",
  props: {
    greeting,
    db: "$.service.db",
    http: "$.interface.http",
    who: { propDefinition: [greeting, "who"] },
    times: { type: "integer", default: 1 },
    loud: { type: "boolean", optional: true },
  },
  hooks: {
    async deploy() {
      this.$emit({ message: deployedMessage }, { summary: "deploy hook" });
    },
  },
  async run(event) {
    console.log("running with", JSON.stringify(event.body ?? event));
    if (event.body?.fail || event.fail) throw new Error("asked to fail");
    for (let i = 0; i < this.times; i++) {
      const text = this.greeting.greet(this.who);
      this.$emit({ text: this.loud ? text.toUpperCase() : text, i, version: "${version}" }, { summary: summary(text) });
    }
  },
};
`;

let server: TestServer;
let env: Record<string, string>;
let dir: string;
let sourcePath: string;
let codeServer: http.Server;
let codeUrl: string;

before(async () => {
  // component_url fixtures are served on loopback, which the server may reach only when allowed.
  server = await startServer({ webhookAllowPrivate: true }, {}, { publishRegistry: true });
  const user = await server.createUser("cli-sources");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-sources-"));
  mkdirSync(path.join(dir, "sources", "hello"), { recursive: true });
  writeFileSync(path.join(dir, "greeting.app.mjs"), appFile);
  writeFileSync(path.join(dir, "sources", "common.mjs"), commonFile);
  sourcePath = path.join(dir, "sources", "hello", "hello.mjs");
  writeFileSync(sourcePath, sourceFile("1.0.0"));
  // A plain component served over HTTP, for `deploy <url>`.
  codeServer = http.createServer((_req, res) => {
    res.setHeader("content-type", "text/javascript");
    res.end(
      `export default { name: "From URL", version: "0.0.1", async run(e) { this.$emit({ from: "url", e }); } };`,
    );
  });
  await new Promise<void>((resolve) => codeServer.listen(0, "127.0.0.1", resolve));
  codeUrl = `http://127.0.0.1:${(codeServer.address() as AddressInfo).port}/from-url.mjs`;
});

after(async () => {
  await new Promise((resolve) => codeServer.close(resolve));
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `fount <args> --json` that must succeed; returns the parsed stdout. */
async function json(...args: string[]): Promise<any> {
  const res = await fount([...args, "--json"], env);
  assert.equal(res.code, 0, `fount ${args.join(" ")}: ${res.stderr}`);
  return JSON.parse(res.stdout);
}

async function account(prefix: string): Promise<string> {
  const a = await json("accounts", "create", "greeting", "--credentials", JSON.stringify({ prefix }));
  return a.id as string;
}

/** Deploys the hello source with an account and returns the source as `--json` prints it. */
async function deployHello(name: string, ...extra: string[]): Promise<any> {
  const apn = await account(`${name}:`);
  return json(
    "deploy",
    sourcePath,
    "--name",
    name,
    "--prop",
    `greeting=${apn}`,
    "--prop",
    "who=ada",
    ...extra,
  );
}

test("deploy bundles a local file with its relative imports, takes --prop values and prints id, name and endpoint", async () => {
  const apn = await account("p:");
  const res = await fount(
    [
      "deploy",
      sourcePath,
      "--name",
      "Hello One",
      "--prop",
      `greeting=${apn}`,
      "--prop",
      "who=grace",
      "--prop",
      "times=2",
    ],
    env,
  );
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /^Deployed hello-one \(dc_\w+\)\./m);
  assert.match(res.stdout, /^ID:\s+dc_\w+$/m);
  assert.match(res.stdout, /^Name:\s+hello-one$/m);
  assert.match(res.stdout, /^Endpoint:\s+http:\/\/127\.0\.0\.1:\d+\/e\/\w+$/m);
  assert.match(res.stdout, /^Component:\s+cli-test-hello \(sc_\w+\)$/m);
  // The app prop became an account reference, the integer JSON, the rest strings.
  assert.match(res.stdout, new RegExp(`greeting: \\{"authProvisionId":"${apn}"\\}`));
  assert.match(res.stdout, /times: 2$/m);
  assert.match(res.stdout, /who: "grace"$/m);

  const id = /^ID:\s+(dc_\w+)$/m.exec(res.stdout)![1]!;
  const ran = await json("run", id);
  assert.equal(ran.ok, true);
  assert.deepEqual(
    ran.emits.map((e: any) => e.event.text),
    ["p:hello grace", "p:hello grace"],
    "the app's method saw the account's $auth",
  );
});

test("deploy --json, describe, describe --code and list sources show the source; slugs work like IDs", async () => {
  const s = await deployHello("Described");
  assert.match(s.id, /^dc_/);
  assert.equal(s.name_slug, "described");
  assert.equal(s.component_key, "cli-test-hello");

  const text = await fount(["describe", "described"], env);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, new RegExp(`^ID:\\s+${s.id}$`, "m"));
  assert.match(text.stdout, /^Active:\s+yes$/m);
  assert.deepEqual((await json("describe", s.id)).configured_props, s.configured_props);

  const code = await fount(["describe", s.id, "--code"], env);
  assert.equal(code.code, 0, code.stderr);
  assert.match(code.stdout, /deployedMessage|"deployed"/, "the bundle holds the imported files");
  assert.doesNotMatch(code.stdout, /from "\.\.\//, "no relative import is left");

  const list = await json("list", "sources");
  assert.ok(list.some((x: any) => x.id === s.id));
  const table = await fount(["list", "so"], env);
  assert.equal(table.code, 0, table.stderr);
  assert.match(table.stdout, new RegExp(`│ ${s.id} │ described\\s+│ cli-test-hello │ yes`));
});

test("run passes --event, prints emits and logs; a throwing run exits 1 and is on $errors", async () => {
  const s = await deployHello("Runner");
  const ok = await fount(["run", s.id, "--event", '{"body": {"n": 1}}'], env);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /^Ran in \d+ ms: 1 event emitted\.$/m);
  assert.match(ok.stdout, /greeting: Runner:hello ada/);
  assert.match(ok.stdout, /\[log\] running with \{"n":1\}/);

  const failed = await fount(["run", s.id, "--event", '{"fail": true}'], env);
  assert.equal(failed.code, 1);
  assert.match(failed.stdout, /^Error: component_error: asked to fail$/m);

  const bad = await fount(["run", s.id, "--event", "{nope"], env);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--event must be JSON/);

  const logs = await fount(["logs", s.id, "--no-follow"], env);
  assert.equal(logs.code, 0, logs.stderr);
  const lines = logs.stdout.split("\n").filter((l) => /\[(log|error)\]/.test(l));
  assert.deepEqual(
    lines.map((l) => /\[(\w+)\] (.*)$/.exec(l)!.slice(1).join(" ")),
    ['log running with {"n":1}', 'log running with {"fail":true}', "error component_error: asked to fail"],
    "logs and errors merged, oldest first",
  );
});

test("events shows the last N oldest first, with the deploy hook's emit; --json gives the entries", async () => {
  const s = await deployHello("Eventful", "--prop", "times=3");
  await json("run", s.id);
  const all = await json("events", s.id, "-n", "100");
  assert.deepEqual(
    all.map((e: any) => e.event.message ?? e.event.i),
    ["deployed", 0, 1, 2],
  );
  const two = await fount(["events", "eventful", "-n", "2"], env);
  assert.equal(two.code, 0, two.stderr);
  const heads = two.stdout.split("\n").filter((l) => /^\d{4}-/.test(l));
  assert.equal(heads.length, 2);
  assert.match(heads[0]!, /\d+-\d+ {2}greeting: Eventful:hello ada$/);
  assert.match(two.stdout, /^ {2}\{"text":"Eventful:hello ada","i":2,"version":"1\.0\.0"\}$/m);
  const none = await fount(["events", s.id, "--event-name", "nothing-here"], env);
  assert.equal(none.code, 0, none.stderr);
  assert.match(none.stderr, /No events yet/);
  const badN = await fount(["events", s.id, "-n", "500"], env);
  assert.equal(badN.code, 2);
});

test("events -f prints the last events, then new ones as they are emitted", async () => {
  const s = await deployHello("Followed");
  const proc = new RunningFount(env, ["events", s.id, "-n", "1", "-f"]);
  try {
    await proc.waitFor(/as they come.* \(Ctrl-C to stop\)…/, "stderr");
    assert.match(proc.stdout, /deploy hook/);
    const hit = await fetch(s.endpoint_url, {
      method: "POST",
      body: '{"x":1}',
      headers: { "content-type": "application/json" },
    });
    assert.equal(hit.status, 200);
    await proc.waitFor(/"text":"Followed:hello ada"/);
    await json("run", s.id, "--event", '{"body": {"second": true}}');
    await proc.waitFor(/greeting: Followed:hello ada[\s\S]*greeting: Followed:hello ada/);
  } finally {
    await proc.stop();
  }
  assert.equal(proc.stdout.match(/deploy hook/g)?.length, 1, "nothing is printed twice");
});

test("logs follows $logs and $errors together", async () => {
  const s = await deployHello("Logged");
  const proc = new RunningFount(env, ["logs", s.id]);
  try {
    await proc.waitFor(/as they come.* \(Ctrl-C to stop\)…/, "stderr");
    await fount(["run", s.id, "--event", '{"fail": true}'], env);
    await proc.waitFor(/\[log\] running with \{"fail":true\}/);
    await proc.waitFor(/\[error\] component_error: asked to fail/);
  } finally {
    await proc.stop();
  }
});

test("deploy --follow prints the deploy hook's events, then new ones", async () => {
  const apn = await account("f:");
  const proc = new RunningFount(env, [
    "deploy",
    sourcePath,
    "--name",
    "Tail",
    "--prop",
    `greeting=${apn}`,
    "--prop",
    "who=ada",
    "--follow",
  ]);
  try {
    const id = (await proc.waitFor(/dc_\w+/)).trim();
    await proc.waitFor(/as they come.* \(Ctrl-C to stop\)…/, "stderr");
    await proc.waitFor(/deploy hook\n {2}\{"message":"deployed"\}/);
    await json("run", id);
    await proc.waitFor(/"text":"f:hello ada"/);
  } finally {
    await proc.stop();
  }
});

test("update merges --prop with the current props, swaps code from a file, renames, and turns the source off and on", async () => {
  const s = await deployHello("Updated", "--prop", "times=2");
  const upd = await json("update", s.id, "--prop", "loud=true");
  assert.equal(upd.configured_props.times, 2, "props not given keep their values");
  assert.equal(upd.configured_props.loud, true);
  assert.equal(upd.configured_props.who, "ada");
  const ran = await json("run", s.id);
  assert.equal(ran.emits[0].event.text, "UPDATED:HELLO ADA");

  const v2 = path.join(dir, "sources", "hello", "hello-v2.mjs");
  writeFileSync(v2, sourceFile("2.0.0"));
  const swapped = await fount(["update", "updated", v2, "--name", "Renamed"], env);
  assert.equal(swapped.code, 0, swapped.stderr);
  assert.match(swapped.stdout, /^Updated renamed \(dc_\w+\)\./m);
  const after = await json("describe", s.id);
  assert.equal(after.name_slug, "renamed");
  assert.notEqual(after.component_id, s.component_id);
  assert.equal(after.endpoint_url, s.endpoint_url, "the endpoint stays");
  assert.equal((await json("run", s.id)).emits[0].event.version, "2.0.0");

  assert.equal((await json("update", s.id, "--deactivate")).active, false);
  const refused = await fount(["run", s.id], env);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /inactive.*\(conflict\)/);
  assert.equal((await json("update", s.id, "--activate")).active, true);

  const nothing = await fount(["update", s.id], env);
  assert.equal(nothing.code, 2);
  assert.match(nothing.stderr, /Nothing to update/);
  const both = await fount(["update", s.id, "--activate", "--deactivate"], env);
  assert.equal(both.code, 2);
});

test("update keeps a secret prop that is not given again, with new props or new code", async () => {
  const secretSource = (v: string) => `export default {
  name: "Secretive",
  version: "${v}",
  props: { token: { type: "string", secret: true }, n: { type: "integer" } },
  async run() { this.$emit({ token: this.token, n: this.n, v: "${v}" }); },
};
`;
  const file = path.join(dir, "secretive.mjs");
  writeFileSync(file, secretSource("1"));
  const s = await json("deploy", file, "--prop", "token=s3cret", "--prop", "n=1");
  assert.equal(s.configured_props.token, "**********");
  await json("update", s.id, "--prop", "n=2");
  writeFileSync(file, secretSource("2"));
  await json("update", s.id, file);
  const ran = await json("run", s.id);
  assert.deepEqual(ran.emits[0].event, { token: "s3cret", n: 2, v: "2" });
  // A client that sends back the mask it was shown keeps the secret too.
  const put = await server.api("PUT", `/v1/sources/${s.id}`, {
    key: env.FOUNT_API_KEY,
    body: { configured_props: { token: "**********", n: 3 } },
  });
  assert.equal(put.status, 200, put.text);
  assert.deepEqual((await json("run", s.id)).emits[0].event, { token: "s3cret", n: 3, v: "2" });
});

test("update to code that drops a prop and adds one: --prop sets the new one, the dropped one is let go", async () => {
  const v1 = path.join(dir, "reshaped-v1.mjs");
  const v2 = path.join(dir, "reshaped-v2.mjs");
  const v3 = path.join(dir, "reshaped-v3.mjs");
  writeFileSync(
    v1,
    `export default { name: "Reshaped", version: "1", props: { old: { type: "string" }, kept: { type: "integer" } }, async run() { this.$emit({ old: this.old, kept: this.kept }); } };`,
  );
  writeFileSync(
    v2,
    `export default { name: "Reshaped", version: "2", props: { kept: { type: "integer" }, added: { type: "string" } }, async run() { this.$emit({ kept: this.kept, added: this.added }); } };`,
  );
  writeFileSync(
    v3,
    `export default { name: "Reshaped", version: "3", props: { kept: { type: "integer" } }, async run() { this.$emit({ kept: this.kept, v: 3 }); } };`,
  );
  const s = await json("deploy", v1, "--prop", "old=x", "--prop", "kept=7");
  const v2s = await json("update", s.id, v2, "--prop", "added=new");
  assert.deepEqual(v2s.configured_props, { kept: 7, added: "new" });
  assert.deepEqual((await json("run", s.id)).emits[0].event, { kept: 7, added: "new" });
  // New code alone: the props it still declares are kept, the others dropped.
  assert.deepEqual((await json("update", s.id, v3)).configured_props, { kept: 7 });
  assert.deepEqual((await json("run", s.id)).emits[0].event, { kept: 7, v: 3 });
});

test("deploy takes a URL and a registry key; a missing file is not taken for a key", async () => {
  const fromUrl = await json("deploy", codeUrl, "--name", "url-source");
  assert.equal(fromUrl.name_slug, "url-source");
  assert.equal((await json("run", fromUrl.id)).emits[0].event.from, "url");

  // Publishing needs an admin key; deploying by key works for anyone.
  const published = await fount(["registry", "publish", sourcePath], { ...env, FOUNT_API_KEY: adminKey });
  assert.equal(published.code, 0, published.stderr);
  const apn = await account("k:");
  const byKey = await json("deploy", "cli-test-hello", "--prop", `greeting=${apn}`, "--prop", "who=key");
  assert.equal(byKey.component_key, "cli-test-hello");
  assert.equal(byKey.name_slug, "hello-source");

  const missing = await fount(["deploy", "./no/such/file.mjs"], env);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /^fount: No file \.\/no\/such\/file\.mjs$/m);
  const unknownKey = await fount(["deploy", "no-such-key"], env);
  assert.equal(unknownKey.code, 1);
  assert.match(unknownKey.stderr, /\(not_found\)/);
});

test("deploy reports the server's prop errors and refuses a malformed --prop", async () => {
  const noAccount = await fount(["deploy", sourcePath, "--prop", "who=ada"], env);
  assert.equal(noAccount.code, 0, "an app prop without an account is allowed (apps without auth)");
  const badType = await fount(["deploy", sourcePath, "--prop", "who=ada", "--prop", "times=many"], env);
  assert.equal(badType.code, 1);
  assert.match(badType.stderr, /times must be an integer \(props_invalid\)/);
  const unknown = await fount(["deploy", sourcePath, "--prop", "who=ada", "--prop", "nope=1"], env);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /no prop named nope/);
  const malformed = await fount(["deploy", sourcePath, "--prop", "who"], env);
  assert.equal(malformed.code, 2);
  assert.match(malformed.stderr, /--prop takes name=value/);
});

test("deploy names the imported file, line and column of a syntax error found while bundling", async () => {
  // The mistake is in the app file the source imports, not in the file named on the command line.
  mkdirSync(path.join(dir, "broken", "sources", "s"), { recursive: true });
  writeFileSync(
    path.join(dir, "broken", "broken.app.mjs"),
    `export default {\n  type: "app",\n  app: "broken",\n  methods: {\n    m() {}\n    },\n  },\n};\n`,
  );
  const entry = path.join(dir, "broken", "sources", "s", "s.mjs");
  writeFileSync(
    entry,
    `import broken from "../../broken.app.mjs";\nexport default { name: "S", version: "0.0.1", props: { broken }, async run() {} };\n`,
  );
  const res = await fount(["deploy", entry], env);
  assert.equal(res.code, 1);
  assert.match(
    res.stderr,
    /^fount: \.\.\/\.\.\/broken\.app\.mjs:7:4: Expected ";" but found "," \(component_invalid\)$/m,
  );
});

test("delete removes the source; it is then unknown to every command", async () => {
  const s = await deployHello("Doomed");
  const res = await fount(["delete", "doomed", "--yes"], env);
  assert.equal(res.code, 0, res.stderr);
  assert.equal(res.stdout.trim(), `Deleted source doomed (${s.id}).`);
  for (const args of [
    ["describe", s.id],
    ["events", s.id],
    ["run", s.id],
    ["delete", s.id, "--yes"],
  ]) {
    const gone = await fount(args, env);
    assert.equal(gone.code, 1, args.join(" "));
    assert.match(gone.stderr, /\(not_found\)/);
  }
});

test("accounts create, list and delete; credentials are never printed; bad credentials are a usage error", async () => {
  const credsFile = path.join(dir, "creds.json");
  writeFileSync(credsFile, JSON.stringify({ prefix: "file:", secret: "s3cret" }));
  const created = await fount(
    ["accounts", "create", "greeting", "--credentials", `@${credsFile}`, "--name", "From file"],
    env,
  );
  assert.equal(created.code, 0, created.stderr);
  const id = /Connected greeting account (apn_\w+)\./.exec(created.stdout)?.[1];
  assert.ok(id, created.stdout);
  assert.doesNotMatch(created.stdout, /s3cret/);

  const list = await fount(["accounts", "list"], env);
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, new RegExp(`│ ${id} │ greeting │ From file`));
  assert.doesNotMatch(list.stdout, /s3cret/);
  assert.ok((await json("list", "accounts")).some((a: any) => a.id === id && a.credentials === undefined));

  for (const bad of ["[1]", "{nope", "@/no/such/file.json"]) {
    const res = await fount(["accounts", "create", "greeting", "--credentials", bad], env);
    assert.equal(res.code, bad.startsWith("@") ? 1 : 2, `${bad}: ${res.stderr}`);
  }
  const missing = await fount(["accounts", "create", "greeting"], env);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /Missing --credentials/);

  assert.equal((await json("accounts", "delete", id!)).id, id);
  assert.ok(!(await json("accounts", "list")).some((a: any) => a.id === id));
});
