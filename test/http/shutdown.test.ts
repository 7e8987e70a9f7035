/**
 * The real process (`src/main.ts`): what the first and later starts print, and a SIGTERM that lets the
 * request in flight finish, exits 0 and leaves a store that opens again. With FOUNT_TEST_STORE=postgres
 * (test/http-postgres) the process runs on a fresh schema of the local PostgreSQL.
 */
import assert from "node:assert/strict";
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { openPostgresStorage } from "../../src/storage/postgres/driver.ts";
import { openSqliteStorage } from "../../src/storage/sqlite/driver.ts";
import { freePorts } from "../helpers.ts";
import { dropSchema, freshSchema, schemaUrl, testPgUrl } from "../pg-schemas.ts";

const root = path.resolve(import.meta.dirname, "../..");
const nodeBin = path.join(root, "node_modules/.bin/node");
// Only the wait for the child process is bounded by wall-clock time, and generously (a cold start
// compiles TypeScript on the fly).
const processTimeoutMs = 30_000;

let dataDir: string;
/** The PostgreSQL schema of the process's store, on that driver (created by its first start). */
const schema = process.env.FOUNT_TEST_STORE === "postgres" ? freshSchema("fount_shutdown") : undefined;
before(() => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-shutdown-"));
});
after(async () => {
  rmSync(dataDir, { recursive: true, force: true });
  if (schema) await dropSchema(schema);
});

interface Fount {
  child: ChildProcessWithoutNullStreams;
  url: string;
  /** Plain lines the process printed (not its JSON logs). */
  printed: string[];
  /** Parsed JSON log lines. */
  logs: Array<Record<string, unknown>>;
  /** Resolves once a line (printed or log) satisfies the predicate. */
  waitFor: (what: string, match: (line: string) => boolean) => Promise<string>;
  exited: Promise<number | null>;
}

async function startFount(): Promise<Fount> {
  const [port, endpointPort] = await freePorts(2);
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of Object.keys(env)) {
    if (
      name.startsWith("FOUNT_") ||
      ["PORT", "HOST", "PUBLIC_URL", "DATABASE_URL", "LOG_LEVEL"].includes(name)
    ) {
      delete env[name];
    }
  }
  Object.assign(env, {
    FOUNT_DATA_DIR: dataDir,
    ...(schema ? { DATABASE_URL: schemaUrl(schema) } : {}),
    FOUNT_NPM_CACHE: path.join(os.tmpdir(), "fount-test-npm-cache"),
    PORT: String(port),
    FOUNT_ENDPOINT_PORT: String(endpointPort),
    HOST: "127.0.0.1",
    // At trace a request's arrival is logged ("incoming request"): the first test waits for it.
    LOG_LEVEL: "trace",
  });
  const child = spawn(nodeBin, ["src/main.ts"], { cwd: root, env, stdio: ["pipe", "pipe", "pipe"] });
  const lines: string[] = [];
  const printed: string[] = [];
  const logs: Array<Record<string, unknown>> = [];
  const waiters: Array<{ match: (line: string) => boolean; resolve: (line: string) => void }> = [];
  let stderr = "";
  let buffered = "";
  const onLine = (line: string) => {
    lines.push(line);
    if (line.startsWith("{")) {
      try {
        logs.push(JSON.parse(line));
      } catch {
        printed.push(line);
      }
    } else printed.push(line);
    for (const w of [...waiters]) {
      if (w.match(line)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(line);
      }
    }
  };
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    buffered += chunk;
    let nl = buffered.indexOf("\n");
    while (nl >= 0) {
      onLine(buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
      nl = buffered.indexOf("\n");
    }
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const waitFor = (what: string, match: (line: string) => boolean) => {
    const seen = lines.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(new Error(`Fount did not log ${what}; stdout:\n${lines.join("\n")}\nstderr:\n${stderr}`)),
        processTimeoutMs,
      );
      waiters.push({
        match,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      });
      void exited.then((code) => {
        clearTimeout(timer);
        reject(
          new Error(
            `Fount exited (${code}) before logging ${what}; stdout:\n${lines.join("\n")}\nstderr:\n${stderr}`,
          ),
        );
      });
    });
  };
  await waitFor("that it listens", (l) => l.startsWith("Fount is listening on "));
  return { child, url: `http://127.0.0.1:${port}`, printed, logs, waitFor, exited };
}

