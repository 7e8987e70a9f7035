/**
 * Test harness: a real Fount server on an ephemeral port with its own SQLite file in a temp dir, and
 * a small client that speaks HTTP to it like any other client.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after } from "node:test";
import type { BuildOptions, BuiltApp } from "../src/app.ts";
import { type Config, loadConfig } from "../src/config.ts";
import { derivedEndpointUrl } from "../src/endpoint-origin.ts";
import { mountsUnder } from "../src/runtime/executors/scratch.ts";
import type { Storage } from "../src/storage/port.ts";
import { dropSchema, freshSchema, openTestPostgres } from "./pg-schemas.ts";

export const adminKey = "fnt_testadminkey0000000000000000000";

export interface TestServer {
  /** The API and console's base URL. */
  url: string;
  /**
   * The base URL of the endpoint listener as bound (`http://127.0.0.1:<port>`); a source's endpoint URL
   * is `${endpoints}/e/<id>` unless FOUNT_ENDPOINT_URL says otherwise. Prefer the source's `endpoint_url`.
   */
  endpoints: string;
  built: BuiltApp;
  dataDir: string;
  /** Calls the API as `key` (default: the admin). */
  api: (method: string, path: string, options?: RequestOptions) => Promise<ApiResponse>;
  /** Creates a user through the admin API and returns its id and key. */
  createUser: (username: string, plan?: "free" | "paid") => Promise<{ id: string; key: string }>;
  close: () => Promise<void>;
}

export interface RequestOptions {
  key?: string | null;
  body?: unknown;
  /** Raw body text, sent as is (with `contentType`, default application/json). */
  raw?: string;
  contentType?: string;
  headers?: Record<string, string>;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

/** The schema of each data folder a test passed in: a server restarted on that folder finds its data. */
const schemasByDataDir = new Map<string, string>();

/**
 * The PostgreSQL store of a test server: a fresh schema, dropped when the server closes, or for a data
 * folder the test gave (to restart a server on it) one schema per folder, kept until the test that
 * first used it ends (`after` called inside a test runs when that test ends, so every test that adds a
 * folder's schema while none is kept registers the drop anew; a schema left behind by a later test was
 * what leaked before).
 */
export async function testPostgresFor(dataDir: string | undefined): Promise<Storage> {
  if (dataDir === undefined) return openTestPostgres();
  let schema = schemasByDataDir.get(dataDir);
  if (schema === undefined) {
    schema = freshSchema();
    if (schemasByDataDir.size === 0) {
      after(async () => {
        const kept = [...schemasByDataDir.values()];
        schemasByDataDir.clear();
        await Promise.all(kept.map(dropSchema));
      });
    }
    schemasByDataDir.set(dataDir, schema);
  }
  return openTestPostgres(schema);
}

/**
 * Calls a server's API as `options.key` (default: the admin; null: no key), as any HTTP client does; a
 * `text/event-stream` answer is not read to its end, which never comes (its text is empty).
 */
export function apiClient(url: string): TestServer["api"] {
  return async (method, p, options = {}) => {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    const key = options.key === undefined ? adminKey : options.key;
    if (key !== null) headers.authorization = `Bearer ${key}`;
    let body: string | undefined;
    if (options.raw !== undefined) body = options.raw;
    else if (options.body !== undefined) body = JSON.stringify(options.body);
    if (body !== undefined) headers["content-type"] = options.contentType ?? "application/json";
    const res = await fetch(url + p, { method, headers, body });
    // A stream's end never comes: its answer is read as empty.
    if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      await res.body?.cancel();
      return { status: res.status, headers: res.headers, body: undefined, text: "" };
    }
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON: leave the text.
    }
    return { status: res.status, headers: res.headers, body: parsed, text };
  };
}

