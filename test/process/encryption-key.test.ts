/**
 * A node started with an encryption key that cannot open the secrets already in its store refuses to
 * start: one line and exit 1, on both drivers, before it seals anything new.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, test } from "node:test";
import pg from "pg";
import { dropSchema, freshSchema, schemaUrl, testPgUrl } from "../pg-schemas.ts";
import { processCleanup, type ServerProcess, startProcess } from "./server-process.ts";

const adminKey = "fnt_keychecktestkey0000000000000000";
const { running, tempDir } = processCleanup("fount-keycheck-");
const schemas: string[] = [];

after(async () => {
  await Promise.all(schemas.map(dropSchema));
});

const keyA = randomBytes(32).toString("base64");
const keyB = randomBytes(32).toString("base64");

/** A component with a secret prop: deploying it seals the secret with the node's key. */
const secretHolder = `export default {
  key: "secret-holder",
  name: "Secret holder",
  version: "0.0.1",
  props: { token: { type: "string", secret: true } },
  async run() {},
};`;

function start(env: NodeJS.ProcessEnv): ServerProcess {
  const p = startProcess({ PORT: "0", FOUNT_BOOTSTRAP_API_KEY: adminKey, ...env });
  running.add(p);
  return p;
}

async function stop(p: ServerProcess): Promise<void> {
  p.proc.kill("SIGTERM");
  assert.equal((await p.exited).code, 0, p.output());
  running.delete(p);
}

async function deploySecret(url: string): Promise<void> {
  const res = await fetch(`${url}/v1/sources`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
    body: JSON.stringify({ component_code: secretHolder, configured_props: { token: "s3cret" } }),
  });
  assert.equal(res.status, 200, await res.text());
}

/** Starts with key A, seals a secret, stops; a start with key B is refused; key A starts again. */
async function refusesAnotherKey(env: NodeJS.ProcessEnv): Promise<void> {
  const first = start({ ...env, FOUNT_ENCRYPTION_KEY: keyA });
  await deploySecret(await first.url());
  await stop(first);

  const wrong = start({ ...env, FOUNT_ENCRYPTION_KEY: keyB });
  const { code } = await wrong.exited;
  assert.equal(code, 1, wrong.output());
  const lines = wrong.output().trim().split("\n");
  assert.equal(lines.length, 1, wrong.output());
  assert.match(
    lines[0]!,
    /^fount: the encryption key \(FOUNT_ENCRYPTION_KEY\) cannot open the secrets already in this store: /,
  );

  const again = start({ ...env, FOUNT_ENCRYPTION_KEY: keyA });
  const me = await fetch(`${await again.url()}/v1/users/me`, {
    headers: { authorization: `Bearer ${adminKey}` },
  });
  assert.equal(me.status, 200, "the right key starts as before");
  await stop(again);
}

test("sqlite: a start with another encryption key than the secrets' is refused with one line, exit 1", async () => {
  await refusesAnotherKey({ FOUNT_DATA_DIR: tempDir() });
});

test("postgres: a node with another encryption key than the cluster's is refused with one line, exit 1", async () => {
  const schema = freshSchema();
  schemas.push(schema);
  const client = new pg.Client({ connectionString: testPgUrl });
  await client.connect();
  await client.query(`CREATE SCHEMA "${schema}"`);
  await client.end();
  // Each start has a data dir of its own, as separate nodes do: only the database is shared.
  await refusesAnotherKey({ DATABASE_URL: schemaUrl(schema), FOUNT_DATA_DIR: tempDir() });
});
