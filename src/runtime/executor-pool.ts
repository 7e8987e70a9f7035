/**
 * The sandbox: component code runs in one long-lived child process per owner, never in the server.
 * Each child is forked with an empty environment, Node's permission model (read: its code, write:
 * its scratch folder), a V8 heap cap and, when the server runs as root, a uid of its own. Invocations
 * of a source are queued here and sent to the child in batches; see docs/isolation.md.
 */
import { type ChildProcess, fork, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { AppError, type SerializedError } from "../errors.ts";
import type {
  BatchConfig,
  BatchItem,
  BatchMessage,
  ChildInit,
  FromChild,
  ItemResult,
  ToChild,
} from "./child/protocol.ts";
import type {
  BuiltComponent,
  ComponentMeta,
  EmittedEvent,
  Executor,
  HttpResponse,
  InvokeRequest,
  InvokeResult,
  LogEntry,
} from "./types.ts";

export interface ExecutorLogger {
  warn(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
}

export interface ExecutorPoolOptions {
  /** Scratch folders live in `<dataDir>/scratch/<owner>`; the pool empties `<dataDir>/scratch` when it starts. */
  dataDir: string;
  /** V8 heap cap of each executor process (`--max-old-space-size`); RSS is capped at 2× this + 128 MiB. */
  memoryMb?: number;
  /** Used when a request has no `timeoutMs`, and for `inspect`. */
  defaultTimeoutMs?: number;
  maxEmitBytes?: number;
  maxEmitsPerInvocation?: number;
  maxLogsPerInvocation?: number;
  /** Run each owner's process under its own uid/gid; needs root. Default: true when running as root. */
  isolateUsers?: boolean;
  /** First uid handed out; two pools on one host need disjoint ranges. */
  uidBase?: number;
  /** An owner's process with nothing to do for this long is stopped (and started again on demand). */
  idleMs?: number;
  /**
   * A PEM file of extra certificate authorities executors trust (self-hosted services with a private
   * CA); handed to Node as NODE_EXTRA_CA_CERTS, which components never see in their env.
   */
  extraCaCertsFile?: string;
  /** Where component code may connect, checked inside each executor (runtime/egress.ts); absent: anywhere. */
  egress?: ChildInit["egress"];
  logger?: ExecutorLogger;
}

/** A failure of the executor itself (`executor_stopped`, `executor_crash`) rather than of the component. */
export class ExecutorError extends Error {
  readonly code: string;
  readonly data: Record<string, unknown> | undefined;
  constructor(code: string, message: string, data?: Record<string, unknown>) {
    super(message);
    this.name = "ExecutorError";
    this.code = code;
    this.data = data;
  }
}

/** `inspect` found code that does not load or validate; `data` (= `details`) holds line/column when known. */
export class ComponentInvalidError extends AppError {
  readonly data: Record<string, unknown> | undefined;
  constructor(message: string, data?: Record<string, unknown>) {
    super("component_invalid", message, { details: data });
    this.data = data;
  }
}

const runnerPath = fileURLToPath(new URL("./child/runner.ts", import.meta.url));
/** Invocations per batch message: bounds message size and how much one crash can take down. */
const MAX_BATCH = 256;
/**
 * On 2 cores with three CPU burners beside other work, starts took over 10 s and deploys failed; with
 * the process still niced while node started, even 30 s were not always enough (it is niced at `ready`).
 */
const STARTUP_TIMEOUT_MS = 30_000;
/**
 * Executors run this much nicer than the server: tenant code gets the CPU the server's HTTP, IPC and
 * commit work leaves, so a busy component cannot starve the API or other tenants' endpoints, and a
 * waking executor does not preempt the thread every invocation depends on.
 */
const EXECUTOR_NICE = 10;
const WATCH_INTERVAL_MS = 500;
/** Sources whose db a child keeps; older ones are dropped and re-sent when used again. */
const MAX_CACHED_DBS = 1000;
const LOG_ENTRY_CHARS = 8 * 1024;
const OUTPUT_LINES_PER_WINDOW = 20;
const OUTPUT_WINDOW_MS = 10_000;
const OOM_PATTERN = /JavaScript heap out of memory|Reached heap limit|Allocation failed/;

interface Call {
  q: number;
  req: InvokeRequest;
  onRespond: ((response: HttpResponse) => void) | undefined;
  resolve: (result: InvokeResult) => void;
  responded: boolean;
}

interface SourceState {
  owner: Owner;
  sourceId: string;
  queue: Call[];
  /** The batch the child runs (or will run first): its messages concern this one. */
  batch: Batch | null;
  /**
   * A batch sent to the same child behind `batch`, before that one answered: the child starts it as
   * soon as `batch` ends, without waiting for the server. It takes no db copy (the child's own copy is
   * then authoritative), so one is sent only when the caller knows of no change the child lacks.
   */
  waiting: Batch | null;
  /**
   * The db version the caller reaches once it has applied every successful write we returned: the
   * newest dbVersion seen, plus one per successful invocation with writes since (see `dbVersion`
   * in the class comment).
   */
  version: number;
  /** The newest db snapshot a request brought. */
  snapshot: { v: number; data: Record<string, unknown> } | undefined;
  /**
   * Writes we returned that the snapshot does not hold yet, with the version they lead to; they are
   * layered over the snapshot when a child needs the db again (after a restart).
   */
  overlay: Map<string, { value: unknown; v: number }>;
}

interface Batch {
  source: SourceState;
  calls: Call[];
  child: Child | null;
  /** Index of the first call without a result: the one running. */
  next: number;
  /** When the running call started, as far as the parent knows. */
  started: number;
  /** The child confirmed it read the batch; before that none of its calls can have started. */
  received: boolean;
  /** The child said the first call entered component code (its module loaded); before that it ran nothing. */
  entered: boolean;
  timer: NodeJS.Timeout | undefined;
}

interface Inspection {
  q: number;
  component: BuiltComponent;
  resolve: (meta: ComponentMeta) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

interface Owner {
  id: string;
  uid: number | undefined;
  /** Folder name under `<dataDir>/scratch`. */
  scratchName: string;
  /** Every readDir this owner's components needed; a new process is granted all of them. */
  dirs: Set<string>;
  child: Child | null;
  sources: Map<string, SourceState>;
}

interface Reason {
  code: string;
  message: string;
  /** The invocation or inspection that caused it, when known. */
  q?: number;
  /** Blame the only running call when `q` is unknown (an OOM or an exit nobody reported). */
  blameSole?: boolean;
  stack?: string;
  quiet?: boolean;
}

interface Child {
  owner: Owner;
  proc: ChildProcess | undefined;
  pid: number | undefined;
  allowed: Set<string>;
  ready: Promise<void>;
  started: boolean;
  startWaiters: { resolve: () => void; reject: (err: Error) => void } | undefined;
  retiring: boolean;
  gone: boolean;
  goneWaiters: Array<() => void>;
  killReason: Reason | undefined;
  batches: Map<string, Batch>;
  inspections: Map<number, Inspection>;
  /** Version of the db copy the child holds per source, least recently used first. */
  dbVersions: Map<string, number>;
  stderrTail: string;
  lastActive: number;
  output: { windowStart: number; count: number; dropped: number };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function failed(code: string, message: string, extra: Partial<SerializedError> = {}): InvokeResult {
  return {
    emits: [],
    logs: [],
    dbWrites: {},
    warnings: [],
    error: { code, message, ...extra },
    durationMs: 0,
  };
}

function newBatch(source: SourceState, calls: Call[]): Batch {
  return {
    source,
    calls,
    child: null,
    next: 0,
    started: 0,
    received: false,
    entered: false,
    timer: undefined,
  };
}

/** Identifies the set of folders a component needs to read. */
function dirsKey(component: BuiltComponent): string {
  return component.readDirs.join("\0");
}

function isInside(child: string, parent: string): boolean {
  const rel = path.relative(parent, child);
  return rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel));
}

/**
 * Runs component code in per-owner executor processes (see docs/isolation.md).
 *
 * Order and db: `invoke` calls of one source run one at a time in call order, without waiting for
 * the caller; calls queued behind a running one go to the child together. The child keeps each
 * source's db. `dbVersion` is read as the caller's count of db changes: it must grow by exactly one
 * for each successful invocation that returned `dbWrites` (as `SourceRunner` does) and by any amount
 * for any other change. A request whose version the child's copy already reached reuses that copy,
 * so a caller may pass an older snapshot while earlier results are still in flight; a newer version
 * replaces the copy. After a restart the child gets the newest snapshot seen plus the writes we
 * returned since.
 */
/**
 * Whether the batch's running call is in component code: the child read the batch and either said its
 * first call entered (module loaded) or already returned results for earlier calls.
 */
function inCode(batch: Batch): boolean {
  return batch.received && (batch.entered || batch.next > 0);
}

/**
 * The call numbered `q` that `child` was sent and has not answered yet. A child only ever reaches its
 * own calls: the number alone would let one tenant's code answer another tenant's HTTP request.
 */
function unsettledCall(child: Child, q: unknown): Call | undefined {
  for (const batch of child.batches.values()) {
    for (let i = batch.next; i < batch.calls.length; i++) if (batch.calls[i]!.q === q) return batch.calls[i];
  }
  return undefined;
}

export class ExecutorPool implements Executor {
  private readonly dataDir: string;
  private readonly memoryMb: number;
  private readonly defaultTimeoutMs: number;
  private readonly limits: ChildInit;
  private readonly isolateUsers: boolean;
  private readonly uidBase: number;
  private readonly idleMs: number;
  private readonly extraCaCertsFile: string | undefined;
  private readonly logger: ExecutorLogger | undefined;
  private readonly owners = new Map<string, Owner>();
  private readonly children = new Set<Child>();
  private readonly readDirCache = new Map<string, Promise<string[]>>();
  private readonly readable = new Map<string, Promise<void>>();
  /** Real path of `<dataDir>/scratch`, emptied and created on first use. */
  private scratchRoot: Promise<string> | undefined;
  private realDataDir: string | undefined;
  private nextUid = 0;
  private seq = 0;
  private watch: NodeJS.Timeout | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(options: ExecutorPoolOptions) {
    this.dataDir = path.resolve(options.dataDir);
    this.memoryMb = options.memoryMb ?? 256;
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? 30_000;
    this.limits = {
      scratchDir: "",
      maxEmitBytes: options.maxEmitBytes ?? 1024 * 1024,
      maxEmitsPerInvocation: options.maxEmitsPerInvocation ?? 1000,
      maxLogsPerInvocation: options.maxLogsPerInvocation ?? 1000,
      maxLogEntryChars: LOG_ENTRY_CHARS,
      ...(options.egress ? { egress: options.egress } : {}),
    };
    const root = process.getuid?.() === 0;
    this.isolateUsers = options.isolateUsers ?? root;
    if (this.isolateUsers && !root) throw new Error("isolateUsers needs the server to run as root");
    this.uidBase = options.uidBase ?? 200_000;
    this.idleMs = options.idleMs ?? 10 * 60_000;
    this.extraCaCertsFile = options.extraCaCertsFile;
    this.logger = options.logger;
  }

  // ---- public API ------------------------------------------------------------------------------

  async inspect(ownerId: string, component: BuiltComponent, timeoutMs?: number): Promise<ComponentMeta> {
    const limit = timeoutMs && timeoutMs > 0 ? timeoutMs : this.defaultTimeoutMs;
    if (this.closed) throw stoppedError();
    const owner = this.owner(ownerId);
    const dirs = await this.readDirsOf([component]);
    const child = await this.readyChild(owner, dirs);
    if (child.gone) throw new ExecutorError("executor_crash", "The executor process stopped");
    const q = ++this.seq;
    return new Promise<ComponentMeta>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.kill(child, {
          code: "timeout",
          message: `Loading the component did not finish within ${limit} ms`,
          q,
        });
      }, limit);
      child.inspections.set(q, { q, component, resolve, reject, timer });
      child.lastActive = Date.now();
      this.send(child, { t: "inspect", q, entryFile: component.entryFile });
    });
  }

  invoke(request: InvokeRequest, onRespond?: (response: HttpResponse) => void): Promise<InvokeResult> {
    return new Promise<InvokeResult>((resolve) => {
      if (this.closed) {
        resolve(failed("executor_stopped", "The executor pool is closed"));
        return;
      }
      const owner = this.owner(request.ownerId);
      let source = owner.sources.get(request.sourceId);
      if (!source) {
        source = {
          owner,
          sourceId: request.sourceId,
          queue: [],
          batch: null,
          waiting: null,
          version: Number.NEGATIVE_INFINITY,
          snapshot: undefined,
          overlay: new Map(),
        };
        owner.sources.set(request.sourceId, source);
      }
      source.queue.push({ q: ++this.seq, req: request, onRespond, resolve, responded: false });
      // The first queued call waits for the end of this event-loop turn, so the calls that arrive in the
      // same turn (every request read in one poll) go to the child as one batch, instead of a batch of
      // one followed by a batch of the rest.
      if (source.queue.length === 1 && !source.waiting) setImmediate(() => this.pump(source));
    });
  }

  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  /** pid of the owner's current executor process, if one runs (for tests and diagnostics). */
  pidOf(ownerId: string): number | undefined {
    return this.owners.get(ownerId)?.child?.pid;
  }

  /** One line per owner with a process: for tests, metrics and the admin console. */
  stats(): Array<{
    ownerId: string;
    pid: number | undefined;
    uid: number | undefined;
    sources: number;
    running: number;
    /** Sources whose running call is in component code (its module loaded), as far as the pool knows. */
    inCode: number;
    queued: number;
  }> {
    return [...this.owners.values()].map((owner) => {
      let running = 0;
      let executing = 0;
      let queued = 0;
      for (const source of owner.sources.values()) {
        queued += source.queue.length;
        if (source.batch) {
          running += source.batch.calls.length - source.batch.next;
          if (inCode(source.batch)) executing++;
        }
        if (source.waiting) running += source.waiting.calls.length;
      }
      return {
        ownerId: owner.id,
        pid: owner.child?.pid,
        uid: owner.uid,
        sources: owner.sources.size,
        running,
        inCode: executing,
        queued,
      };
    });
  }

  // ---- queues and batches ----------------------------------------------------------------------

  private owner(ownerId: string): Owner {
    let owner = this.owners.get(ownerId);
    if (!owner) {
      const safe = /^[A-Za-z0-9_-]{1,64}$/.test(ownerId)
        ? ownerId
        : `h_${createHash("sha256").update(ownerId).digest("hex").slice(0, 32)}`;
      owner = {
        id: ownerId,
        uid: undefined,
        scratchName: safe,
        dirs: new Set(),
        child: null,
        sources: new Map(),
      };
      this.owners.set(ownerId, owner);
    }
    return owner;
  }

  /**
   * Sends the source's queued calls as one batch; with a batch already out, as the batch waiting
   * behind it when `pipeline` allows, else they wait for it to end.
   */
  private pump(source: SourceState): void {
    if (source.queue.length === 0 || this.closed) return;
    if (source.batch) {
      this.pipeline(source, source.batch);
      return;
    }
    const batch = newBatch(source, source.queue.splice(0, MAX_BATCH));
    source.batch = batch;
    this.startBatch(batch).catch((err: unknown) => {
      const code = this.closed ? "executor_stopped" : "executor_crash";
      const message = err instanceof Error ? err.message : String(err);
      for (const call of batch.calls.slice(batch.next)) this.settle(source, call, failed(code, message));
      this.endBatch(batch);
    });
  }

  private async startBatch(batch: Batch): Promise<void> {
    const { source } = batch;
    const dirs = await this.readDirsOf(batch.calls.map((c) => c.req.component));
    const child = await this.readyChild(source.owner, dirs);
    if (this.closed) throw stoppedError();
    if (child.gone) throw new ExecutorError("executor_crash", "The executor process stopped");
    batch.child = child;
    child.batches.set(source.sourceId, batch);
    const message = this.batchMessage(batch, child);
    batch.started = Date.now();
    child.lastActive = batch.started;
    this.arm(batch);
    this.send(child, message);
    // Calls that arrived while the process was being found can follow at once.
    this.pump(source);
  }

  /**
   * Sends queued calls to the child running `head`, to start when `head` ends. Only the calls that
   * child may already read go, and only when it needs no db copy (the caller knows no change the
   * child lacks); otherwise they wait for `head` to end and take the usual way.
   */
  private pipeline(source: SourceState, head: Batch): void {
    const child = head.child;
    if (source.waiting || !child || child.gone || child.killReason) return;
    const known = child.dbVersions.get(source.sourceId);
    if (known === undefined) return;
    const readable = new Set(head.calls.map((c) => dirsKey(c.req.component)));
    let n = 0;
    while (n < source.queue.length && n < MAX_BATCH) {
      const req = source.queue[n]!.req;
      if (req.dbVersion > known || !readable.has(dirsKey(req.component))) break;
      n++;
    }
    if (n === 0) return;
    const batch = newBatch(source, source.queue.splice(0, n));
    batch.child = child;
    source.waiting = batch;
    const message = this.batchMessage(batch, child);
    this.send(child, message);
  }

  private batchMessage(batch: Batch, child: Child): BatchMessage {
    const cfgs: BatchConfig[] = [];
    const index = new Map<string, number>();
    let prev: InvokeRequest | undefined;
    let prevIndex = 0;
    const items: BatchItem[] = batch.calls.map((call) => {
      const r = call.req;
      let c = prevIndex;
      const same =
        prev &&
        r.props === prev.props &&
        r.component.entryFile === prev.component.entryFile &&
        r.dbProps === prev.dbProps &&
        r.httpProps === prev.httpProps;
      if (!same) {
        const key = `${r.component.entryFile}\0${JSON.stringify([r.props, r.dbProps, r.httpProps])}`;
        const found = index.get(key);
        if (found === undefined) {
          c = cfgs.length;
          index.set(key, c);
          cfgs.push({
            entryFile: r.component.entryFile,
            props: r.props,
            dbProps: r.dbProps,
            httpProps: r.httpProps,
          });
        } else c = found;
      }
      prev = r;
      prevIndex = c;
      return { q: call.q, c, inv: r.invocation };
    });
    const { source } = batch;
    const { sourceId } = source;
    const message: BatchMessage = { t: "batch", sid: sourceId, cfgs, items };
    let newest = batch.calls[0]!.req;
    for (const call of batch.calls) if (call.req.dbVersion > newest.dbVersion) newest = call.req;
    const v = newest.dbVersion;
    if (!source.snapshot || v > source.snapshot.v) {
      source.snapshot = { v, data: newest.db ?? {} };
      for (const [key, write] of source.overlay) if (write.v <= v) source.overlay.delete(key);
      if (v > source.version) source.version = v;
    }
    const known = child.dbVersions.get(sourceId);
    if (known !== undefined && known > source.version) source.version = known;
    child.dbVersions.delete(sourceId);
    if (known === undefined || v > known) {
      // The child has no copy, or the caller knows a newer db than the child holds.
      const data = { ...source.snapshot.data };
      for (const [key, write] of source.overlay) data[key] = write.value;
      message.db = { v: source.version, data };
      child.dbVersions.set(sourceId, source.version);
    } else child.dbVersions.set(sourceId, known);
    if (child.dbVersions.size > MAX_CACHED_DBS) {
      // The least recently used copy no batch on this child still needs (a waiting batch has no other).
      for (const oldest of child.dbVersions.keys()) {
        if (child.batches.has(oldest)) continue;
        child.dbVersions.delete(oldest);
        this.send(child, { t: "forget", sid: oldest });
        break;
      }
    }
    return message;
  }

  /** (Re)starts the kill timer of the batch's running call. */
  private arm(batch: Batch): void {
    clearTimeout(batch.timer);
    const call = batch.calls[batch.next];
    const child = batch.child;
    if (!call || !child) return;
    const limit = call.req.timeoutMs > 0 ? call.req.timeoutMs : this.defaultTimeoutMs;
    const wait = Math.max(0, batch.started + limit - Date.now());
    batch.timer = setTimeout(() => {
      // A call that is not in component code yet (its batch unread, or its module still loading) waits
      // for another one: blame the longest-running call that is. With none, the loading module is stuck.
      let blamed = inCode(batch) ? call.q : undefined;
      if (blamed === undefined) {
        let oldest = Number.POSITIVE_INFINITY;
        for (const other of child.batches.values()) {
          const running = inCode(other) ? other.calls[other.next] : undefined;
          if (running && other.started < oldest) {
            oldest = other.started;
            blamed = running.q;
          }
        }
        if (blamed === undefined && batch.received) blamed = call.q;
      }
      this.kill(child, {
        code: "timeout",
        message: `The invocation did not finish within ${limit} ms`,
        q: blamed,
      });
    }, wait);
  }

  private settle(source: SourceState, call: Call, result: InvokeResult, child?: Child): void {
    const keys = result.error ? [] : Object.keys(result.dbWrites);
    if (keys.length > 0) {
      const v = ++source.version;
      for (const key of keys) source.overlay.set(key, { value: result.dbWrites[key], v });
      // The child applied these writes to its copy as well.
      if (child?.dbVersions.has(source.sourceId)) child.dbVersions.set(source.sourceId, v);
    }
    call.resolve(result);
  }

  private endBatch(batch: Batch): void {
    clearTimeout(batch.timer);
    const { source, child } = batch;
    if (source.batch === batch) source.batch = null;
    if (child && child.batches.get(source.sourceId) === batch) {
      child.batches.delete(source.sourceId);
      child.lastActive = Date.now();
      const next = source.waiting;
      if (next && next.child === child && !child.gone) {
        // The child starts the waiting batch as it sends this one's last results.
        source.waiting = null;
        source.batch = next;
        child.batches.set(source.sourceId, next);
        next.started = child.lastActive;
        this.arm(next);
      }
      this.stopIfRetired(child);
    }
    this.pump(source);
    // Options calls use throwaway source ids; keep state only while it matters.
    if (!source.batch && source.queue.length === 0 && source.overlay.size === 0) {
      if (source.owner.sources.get(source.sourceId) === source) source.owner.sources.delete(source.sourceId);
    }
  }

  // ---- messages from a child (untrusted: it runs the owner's code) -----------------------------

  private onMessage(child: Child, raw: unknown): void {
    if (!isObject(raw)) return;
    const msg = raw as FromChild;
    switch (msg.t) {
      case "ready":
        // Niced only now: no component code runs before `ready`, and node's own start at full priority
        // is what keeps a start on a busy host within STARTUP_TIMEOUT_MS.
        if (!child.started && child.pid !== undefined) {
          try {
            os.setPriority(child.pid, Math.min(19, os.getPriority() + EXECUTOR_NICE));
          } catch {
            // The process may already be gone; its close event reports that.
          }
        }
        child.started = true;
        child.startWaiters?.resolve();
        break;
      case "got": {
        const batch = child.batches.get(String(msg.sid));
        if (batch) batch.received = true;
        break;
      }
      case "started": {
        const batch = child.batches.get(String(msg.sid));
        // A loaded module lets the child say both at once.
        if (batch) batch.received = batch.entered = true;
        break;
      }
      case "results":
        this.onResults(child, msg);
        break;
      case "respond": {
        const call = unsettledCall(child, msg.q);
        const response = httpResponse(msg.response);
        if (!call || call.responded || !response) return;
        call.responded = true;
        try {
          call.onRespond?.(response);
        } catch (err) {
          this.logger?.warn({ err, sourceId: call.req.sourceId }, "onRespond callback threw");
        }
        break;
      }
      case "inspected":
        void this.onInspected(child, msg);
        break;
      case "fatal": {
        const code =
          msg.code === "process_exit" || msg.code === "unhandled_rejection" ? msg.code : "executor_crash";
        const reason: Reason = { code, message: String(msg.message).slice(0, 2000) };
        if (typeof msg.q === "number") reason.q = msg.q;
        if (typeof msg.stack === "string") reason.stack = msg.stack.slice(0, 16 * 1024);
        this.kill(child, reason);
        break;
      }
    }
  }

  private onResults(child: Child, msg: Extract<FromChild, { t: "results" }>): void {
    const batch = typeof msg.sid === "string" ? child.batches.get(msg.sid) : undefined;
    if (!batch || !Array.isArray(msg.results)) return;
    const now = Date.now();
    for (const raw of msg.results) {
      const call = batch.calls[batch.next];
      if (!call || !isObject(raw) || raw.q !== call.q) break;
      batch.next++;
      this.settle(batch.source, call, this.result(raw as unknown as ItemResult), child);
    }
    if (msg.done === true) {
      for (const call of batch.calls.slice(batch.next)) {
        this.settle(
          batch.source,
          call,
          failed("executor_crash", "The executor returned no result for this invocation"),
        );
      }
      batch.next = batch.calls.length;
      this.endBatch(batch);
      return;
    }
    const since = typeof msg.since === "number" && msg.since >= 0 ? msg.since : 0;
    batch.started = msg.running === batch.calls[batch.next]?.q ? now - since : now;
    child.lastActive = now;
    this.arm(batch);
  }

  /** Copies a child's result field by field, enforcing the limits the child was asked to keep. */
  private result(raw: ItemResult): InvokeResult {
    const { maxEmitsPerInvocation, maxLogsPerInvocation } = this.limits;
    const emits: EmittedEvent[] = [];
    if (Array.isArray(raw.emits)) {
      for (const e of raw.emits.slice(0, maxEmitsPerInvocation)) {
        if (!isObject(e)) continue;
        const m = isObject(e.meta) ? e.meta : {};
        const meta: EmittedEvent["meta"] = {};
        if (typeof m.id === "string" || typeof m.id === "number") meta.id = m.id;
        if (typeof m.name === "string") meta.name = m.name;
        if (typeof m.summary === "string") meta.summary = m.summary;
        if (typeof m.ts === "number") meta.ts = m.ts;
        if (typeof m.delivery_ts === "number" && Number.isFinite(m.delivery_ts))
          meta.delivery_ts = m.delivery_ts;
        emits.push({ event: e.event ?? null, meta });
      }
    }
    const logs: LogEntry[] = [];
    if (Array.isArray(raw.logs)) {
      for (const l of raw.logs.slice(0, maxLogsPerInvocation)) {
        if (!isObject(l) || typeof l.message !== "string") continue;
        const level = ["log", "info", "warn", "error", "debug"].includes(l.level as string)
          ? (l.level as LogEntry["level"])
          : "log";
        logs.push({
          level,
          message: l.message.slice(0, LOG_ENTRY_CHARS + 64),
          ts: typeof l.ts === "number" ? l.ts : Date.now(),
        });
      }
    }
    const result: InvokeResult = {
      emits,
      logs,
      dbWrites: isObject(raw.dbWrites) ? raw.dbWrites : {},
      warnings: Array.isArray(raw.warnings)
        ? raw.warnings.slice(0, 10).map((w) => serialized(w, "warning"))
        : [],
      durationMs: typeof raw.durationMs === "number" ? raw.durationMs : 0,
    };
    if (raw.error !== undefined) {
      result.error = serialized(raw.error, "component_error");
      result.emits = [];
      result.dbWrites = {};
    }
    if ("returnValue" in raw && !result.error) result.returnValue = raw.returnValue;
    const response = httpResponse(raw.response);
    if (response) result.response = response;
    return result;
  }

  private async onInspected(child: Child, msg: Extract<FromChild, { t: "inspected" }>): Promise<void> {
    const inspection = child.inspections.get(msg.q);
    if (!inspection) return;
    child.inspections.delete(msg.q);
    clearTimeout(inspection.timer);
    child.lastActive = Date.now();
    this.stopIfRetired(child);
    if (isObject(msg.meta) && typeof msg.meta.name === "string" && Array.isArray(msg.meta.props)) {
      inspection.resolve(msg.meta);
      return;
    }
    const error = serialized(msg.error, "component_invalid");
    let data = error.data;
    let message = error.message;
    if (error.name === "SyntaxError" && !data?.line) {
      // An ESM SyntaxError's stack has no position; `node --check` prints it.
      const where = await this.syntaxLocation(inspection.component, child.owner).catch(() => undefined);
      if (where) {
        data = where;
        message += ` (line ${where.line}${where.column ? `, column ${where.column}` : ""})`;
      }
    }
    inspection.reject(new ComponentInvalidError(message, data));
  }

  private syntaxLocation(
    component: BuiltComponent,
    owner: Owner,
  ): Promise<{ line: number; column?: number } | undefined> {
    return new Promise((resolve) => {
      const file = component.entryFile;
      const args = [
        "--permission",
        ...component.readDirs.map((d) => `--allow-fs-read=${d}`),
        "--check",
        file,
      ];
      const ids = owner.uid === undefined ? {} : { uid: owner.uid, gid: owner.uid };
      const proc = spawn(process.execPath, args, {
        env: {},
        stdio: ["ignore", "ignore", "pipe"],
        timeout: 5000,
        ...ids,
      });
      let err = "";
      proc.stderr?.on("data", (chunk: Buffer) => {
        if (err.length < 64 * 1024) err += chunk.toString("utf8");
      });
      proc.on("error", () => resolve(undefined));
      proc.on("close", () => {
        // "<file>:<line>", the source line, then a caret under the column.
        const lines = err.split("\n");
        const i = lines.findIndex((l) => l.startsWith(`${file}:`) || l.startsWith(`file://${file}:`));
        const m = i === -1 ? null : /:(\d+)$/.exec(lines[i]!);
        if (!m) return resolve(undefined);
        const caret = lines[i + 2]?.indexOf("^") ?? -1;
        resolve(caret >= 0 ? { line: Number(m[1]), column: caret + 1 } : { line: Number(m[1]) });
      });
    });
  }

  // ---- processes --------------------------------------------------------------------------------

  /** The owner's process if it may read `dirs`; else a new one granted every dir the owner needed so far. */
  private async readyChild(owner: Owner, dirs: string[]): Promise<Child> {
    for (let attempt = 0; attempt < 3; attempt++) {
      if (this.closed) throw stoppedError();
      let child = owner.child;
      if (!child || child.gone || child.retiring || !dirs.every((d) => child!.allowed.has(d))) {
        for (const d of dirs) owner.dirs.add(d);
        if (child) this.retire(child);
        child = this.spawnChild(owner);
        owner.child = child;
      }
      await child.ready;
      if (!child.gone && !child.killReason) return child;
    }
    throw new ExecutorError("executor_crash", "The executor process stopped while starting");
  }

  private spawnChild(owner: Owner): Child {
    const child: Child = {
      owner,
      proc: undefined,
      pid: undefined,
      allowed: new Set(owner.dirs),
      ready: Promise.resolve(),
      started: false,
      startWaiters: undefined,
      retiring: false,
      gone: false,
      goneWaiters: [],
      killReason: undefined,
      batches: new Map(),
      inspections: new Map(),
      dbVersions: new Map(),
      stderrTail: "",
      lastActive: Date.now(),
      output: { windowStart: Date.now(), count: 0, dropped: 0 },
    };
    this.children.add(child);
    child.ready = this.start(child);
    child.ready.catch(() => {});
    this.watch ??= setInterval(() => this.watchChildren(), WATCH_INTERVAL_MS).unref();
    return child;
  }

  private async start(child: Child): Promise<void> {
    const { owner } = child;
    let scratch: string;
    let runner: string;
    try {
      scratch = await this.prepareScratch(owner);
      runner = await fsp.realpath(runnerPath);
      if (this.isolateUsers) await this.ensureReadable(path.dirname(runner));
    } catch (err) {
      this.gone(child, null, null);
      throw err;
    }
    if (this.closed || child.killReason) {
      this.gone(child, null, null);
      throw stoppedError();
    }
    const init: ChildInit = { ...this.limits, scratchDir: scratch };
    const execArgv = [
      "--permission",
      `--allow-fs-read=${path.dirname(runner)}`,
      ...[...child.allowed].map((d) => `--allow-fs-read=${d}`),
      `--allow-fs-read=${scratch}`,
      `--allow-fs-write=${scratch}`,
      `--max-old-space-size=${this.memoryMb}`,
    ];
    const ids = owner.uid === undefined ? {} : { uid: owner.uid, gid: owner.uid };
    let proc: ChildProcess;
    try {
      proc = fork(runner, [JSON.stringify(init)], {
        cwd: scratch,
        env: this.extraCaCertsFile ? { NODE_EXTRA_CA_CERTS: this.extraCaCertsFile } : {},
        execPath: process.execPath,
        execArgv,
        serialization: "json",
        stdio: ["ignore", "pipe", "pipe", "ipc"],
        ...ids,
      });
    } catch (err) {
      this.gone(child, null, null);
      throw new ExecutorError(
        "executor_crash",
        `The executor process could not start: ${(err as Error).message}`,
      );
    }
    child.proc = proc;
    child.pid = proc.pid;
    proc.on("message", (m: unknown) => this.onMessage(child, m));
    proc.on("error", (err) => {
      this.logger?.warn({ ownerId: owner.id, err }, "executor process error");
      if (proc.pid === undefined) this.gone(child, null, null);
    });
    proc.on("close", (code, signal) => this.gone(child, code, signal));
    proc.stdout?.on("data", (chunk: Buffer) => this.onOutput(child, "stdout", chunk));
    proc.stderr?.on("data", (chunk: Buffer) => this.onOutput(child, "stderr", chunk));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.kill(child, {
          code: "executor_crash",
          message: `The executor process did not start within ${STARTUP_TIMEOUT_MS} ms`,
        });
      }, STARTUP_TIMEOUT_MS);
      child.startWaiters = {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      if (child.gone)
        child.startWaiters.reject(
          new ExecutorError("executor_crash", "The executor process could not start"),
        );
    });
  }

  private send(child: Child, message: ToChild): void {
    const proc = child.proc;
    if (!proc?.connected) {
      this.kill(child, { code: "executor_crash", message: "The executor process's channel is closed" });
      return;
    }
    try {
      proc.send(message, (err: Error | null) => {
        if (err)
          this.kill(child, {
            code: "executor_crash",
            message: `Sending to the executor process failed: ${err.message}`,
          });
      });
    } catch (err) {
      this.kill(child, {
        code: "executor_crash",
        message: `Sending to the executor process failed: ${(err as Error).message}`,
      });
    }
  }

  /** SIGKILLs a child; the first reason given is the one reported. */
  private kill(child: Child, reason: Reason): void {
    child.killReason ??= reason;
    if (child.gone) return;
    if (child.proc && child.proc.exitCode === null && child.proc.signalCode === null)
      child.proc.kill("SIGKILL");
    else if (!child.proc) this.gone(child, null, null);
  }

  private retire(child: Child): void {
    child.retiring = true;
    if (child.owner.child === child) child.owner.child = null;
    this.stopIfRetired(child);
  }

  private stopIfRetired(child: Child): void {
    if (child.retiring && child.batches.size === 0 && child.inspections.size === 0) {
      this.kill(child, { code: "executor_stopped", message: "retired", quiet: true });
    }
  }

  /** The process is gone: fail what it was running, blame the culprit, let queued calls go to a new one. */
  private gone(child: Child, code: number | null, signal: NodeJS.Signals | null): void {
    if (child.gone) return;
    child.gone = true;
    this.children.delete(child);
    const { owner } = child;
    if (owner.child === child) owner.child = null;
    const reason = this.deathReason(child, code, signal);
    const running: number[] = [];
    for (const batch of child.batches.values()) {
      const call = batch.received ? batch.calls[batch.next] : undefined;
      if (call) running.push(call.q);
    }
    running.push(...child.inspections.keys());
    const culprit = reason.q ?? (reason.blameSole && running.length === 1 ? running[0] : undefined);
    const others = reason.code === "executor_stopped" ? "executor_stopped" : "executor_crash";
    const othersMessage =
      others === "executor_stopped"
        ? "The executor pool was closed before this invocation finished"
        : `The executor process stopped before this invocation finished: ${reason.message}`;

    const batches = [...child.batches.values()];
    child.batches.clear();
    for (const batch of batches) {
      clearTimeout(batch.timer);
      // A batch waiting behind this one never started: its calls are handled as this one's last.
      const waiting = batch.source.waiting;
      if (waiting?.child === child) {
        batch.source.waiting = null;
        batch.calls.push(...waiting.calls);
      }
      // Calls behind the running one never started: they go to the replacement process, in order,
      // so a neighbour's crash costs them only a restart. The running call cannot be retried safely.
      if (others !== "executor_stopped" && !this.closed) {
        // The running call has started once it entered component code; a first call still loading
        // its module has run nothing (the replacement loads it anew), unless it is the culprit.
        const first = batch.calls[batch.next];
        const started = inCode(batch) || (batch.received && first !== undefined && first.q === culprit);
        const firstNotStarted = started ? batch.next + 1 : batch.next;
        const notStarted = batch.calls.slice(firstNotStarted);
        batch.calls.length = Math.min(batch.calls.length, firstNotStarted);
        batch.source.queue.unshift(...notStarted);
      }
      for (const call of batch.calls.slice(batch.next)) {
        const mine = call.q === culprit;
        const extra = mine && reason.stack ? { stack: reason.stack } : {};
        this.settle(
          batch.source,
          call,
          mine ? failed(reason.code, reason.message, extra) : failed(others, othersMessage),
        );
      }
      batch.next = batch.calls.length;
    }
    for (const inspection of child.inspections.values()) {
      clearTimeout(inspection.timer);
      const loading =
        reason.code === "timeout" ? reason.message : `The component failed while loading: ${reason.message}`;
      inspection.reject(
        inspection.q === culprit && others !== "executor_stopped"
          ? new ComponentInvalidError(loading)
          : new ExecutorError(
              others,
              others === "executor_stopped" ? "The executor pool was closed" : othersMessage,
            ),
      );
    }
    child.inspections.clear();
    child.startWaiters?.reject(
      new ExecutorError(others, `The executor process could not start: ${reason.message}`),
    );
    if (!reason.quiet && !this.closed) {
      const tail = child.stderrTail.slice(-1000);
      this.logger?.warn(
        { ownerId: owner.id, pid: child.pid, code, signal, reason: reason.code, stderr: tail },
        reason.message,
      );
    }
    for (const waiter of child.goneWaiters) waiter();
    for (const batch of batches) this.endBatch(batch);
  }

  private deathReason(child: Child, code: number | null, signal: NodeJS.Signals | null): Reason {
    if (child.killReason) return child.killReason;
    if (OOM_PATTERN.test(child.stderrTail)) {
      return {
        code: "out_of_memory",
        message: `The executor ran out of memory (heap limit ${this.memoryMb} MB)`,
        blameSole: true,
      };
    }
    const how = signal ? `signal ${signal}` : `exit code ${code}`;
    return {
      code: "process_exit",
      message: `The executor process exited unexpectedly (${how})`,
      blameSole: true,
    };
  }

  private onOutput(child: Child, stream: "stdout" | "stderr", chunk: Buffer): void {
    const text = chunk.toString("utf8");
    if (stream === "stderr") child.stderrTail = (child.stderrTail + text).slice(-8192);
    const out = child.output;
    const now = Date.now();
    if (now - out.windowStart >= OUTPUT_WINDOW_MS) {
      if (out.dropped > 0)
        this.logger?.warn(
          { ownerId: child.owner.id, pid: child.pid, dropped: out.dropped },
          "executor output dropped",
        );
      out.windowStart = now;
      out.count = 0;
      out.dropped = 0;
    }
    if (out.count++ < OUTPUT_LINES_PER_WINDOW) {
      this.logger?.info(
        { ownerId: child.owner.id, pid: child.pid, stream, output: text.slice(0, 2000) },
        "executor output",
      );
    } else out.dropped++;
  }

  /** RSS cap (the heap cap misses Buffers) and idle shutdown. */
  private watchChildren(): void {
    if (this.children.size === 0) {
      clearInterval(this.watch);
      this.watch = undefined;
      return;
    }
    const rssLimit = (this.memoryMb * 2 + 128) * 1024 * 1024;
    const now = Date.now();
    for (const child of this.children) {
      if (!child.pid || child.gone || child.killReason) continue;
      const idle = child.batches.size === 0 && child.inspections.size === 0;
      if (idle && now - child.lastActive > this.idleMs) {
        this.retire(child);
        for (const [id, source] of child.owner.sources) {
          if (!source.batch && source.queue.length === 0) child.owner.sources.delete(id);
        }
        continue;
      }
      let rss = 0;
      try {
        const status = fs.readFileSync(`/proc/${child.pid}/status`, "utf8");
        rss = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
      } catch {
        continue;
      }
      if (rss > rssLimit) {
        this.kill(child, {
          code: "out_of_memory",
          message: `The executor used ${Math.round(rss / 1048576)} MB of memory (limit ${Math.round(rssLimit / 1048576)} MB)`,
          blameSole: true,
        });
      }
    }
  }

  private async shutdown(): Promise<void> {
    this.closed = true;
    clearInterval(this.watch);
    this.watch = undefined;
    for (const owner of this.owners.values()) {
      for (const source of owner.sources.values()) {
        for (const call of source.queue.splice(0))
          call.resolve(failed("executor_stopped", "The executor pool was closed"));
      }
    }
    const waits = [...this.children].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.gone) return resolve();
          child.goneWaiters.push(resolve);
          this.kill(child, {
            code: "executor_stopped",
            message: "The executor pool was closed",
            quiet: true,
          });
        }),
    );
    await Promise.race([Promise.all(waits), new Promise((r) => setTimeout(r, 5000).unref())]);
  }

  // ---- files: scratch folders and what an unprivileged uid must be able to read ----------------

  /** Creates the owner's scratch folder (mode 0700, owned by its uid) and returns its real path. */
  private async prepareScratch(owner: Owner): Promise<string> {
    this.scratchRoot ??= (async () => {
      const root = path.join(this.dataDir, "scratch");
      // Scratch is temporary space; emptying it also retires folders owned by uids of a previous run.
      await fsp.rm(root, { recursive: true, force: true });
      await fsp.mkdir(root, { recursive: true, mode: 0o711 });
      await fsp.chmod(root, 0o711);
      const real = await fsp.realpath(root);
      this.realDataDir = path.dirname(real);
      if (this.isolateUsers) await this.ensureReachable(real);
      return real;
    })();
    this.scratchRoot.catch(() => {
      this.scratchRoot = undefined;
    });
    const scratch = path.join(await this.scratchRoot, owner.scratchName);
    if (this.isolateUsers && owner.uid === undefined) owner.uid = this.uidBase + this.nextUid++;
    await fsp.mkdir(scratch, { recursive: true, mode: 0o700 });
    if (owner.uid !== undefined) await fsp.chown(scratch, owner.uid, owner.uid);
    await fsp.chmod(scratch, 0o700);
    return scratch;
  }

  /** Real paths of the components' readDirs, made readable by executor uids. */
  private async readDirsOf(components: BuiltComponent[]): Promise<string[]> {
    const out = new Set<string>();
    for (const component of components) {
      const key = dirsKey(component);
      let dirs = this.readDirCache.get(key);
      if (!dirs) {
        dirs = Promise.all(
          component.readDirs.map(async (d) => {
            const real = await fsp.realpath(d).catch(() => {
              throw new ExecutorError("executor_crash", `The component's folder ${d} does not exist`);
            });
            if (this.isolateUsers) await this.ensureReadable(real);
            return real;
          }),
        );
        this.readDirCache.set(key, dirs);
        dirs.catch(() => this.readDirCache.delete(key));
      }
      for (const d of await dirs) out.add(d);
    }
    return [...out];
  }

  private ensureReadable(dir: string): Promise<void> {
    let done = this.readable.get(dir);
    if (!done) {
      done = (async () => {
        await this.ensureReachable(path.dirname(dir));
        await openUp(dir);
      })();
      this.readable.set(dir, done);
      done.catch(() => this.readable.delete(dir));
    }
    return done;
  }

  /** Every folder from `dir` up to `/` must be searchable by others; only folders in dataDir are changed. */
  private async ensureReachable(dir: string): Promise<void> {
    for (let d = dir; ; d = path.dirname(d)) {
      const st = await fsp.stat(d);
      if ((st.mode & 0o001) === 0) {
        if (!isInside(d, this.dataDir) && !isInside(d, this.realDataDir ?? this.dataDir)) {
          throw new ExecutorError(
            "executor_crash",
            `Executor processes run under their own uids and cannot reach ${dir}: ${d} is not searchable by other users (chmod o+x it, or set isolateUsers: false)`,
          );
        }
        await fsp.chmod(d, (st.mode & 0o7777) | 0o001);
      }
      if (d === path.dirname(d)) return;
    }
  }
}

