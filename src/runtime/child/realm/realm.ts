/**
 * Main module of a realm: a worker thread that runner.ts starts in the owner's executor process for
 * one source (or one inspection), so the source has globals, a module cache and a heap cap of its
 * own and can be stopped alone. It loads the component, runs the source's batches of invocations one
 * after another, and answers through runner.ts, which stamps every message with the source.
 * Imports only node: built-ins and its siblings, so it needs read access to this folder alone.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { setSourceMapsSupport, syncBuiltinESMExports } from "node:module";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import util from "node:util";
import workerThreads from "node:worker_threads";
import type { SerializedError } from "../../../errors.ts";
import type { HttpResponse, LogEntry } from "../../types.ts";
import {
  declaredPropDefs,
  dynamicPropMetas,
  dynamicProps,
  InvalidComponent,
  isLoaded,
  loadComponent,
} from "../component/definition.ts";
import { withParsedBody } from "../component/http-body.ts";
import { componentInstance, Invocation, optionsCall } from "../component/instance.ts";
import { installEgressGuard } from "../guards/egress-guard.ts";
import { jsonTextTooDeep, maxBodyDepth, maxValueDepth } from "../guards/json-depth.ts";
import type {
  BatchConfig,
  BatchItem,
  BatchMessage,
  ChildInit,
  FromChild,
  ItemResult,
  ToChild,
} from "../protocol.ts";
import { installPipedreamApi } from "./pipedream-api.ts";

/**
 * While a batch runs longer than this, finished results are flushed before the next item starts (or
 * from a timer while an item awaits), so the parent times and blames the right invocation; a batch
 * of quick invocations still answers with one message.
 */
const FLUSH_MS = 2;
/** Results holding more emitted JSON than this are sent at once, so no single message grows huge. */
const FLUSH_CHARS = 4 * 1024 * 1024;
const MAX_STACK_CHARS = 16 * 1024;

/** Output written outside any invocation: at most this many chunks per window reach the runner. */
const STRAY_OUTPUT_PER_WINDOW = 20;
const STRAY_OUTPUT_WINDOW_MS = 10_000;

const port = workerThreads.parentPort;
if (!port) {
  process.stderr.write("realm.ts runs as a worker thread of runner.ts\n");
  process.exit(1);
}
const realExit = process.exit.bind(process);
const init = workerThreads.workerData as ChildInit;
// Each realm has its own `net` module, so each installs the egress check before any component loads.
if (init.egress) installEgressGuard(init.egress);
// Requests to https://api.pipedream.com go to this server's API over the realm's channel; hooked here,
// before any component loads, like the egress check.
const answerApi = init.pipedreamApi
  ? installPipedreamApi(init.pipedreamApi.bodyLimit, (id, request) => send({ t: "api", id, request }))
  : undefined;

// The realm's channel and worker creation are the runner's, not the component's: a component that
// could post on the port could flood the runner, and its own workers would escape the realm's heap
// cap. The process needs --allow-worker for the runner; this keeps it from component code.
(workerThreads as { parentPort: unknown }).parentPort = null;
workerThreads.Worker = function Worker() {
  throw Object.assign(new Error("Access to this API has been restricted"), { code: "ERR_ACCESS_DENIED" });
} as unknown as typeof workerThreads.Worker;

type Context = { inv: Invocation } | { inspect: number };
const als = new AsyncLocalStorage<Context>();
/** Invocations whose code is running now, and inspections in progress: who to blame for a fatal error. */
const running = new Set<Invocation>();
const inspecting = new Set<number>();
const dbs = new Map<string, { v: number; data: Map<string, string> }>();

function send(message: FromChild): void {
  port!.postMessage(message);
}

function currentInvocation(): Invocation | undefined {
  const ctx = als.getStore();
  return ctx && "inv" in ctx ? ctx.inv : undefined;
}

// ---- the sandboxed process's globals ------------------------------------------------------------

/** `process.env` holds only `PD_COMPONENT` of the invocation whose code reads it. */
const envWrites = new Map<string, Record<string, string>>();
function envOf(): Record<string, string> {
  const inv = currentInvocation();
  const sid = inv?.sourceId ?? "";
  const own = envWrites.get(sid) ?? {};
  return inv ? { ...own, PD_COMPONENT: sid } : { ...own };
}
const envProxy = new Proxy<Record<string, string>>(
  {},
  {
    get: (_t, key) => (typeof key === "string" ? envOf()[key] : undefined),
    has: (_t, key) => typeof key === "string" && key in envOf(),
    ownKeys: () => Object.keys(envOf()),
    getOwnPropertyDescriptor: (_t, key) => {
      const env = envOf();
      if (typeof key !== "string" || !(key in env)) return undefined;
      return { value: env[key], writable: true, enumerable: true, configurable: true };
    },
    set: (_t, key, value) => {
      if (typeof key !== "string") return false;
      const sid = currentInvocation()?.sourceId ?? "";
      envWrites.set(sid, { ...envWrites.get(sid), [key]: String(value) });
      return true;
    },
    deleteProperty: (_t, key) => {
      const own = envWrites.get(currentInvocation()?.sourceId ?? "");
      if (own && typeof key === "string") delete own[key];
      return true;
    },
  },
);
Object.defineProperty(process, "env", {
  value: envProxy,
  enumerable: true,
  configurable: false,
  writable: false,
});