export async function startServer(
  overrides: Partial<Config> = {},
  env: NodeJS.ProcessEnv = {},
  /**
   * Options of `buildApp` (a logger writing to a stream, say); default: no logger, and the registry
   * folder is not published (`publishRegistry: true` for the tests that deploy, list or walk registry
   * components: publishing builds and inspects each in an executor of its own, about 0.3 s of CPU a
   * start; test/http/registry.test.ts checks the publishing itself).
   */
  buildOptions: BuildOptions = {},
): Promise<TestServer> {
  const dataDir = overrides.dataDir ?? mkdtempSync(path.join(os.tmpdir(), "fount-test-"));
  const config = loadConfig(
    {
      FOUNT_BOOTSTRAP_API_KEY: adminKey,
      FOUNT_RATE_LIMIT: "0",
      // Route-wide tests send many wrong keys from 127.0.0.1; the throttle's own test turns it on.
      FOUNT_AUTH_FAILURE_LIMIT: "0",
      // One npm cache for every test server, so packages download once per machine.
      FOUNT_NPM_CACHE: path.join(os.tmpdir(), "fount-test-npm-cache"),
      // Tests that look at an owner's scratch folder or process start it themselves; spares have
      // their own tests (test/http/spares.test.ts).
      FOUNT_EXECUTOR_SPARES: "0",
      ...env,
    },
    { dataDir, port: 0, endpointPort: 0, ...overrides },
  );
  // FOUNT_TEST_STORE=postgres runs the server on a fresh schema of the local PostgreSQL (dropped when
  // the server closes) instead of a SQLite file.
  const store =
    process.env.FOUNT_TEST_STORE === "postgres" ? await testPostgresFor(overrides.dataDir) : undefined;
  let built: BuiltApp | undefined;
  let bound: { url: string; endpoints: string };
  try {
    // Loaded here, not with this file: the process tests import it for its small helpers only, and
    // the app's 1,100 modules cost about 0.7 s of CPU to load.
    const { buildApp } = await import("../src/app.ts");
    built = await buildApp(config, {
      logger: false,
      publishRegistry: false,
      ...(store ? { store } : {}),
      ...buildOptions,
    });
    bound = await built.listen({ host: "127.0.0.1", port: 0, endpointPort: 0 });
  } catch (err) {
    // A server that fails to start must not leave its executors or store open: the file would hang.
    await (built ? built.app.close() : store?.close())?.catch(() => undefined);
    if (!overrides.dataDir) rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  const { url, endpoints } = bound;
  useBoundUrls(built, env, bound);

  const api = apiClient(url);

  const createUser = async (username: string, plan: "free" | "paid" = "free") => {
    const res = await api("POST", "/v1/admin/users", {
      body: { username, email: `${username}@example.com`, plan },
    });
    if (res.status !== 200) throw new Error(`createUser failed: ${res.status} ${res.text}`);
    return { id: res.body.data.id as string, key: res.body.data.api_key as string };
  };

  const started = built;
  return {
    url,
    endpoints,
    built: started,
    dataDir,
    api,
    createUser,
    close: async () => {
      await started.app.close();
      if (!overrides.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Generated URLs name the ports a test server was given: PUBLIC_URL unless the test set it, and the
 * endpoint URL (PUBLIC_URL's host on the endpoint listener's port) unless it set FOUNT_ENDPOINT_URL.
 */
export function useBoundUrls(
  built: BuiltApp,
  env: NodeJS.ProcessEnv,
  bound: { url: string; endpoints: string },
): void {
  const config = built.services.config;
  if (!env.PUBLIC_URL) config.publicUrl = bound.url;
  if (!env.FOUNT_ENDPOINT_URL)
    config.endpointUrl = derivedEndpointUrl(config.publicUrl, Number(new URL(bound.endpoints).port));
}

/**
 * Unmounts the scratch tmpfs a SIGKILLed server left under `dir` (runtime/executors/scratch.ts), so
 * the test can remove the folder; a server's next start would do the same.
 */
export function unmountScratchUnder(dir: string): void {
  for (const point of mountsUnder(realpathSync(dir))) {
    try {
      execFileSync("umount", ["-l", point], { stdio: "ignore" });
    } catch {}
  }
}

/** A port nobody listens on now on 127.0.0.1: the kernel picks one, then it is released for the caller. */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port!;
}

/**
 * `n` different ports nobody listens on now on 127.0.0.1. Each is held until all are picked: two calls
 * of `freePort` in a row may get the same port back (the first is released before the second is asked),
 * and a server given it as both PORT and FOUNT_ENDPOINT_PORT refuses to start.
 */
export async function freePorts(n: number): Promise<number[]> {
  const probes = Array.from({ length: n }, () => net.createServer());
  try {
    for (const probe of probes) await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    return probes.map((probe) => (probe.address() as net.AddressInfo).port);
  } finally {
    await Promise.all(probes.map((probe) => new Promise<void>((resolve) => probe.close(() => resolve()))));
  }
}

/**
 * Runs `script` in a plain node process (no permission model) under `uid`: what it printed, or the error
 * code. What the kernel alone allows an executor uid, as after a bypass of the permission model.
 */
export function asUid(uid: number, script: string): string {
  try {
    return execFileSync(process.execPath, ["-e", script], {
      uid,
      gid: uid,
      env: {},
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    }).trim();
  } catch (err) {
    const stderr = String((err as { stderr?: unknown }).stderr ?? "");
    return /\b(EACCES|EPERM|ENOENT)\b/.exec(stderr)?.[1] ?? stderr;
  }
}

/** What `runNode` saw: the exit code, or "alive" when it was still running at its deadline and killed. */
export interface NodeRun {
  code: number | null | "alive";
  out: string;
  err: string;
}

/**
 * Runs `node <args>` to its end in the background (tests that need processes side by side, or one that
 * must exit on its own), with its stdout and stderr; one still running after `killAfterMs` is killed.
 */
export function runNode(args: string[], killAfterMs: number): Promise<NodeRun> {
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stderr.on("data", (d) => {
    err += d;
  });
  return new Promise((resolve) => {
    let alive = false;
    const timer = setTimeout(() => {
      alive = true;
      child.kill("SIGKILL");
    }, killAfterMs);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code: alive ? "alive" : code, out, err });
    });
  });
}