/** Adds read (and, on folders, search) permission for others through a tree, not following links. */
async function openUp(target: string): Promise<void> {
  const st = await fsp.lstat(target);
  if (st.isSymbolicLink()) return;
  const want = st.isDirectory() ? 0o005 : 0o004;
  if ((st.mode & want) !== want) await fsp.chmod(target, (st.mode & 0o7777) | want);
  if (st.isDirectory()) {
    for (const name of await fsp.readdir(target)) await openUp(path.join(target, name));
  }
}

function stoppedError(): ExecutorError {
  return new ExecutorError("executor_stopped", "The executor pool is closed");
}

function serialized(value: unknown, fallbackCode: string): SerializedError {
  if (!isObject(value)) return { code: fallbackCode, message: String(value) };
  const out: SerializedError = {
    code: typeof value.code === "string" && value.code !== "" ? value.code.slice(0, 100) : fallbackCode,
    message: typeof value.message === "string" ? value.message.slice(0, 8192) : "",
  };
  if (typeof value.name === "string") out.name = value.name.slice(0, 200);
  if (typeof value.stack === "string") out.stack = value.stack.slice(0, 16 * 1024);
  if (isObject(value.data)) out.data = value.data;
  return out;
}

function httpResponse(value: unknown): HttpResponse | undefined {
  if (!isObject(value)) return undefined;
  const { status, headers, body } = value;
  if (typeof status !== "number" || !Number.isInteger(status) || status < 100 || status > 599)
    return undefined;
  const clean: Record<string, string> = {};
  if (isObject(headers))
    for (const [k, v] of Object.entries(headers)) if (typeof v === "string") clean[k] = v;
  const response: HttpResponse = { status, headers: clean, body: typeof body === "string" ? body : null };
  if (value.bodyBase64 === true && typeof body === "string") response.bodyBase64 = true;
  return response;
}