// Stack traces of bundles that carry a source map point at the author's code, not the bundle.
setSourceMapsSupport(true);

// Temporary files go to the owner's scratch folder, the only place the process may write.
os.tmpdir = () => init.scratchDir;
syncBuiltinESMExports();

/** Stray output (a timer left behind, module top level) is cut, so a flood stays in the realm. */
const stray = { windowStart: 0, count: 0 };
function strayAllowed(): boolean {
  const now = Date.now();
  if (now - stray.windowStart >= STRAY_OUTPUT_WINDOW_MS) {
    stray.windowStart = now;
    stray.count = 0;
  }
  return stray.count++ < STRAY_OUTPUT_PER_WINDOW;
}

/** console output of an invocation becomes its logs; outside one it reaches the pool's logger. */
for (const level of ["log", "info", "warn", "error", "debug"] as const) {
  const original = console[level].bind(console);
  console[level] = (...args: unknown[]) => {
    const inv = currentInvocation();
    if (inv?.log(level, util.format(...args))) return;
    if (strayAllowed()) original(util.format(...args).slice(0, 2000));
  };
}
for (const [stream, level] of [
  [process.stdout, "log"],
  [process.stderr, "error"],
] as const) {
  const original = stream.write.bind(stream) as (...args: unknown[]) => boolean;
  stream.write = ((chunk: unknown, encoding?: unknown, callback?: unknown) => {
    const inv = currentInvocation();
    if (inv && !inv.closed) {
      const text = typeof chunk === "string" ? chunk : Buffer.from(chunk as Uint8Array).toString("utf8");
      inv.log(level as LogEntry["level"], text.endsWith("\n") ? text.slice(0, -1) : text);
      const done = typeof encoding === "function" ? encoding : callback;
      if (typeof done === "function") process.nextTick(done as () => void);
      return true;
    }
    if (!strayAllowed()) return true;
    return original(chunk, encoding, callback);
  }) as typeof stream.write;
}

// ---- fatal errors: report who caused them, then end the realm (the next batch starts a fresh one) -

let dying = false;
function blame(): number | undefined {
  const ctx = als.getStore();
  if (ctx && "inspect" in ctx) {
    if (inspecting.has(ctx.inspect)) return ctx.inspect;
  } else if (ctx) {
    if (!ctx.inv.closed) return ctx.inv.q;
    // Code left behind by a finished invocation (a timer): blame its source's running invocation.
    for (const inv of running) if (inv.sourceId === ctx.inv.sourceId) return inv.q;
  }
  if (running.size === 1 && inspecting.size === 0) return [...running][0]!.q;
  if (inspecting.size === 1 && running.size === 0) return [...inspecting][0];
  return undefined;
}

function fatal(code: string, message: string, err?: unknown): void {
  if (dying) return;
  dying = true;
  const stack =
    err instanceof Error && typeof err.stack === "string" ? err.stack.slice(0, MAX_STACK_CHARS) : undefined;
  try {
    send({ t: "fatal", code, message, stack, q: blame() });
  } finally {
    // A message posted before the thread stops still reaches the runner.
    realExit(70);
  }
}

process.exit = ((code?: number | string | null) => {
  fatal("process_exit", `The component called process.exit(${code ?? ""})`);
}) as typeof process.exit;
process.on("uncaughtException", (err) => {
  fatal("unhandled_rejection", `Uncaught exception: ${describe(err)}`, err);
});
process.on("unhandledRejection", (reason) => {
  fatal("unhandled_rejection", `Unhandled promise rejection: ${describe(reason)}`, reason);
});

function describe(value: unknown): string {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  try {
    return typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    return String(value);
  }
}

const runnerDir = path.dirname(fileURLToPath(import.meta.url));

/**
 * Stacks go to the component's owner: frames of the runner itself are dropped, and the package-cache
 * path of the bundle goes. Source maps already give the author's lines; names from a map the CLI sent
 * (`sources/hello/hello.mjs`) resolve below the bundle's folder and keep their relative path, and a
 * bundle without one is plain `component`.
 */
