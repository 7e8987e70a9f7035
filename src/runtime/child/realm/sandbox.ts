/**
 * The globals component code finds in a realm, set before any component loads: no channel to the
 * runner, no Worker and no BroadcastChannel (it would reach the owner's other realms), a `process.env` of its own per source, `os.tmpdir()` in the owner's scratch
 * folder, source-mapped stacks, and console and stdout/stderr output that becomes the running
 * invocation's logs (outside one, a bounded trickle reaches the pool's logger).
 */
import { setSourceMapsSupport, syncBuiltinESMExports } from "node:module";
import os from "node:os";
import util from "node:util";
import v8 from "node:v8";
import workerThreads from "node:worker_threads";
import type { LogEntry } from "../../types.ts";
import { currentInvocation, init } from "./state.ts";

/** Output written outside any invocation: at most this many chunks per window reach the runner. */
const STRAY_OUTPUT_PER_WINDOW = 20;
const STRAY_OUTPUT_WINDOW_MS = 10_000;

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

/** Drops the `process.env` writes of a source that leaves the realm. */
export function forgetEnv(sid: string): void {
  envWrites.delete(sid);
}

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

function accessDenied(): Error {
  return Object.assign(new Error("Access to this API has been restricted"), { code: "ERR_ACCESS_DENIED" });
}

/** Sets the globals; realm.ts calls it once, before any component loads. */
export function installSandboxGlobals(): void {
  // The realm's channel and worker creation are the runner's, not the component's: a component that
  // could post on the port could flood the runner, and its own workers would escape the realm's heap
  // cap. The process needs --allow-worker for the runner; this keeps it from component code.
  (workerThreads as { parentPort: unknown }).parentPort = null;
  workerThreads.Worker = function Worker() {
    throw accessDenied();
  } as unknown as typeof workerThreads.Worker;
  // A BroadcastChannel reaches every thread of the process, so every realm of the owner: sources
  // would talk to one another, which realms exist to prevent (docs/isolation.md).
  const noChannel = function BroadcastChannel() {
    throw accessDenied();
  } as unknown as typeof workerThreads.BroadcastChannel;
  workerThreads.BroadcastChannel = noChannel;
  Object.defineProperty(globalThis, "BroadcastChannel", {
    value: noChannel,
    writable: false,
    configurable: false,
    enumerable: false,
  });

  // V8's flags at run time: `--allow-natives-syntax` would hand component code V8's internals (the
  // operator's own flags drop it for that reason, v8-flags.ts), and a larger heap would lift the realm's
  // cap. No component needs them.
  v8.setFlagsFromString = () => {
    throw accessDenied();
  };
  // Signals go to this process only: without per-uid isolation the server and every other owner's
  // executor run as the same user, and a signal would stop or freeze them.
  const kill = process.kill.bind(process);
  process.kill = (pid: number, signal?: string | number) => {
    if (pid !== process.pid) throw Object.assign(new Error("kill EPERM"), { code: "EPERM", syscall: "kill" });
    return kill(pid, signal);
  };

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

  // console output of an invocation becomes its logs; outside one it reaches the pool's logger.
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
}