async function exitCode(fount: Fount): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      fount.child.kill("SIGKILL");
      reject(new Error("Fount did not exit after SIGTERM"));
    }, processTimeoutMs);
  });
  try {
    return await Promise.race([fount.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function get(url: string, key: string): Promise<{ status: number; body: any }> {
  return fetch(url, { headers: { authorization: `Bearer ${key}` } }).then(async (r) => ({
    status: r.status,
    body: await r.json(),
  }));
}

let firstKey = "";
let inFlightWebhook = "";
let inFlightConnection: string | undefined;

test("the first start prints the URL and an admin key that works, and SIGTERM lets a request in flight finish", async () => {
  const fount = await startFount();
  try {
    assert.ok(fount.printed[0]!.includes(`Fount is listening on ${fount.url}`), fount.printed[0]);
    const keyLine = fount.printed.find((l) => /^\s+fnt_[A-Za-z0-9]+$/.test(l));
    assert.ok(keyLine, `a key is printed:\n${fount.printed.join("\n")}`);
    firstKey = keyLine.trim();
    const me = await get(`${fount.url}/v1/users/me`, firstKey);
    assert.equal(me.status, 200);
    assert.equal(me.body.data.username, "admin");

    // A request whose body is still arriving when the signal comes.
    const body = JSON.stringify({ url: "https://example.com/in-flight", name: "in flight" });
    const response = new Promise<{ status: number; text: string; connection: string | undefined }>(
      (resolve, reject) => {
        const req = http.request(`${fount.url}/v1/webhooks`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${firstKey}`,
            "content-type": "application/json",
            "content-length": Buffer.byteLength(body),
          },
        });
        req.on("response", (res) => {
          let text = "";
          res.setEncoding("utf8").on("data", (c: string) => {
            text += c;
          });
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, text, connection: res.headers.connection }),
          );
        });
        req.on("error", reject);
        req.write(body.slice(0, 10));
        void fount
          .waitFor(
            "the incoming request",
            (l) => l.includes('"incoming request"') && l.includes("/v1/webhooks"),
          )
          .then(() => {
            fount.child.kill("SIGTERM");
            return fount.waitFor("that it shuts down", (l) => l.includes("shutting down"));
          })
          .then(() => req.end(body.slice(10)), reject);
      },
    );
    const res = await response;
    assert.equal(res.status, 200, res.text);
    inFlightWebhook = JSON.parse(res.text).data.id;
    inFlightConnection = res.connection;
    assert.equal(await exitCode(fount), 0);
  } finally {
    if (fount.child.exitCode === null) fount.child.kill("SIGKILL");
  }

  // The store is consistent: it opens, and holds what the last request wrote.
  const store = schema
    ? await openPostgresStorage({ url: testPgUrl, schema, poolSize: 1 })
    : openSqliteStorage({ dataDir });
  try {
    await store.ping();
    assert.equal((await store.getWebhook(inFlightWebhook))?.name, "in flight");
  } finally {
    await store.close();
  }
});

test("a response finished during shutdown closes its connection, so the exit does not wait for keep-alive", () => {
  assert.ok(inFlightWebhook, "the first start ran");
  assert.equal(inFlightConnection, "close");
});

test("a later start on the same store prints no key, and the first key still works", async () => {
  assert.ok(firstKey, "the first start ran");
  const fount = await startFount();
  try {
    assert.ok(
      fount.printed.every((l) => !/fnt_/.test(l) && !/API key/.test(l)),
      `no key printed:\n${fount.printed.join("\n")}`,
    );
    const list = await get(`${fount.url}/v1/users/me/webhooks`, firstKey);
    assert.equal(list.status, 200);
    assert.deepEqual(
      list.body.data.map((w: any) => w.id),
      [inFlightWebhook],
    );
    // A signal right after a request: still a clean exit.
    fount.child.kill("SIGTERM");
    assert.equal(await exitCode(fount), 0);
  } finally {
    if (fount.child.exitCode === null) fount.child.kill("SIGKILL");
  }
});