function cleanStack(stack: string): string {
  return stack
    .split("\n")
    .filter((line) => !line.includes(runnerDir))
    .map((line) =>
      line.replace(
        /(?:file:\/\/)?\/[^\s()]*?\/packages\/[^\s()/]+\/components\/([0-9a-f]{64}\.mjs)?/g,
        (_, bundle: string | undefined) => (bundle ? "component" : ""),
      ),
    )
    .join("\n");
}

function serialize(err: unknown, fallbackCode: string): SerializedError {
  if (!(err instanceof Error)) return { code: fallbackCode, message: describe(err) };
  const own = (err as { code?: unknown }).code;
  const out: SerializedError = {
    code: typeof own === "string" && own !== "" ? own : fallbackCode,
    message: String(err.message),
    name: String(err.name),
  };
  if (typeof err.stack === "string") out.stack = cleanStack(err.stack).slice(0, MAX_STACK_CHARS);
  if (err instanceof InvalidComponent && err.data) out.data = err.data;
  return out;
}

// ---- work ---------------------------------------------------------------------------------------

function onRespond(q: number, response: HttpResponse): void {
  send({ t: "respond", q, response });
}

function onLateEmit(sid: string): (q: number) => void {
  return (q) => send({ t: "late", sid, q });
}

async function inspect(q: number, entryFile: string): Promise<void> {
  inspecting.add(q);
  send({ t: "inspecting", q });
  try {
    const component = await als.run({ inspect: q }, () => loadComponent(entryFile));
    send({ t: "inspected", q, meta: component.meta });
  } catch (err) {
    send({ t: "inspected", q, error: { ...serialize(err, "component_invalid"), code: "component_invalid" } });
  } finally {
    inspecting.delete(q);
  }
}

async function execute(
  item: BatchItem,
  cfg: BatchConfig,
  inv: Invocation,
  db: Map<string, string>,
  onStart: (() => void) | undefined,
): Promise<unknown> {
  const component = await loadComponent(cfg.entryFile);
  onStart?.();
  const self = componentInstance(component, cfg, inv, db);
  const kind = item.inv;
  switch (kind.kind) {
    case "run": {
      const event = kind.parseBody
        ? withParsedBody(kind.event, () =>
            inv.warn(
              "body_too_deep",
              `The request body is JSON nested deeper than ${maxBodyDepth} levels; run got it as text in body`,
            ),
          )
        : kind.event;
      // A schedule source without run emits its timer event.
      if (component.run) await component.run.call(self, event);
      else inv.emit(event, {});
      return undefined;
    }
    case "hook":
      await component.hooks[kind.hook]?.call(self);
      return undefined;
    case "options": {
      const { page: _p, prevContext: _c, query: _q, ...configured } = kind.args;
      // A prop the component does not declare may be one of its dynamic props: compute them to find it.
      const dynamic =
        component.additionalProps && !component.props.some((p) => p.name === kind.prop)
          ? dynamicProps(component, await component.additionalProps.call(self, declaredPropDefs(component)))
          : [];
      const call = optionsCall(
        component,
        self,
        kind.prop,
        kind.args,
        { ...cfg.props, ...configured },
        dynamic,
      );
      const value = "list" in call ? call.list : await call.fn.call(call.thisArg, call.arg);
      try {
        const json = JSON.stringify(value ?? null);
        if (jsonTextTooDeep(json, maxValueDepth))
          throw new Error(`nested deeper than ${maxValueDepth} levels`);
        return JSON.parse(json);
      } catch (err) {
        throw new TypeError(
          `options() returned a value that is not JSON-serializable (${(err as Error).message})`,
        );
      }
    }
    case "props": {
      if (!component.additionalProps) return [];
      const returned = await component.additionalProps.call(self, declaredPropDefs(component));
      return dynamicPropMetas(component, returned);
    }
  }
}

/** Runs one invocation; also says how much emitted JSON its result carries. */
async function runItem(
  sid: string,
  item: BatchItem,
  cfg: BatchConfig,
  db: Map<string, string>,
  /** For a batch's first call: tells the parent when component code is about to run. */
  onStart?: () => void,
): Promise<{ result: ItemResult; chars: number }> {
  const started = performance.now();
  const inv = new Invocation(item.q, sid, init, onRespond, onLateEmit(sid));
  running.add(inv);
  let error: SerializedError | undefined;
  let value: unknown;
  try {
    value = await als.run({ inv }, () => execute(item, cfg, inv, db, onStart));
  } catch (err) {
    error = serialize(err, "component_error");
  }
  inv.closed = true;
  running.delete(inv);
  const result: ItemResult = {
    q: item.q,
    emits: error ? [] : inv.emits,
    logs: inv.logs,
    dbWrites: {},
    warnings: inv.warnings,
    durationMs: Math.round((performance.now() - started) * 1000) / 1000,
  };
  if (error) result.error = error;
  else {
    for (const [key, json] of inv.writes) {
      db.set(key, json);
      result.dbWrites[key] = JSON.parse(json);
    }
    if (item.inv.kind === "options" || item.inv.kind === "props") result.returnValue = value;
  }
  if (inv.response) result.response = inv.response;
  return { result, chars: error ? 0 : inv.emittedChars };
}

/**
 * Tells the parent the batch arrived. When the first item's module is already loaded nothing stands
 * between here and its component code, so one `started` says both; otherwise `got` now and `started`
 * (from runItem) once the module has loaded. Returns whether `started` is still owed.
 */
function acknowledge(msg: BatchMessage): boolean {
  const first = msg.items[0];
  const cfg = first ? msg.cfgs[first.c] : undefined;
  if (cfg && isLoaded(cfg.entryFile)) {
    send({ t: "started", sid: msg.sid });
    return false;
  }
  send({ t: "got", sid: msg.sid });
  return true;
}

async function runBatch(msg: BatchMessage, startOwed: boolean): Promise<void> {
  const { sid } = msg;
  if (msg.db) {
    const data = new Map<string, string>();
    for (const [key, value] of Object.entries(msg.db.data)) {
      const json = JSON.stringify(value);
      if (json !== undefined) data.set(key, json);
    }
    dbs.set(sid, { v: msg.db.v, data });
  }
  let state = dbs.get(sid);
  if (!state) {
    state = { v: -1, data: new Map() };
    dbs.set(sid, state);
  }
  const pending: ItemResult[] = [];
  let pendingChars = 0;
  let lastFlush = performance.now();
  let current: { q: number; started: number } | undefined;
  const started = () => send({ t: "started", sid });
  const flush = () => {
    const now = performance.now();
    const progress = current ? { running: current.q, since: now - current.started } : {};
    send({ t: "results", sid, results: pending.splice(0), done: false, ...progress });
    pendingChars = 0;
    lastFlush = now;
  };
  // Fires only while an invocation awaits something; a batch of quick ones finishes first.
  let timer: NodeJS.Timeout | undefined;
  const flushSoon = () => {
    timer ??= setTimeout(() => {
      timer = undefined;
      if (pending.length > 0) flush();
    }, FLUSH_MS);
  };
  try {
    for (const item of msg.items) {
      current = { q: item.q, started: performance.now() };
      if (pending.length > 0 && current.started - lastFlush >= FLUSH_MS) flush();
      const cfg = msg.cfgs[item.c];
      const done = cfg
        ? await runItem(sid, item, cfg, state.data, item === msg.items[0] && startOwed ? started : undefined)
        : { result: errorResult(item.q, { code: "executor_crash", message: "Malformed batch" }), chars: 0 };
      pending.push(done.result);
      pendingChars += done.chars;
      if (pendingChars >= FLUSH_CHARS) {
        current = undefined;
        flush();
      } else flushSoon();
    }
  } finally {
    clearTimeout(timer);
  }
  current = undefined;
  try {
    send({ t: "results", sid, results: pending, done: true });
  } catch (err) {
    // Only reachable if a result slipped past the JSON copies above; fail those invocations, keep the process.
    const error = { code: "component_error", message: `The result could not be sent: ${describe(err)}` };
    send({ t: "results", sid, results: pending.map((r) => errorResult(r.q, error)), done: true });
  }
}

function errorResult(q: number, error: SerializedError): ItemResult {
  return { q, emits: [], logs: [], dbWrites: {}, warnings: [], error, durationMs: 0 };
}

/**
 * Batches of a source waiting behind its running one, in arrival order. The pool may send the next
 * batch before the running one has answered, so the process goes on without waiting for the server
 * between batches; each batch is acknowledged (`got`/`started`) only when it starts.
 */
const waiting = new Map<string, BatchMessage[]>();

function onBatch(msg: BatchMessage): void {
  const queue = waiting.get(msg.sid);
  if (queue) queue.push(msg);
  else {
    waiting.set(msg.sid, []);
    void runBatches(msg);
  }
}

async function runBatches(first: BatchMessage): Promise<void> {
  for (let msg: BatchMessage | undefined = first; msg; msg = waiting.get(first.sid)?.shift()) {
    await runBatch(msg, acknowledge(msg));
  }
  waiting.delete(first.sid);
}

port.on("message", (raw: unknown) => {
  const msg = raw as ToChild;
  if (typeof msg !== "object" || msg === null) return;
  if (msg.t === "batch") onBatch(msg);
  else if (msg.t === "inspect") void inspect(msg.q, msg.entryFile);
  else if (msg.t === "api") answerApi?.(msg.id, msg.response);
  else if (msg.t === "forget" && !waiting.has(msg.sid)) {
    // The source leaves this shared realm (its next batch, here or elsewhere, carries its db).
    dbs.delete(msg.sid);
    envWrites.delete(msg.sid);
  }
});
