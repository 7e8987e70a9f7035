/**
 * The sandbox: component code runs in one long-lived child process per owner, never in the server.
 * Each child is forked with an empty environment, Node's permission model (read: its code, write:
 * its scratch folder), a V8 heap cap and, when the server runs as root, a uid of its own. Invocations
 * of a source are queued here and sent to the child in batches; see docs/isolation.md. The rooms
 * beside this file hold the parts: `grants` (files), `lifecycle` (forking), `dispatch` (batch
 * messages), `limits` (timeouts, memory, output), `results` (copying untrusted answers), `api-relay`
 * (component requests to Pipedream's API).
 */
import type { ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import path from "node:path";
import type { ChildInit, FromChild, ItemResult, ToChild } from "../child/protocol.ts";
import type {
  BuiltComponent,
  ComponentMeta,
  Executor,
  HttpResponse,
  InvokeRequest,
  InvokeResult,
  LateWork,
} from "../types.ts";
import { ApiRelay } from "./api-relay.ts";
import { batchMessage } from "./dispatch.ts";
import { Grants } from "./grants.ts";
import { bundleExecutorCode, forkExecutor, reniceExecutor, syntaxLocation } from "./lifecycle.ts";
import { deathReason, logOutput, rssBytes, rssLimitBytes, timeoutCulprit } from "./limits.ts";
import {
  type Batch,
  type Call,
  type Child,
  ComponentInvalidError,
  dirsKey,
  ExecutorError,
  type ExecutorLogger,
  type ExecutorPoolOptions,
  failed,
  inCode,
  isObject,
  LOG_ENTRY_CHARS,
  MAX_BATCH,
  MAX_REALM_RESTARTS,
  newBatch,
  type Owner,
  REALM_IDLE_MS,
  type Reason,
  SHED_GRACE_MS,
  type SourceState,
  STARTUP_TIMEOUT_MS,
  stoppedError,
  unsettledCall,
  WATCH_INTERVAL_MS,
} from "./model.ts";
import { copyResult, httpResponse, serialized } from "./results.ts";
import { ScratchLimit, type ScratchMode } from "./scratch.ts";

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
export class ExecutorPool implements Executor {
  private readonly dataDir: string;
  private readonly memoryMb: number;
  private readonly defaultTimeoutMs: number;
  private readonly limits: ChildInit;
  private readonly idleMs: number;
  private readonly extraCaCertsFile: string | undefined;
  private readonly logger: ExecutorLogger | undefined;
  private readonly onLateWork: ((report: LateWork) => void) | undefined;
  private readonly owners = new Map<string, Owner>();
  private readonly children = new Set<Child>();
  private readonly grants: Grants;
  private readonly scratch: ScratchLimit;
  private readonly apiRelay: ApiRelay | undefined;
  private seq = 0;
  private watch: NodeJS.Timeout | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;
  /** The executor's code bundled into `<dataDir>/executor`, once per pool. */
  private runner: Promise<string> | undefined;

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
      memoryMb: this.memoryMb,
      lateWorkLimitMs: this.defaultTimeoutMs,
      realmsPerOwner: options.realmsPerOwner ?? 16,
      ...(options.egress ? { egress: options.egress } : {}),
      ...(options.pipedreamApi ? { pipedreamApi: { bodyLimit: options.pipedreamApi.bodyLimit } } : {}),
    };
    this.apiRelay = options.pipedreamApi
      ? new ApiRelay({
          ...options.pipedreamApi,
          send: (child, message) => this.send(child, message),
          logger: options.logger,
        })
      : undefined;
    const root = process.getuid?.() === 0;
    const isolateUsers = options.isolateUsers ?? root;
    if (isolateUsers && !root) throw new Error("isolateUsers needs the server to run as root");
    this.scratch = new ScratchLimit(options.scratchMb ?? 256, options.scratchMode);
    this.grants = new Grants(this.dataDir, isolateUsers, options.uidBase ?? 200_000, this.scratch);
    this.idleMs = options.idleMs ?? 10 * 60_000;
    this.extraCaCertsFile = options.extraCaCertsFile;
    this.logger = options.logger;
    this.onLateWork = options.onLateWork;
  }

  // ---- public API ------------------------------------------------------------------------------

  async inspect(ownerId: string, component: BuiltComponent, timeoutMs?: number): Promise<ComponentMeta> {
    const limit = timeoutMs && timeoutMs > 0 ? timeoutMs : this.defaultTimeoutMs;
    if (this.closed) throw stoppedError();
    const owner = this.owner(ownerId);
    const dirs = await this.grants.readDirsOf([component]);
    const child = await this.readyChild(owner, dirs);
    if (child.gone) throw new ExecutorError("executor_crash", "The executor process stopped");
    const q = ++this.seq;
    return new Promise<ComponentMeta>((resolve, reject) => {
      const expire = () => {
        // Only the inspection's realm stops; the owner's sources go on.
        child.inspections.delete(q);
        this.send(child, { t: "stop", q });
        reject(new ComponentInvalidError(`Loading the component did not finish within ${limit} ms`));
        this.stopIfRetired(child);
      };
      // Until its realm says it began loading, the realm's startup gets an allowance on top.
      const timer = setTimeout(expire, limit + STARTUP_TIMEOUT_MS);
      child.inspections.set(q, { q, component, resolve, reject, timer, expire, limit });
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
          restarts: 0,
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

  /** Prepares `<dataDir>/scratch` (stale mounts gone) and says how its size limit is enforced. */
  async scratchLimit(): Promise<{ mode: ScratchMode; limitMb: number }> {
    await this.grants.scratchRootDir();
    return { mode: this.scratch.current ?? "measured", limitMb: this.scratch.limitBytes / 1048576 };
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
    /** Realms (worker threads) the owner's current process has started, spares and inspections included. */
    realmsStarted: number;
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
        realmsStarted: owner.child?.realmsStarted ?? 0,
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
    const dirs = await this.grants.readDirsOf(batch.calls.map((c) => c.req.component));
    const child = await this.readyChild(source.owner, dirs);
    if (this.closed) throw stoppedError();
    if (child.gone) throw new ExecutorError("executor_crash", "The executor process stopped");
    batch.child = child;
    child.batches.set(source.sourceId, batch);
    const message = batchMessage(batch, child, (m) => this.send(child, m));
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
    const message = batchMessage(batch, child, (m) => this.send(child, m));
    this.send(child, message);
  }

  /** (Re)starts the kill timer of the batch's running call. */
  private arm(batch: Batch): void {
    clearTimeout(batch.timer);
    const call = batch.calls[batch.next];
    const child = batch.child;
    if (!call || !child) return;
    const limit = call.req.timeoutMs > 0 ? call.req.timeoutMs : this.defaultTimeoutMs;
    // A call is timed from when its realm began the batch; until then (a new realm starting up on a
    // busy machine) it gets the startup allowance on top.
    const allowance = batch.received ? 0 : STARTUP_TIMEOUT_MS;
    const wait = Math.max(0, batch.started + limit + allowance - Date.now());
    batch.timer = setTimeout(() => {
      // Only the source's realm stops: the owner's other sources keep running.
      const sid = batch.source.sourceId;
      this.send(child, { t: "stop", sid });
      this.realmGone(child, sid, {
        code: "timeout",
        message: `The invocation did not finish within ${limit} ms`,
        q: timeoutCulprit(batch, call),
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
      child.realmIdleSince.set(source.sourceId, child.lastActive);
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
      if (this.scratch.current === "measured" && !child.gone) this.measureScratch(child, source.sourceId);
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
        if (!child.started && child.pid !== undefined) reniceExecutor(child.pid);
        child.started = true;
        child.startWaiters?.resolve();
        break;
      case "got":
      case "started": {
        const batch = child.batches.get(String(msg.sid));
        if (!batch) break;
        if (!batch.received) {
          batch.received = true;
          batch.started = Date.now();
          this.arm(batch);
        }
        // A loaded module lets the child say both at once.
        if (msg.t === "started") batch.entered = true;
        break;
      }
      case "results":
        this.onResults(child, msg);
        break;
      case "respond": {
        const call = unsettledCall(child, msg.q, msg.sid);
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
      case "inspecting": {
        const inspection = child.inspections.get(msg.q);
        if (!inspection) break;
        clearTimeout(inspection.timer);
        inspection.timer = setTimeout(inspection.expire, inspection.limit);
        break;
      }
      case "fatal": {
        const known = ["process_exit", "unhandled_rejection", "out_of_memory"];
        const code = known.includes(msg.code) ? msg.code : "executor_crash";
        const reason: Reason = { code, message: String(msg.message).slice(0, 2000) };
        if (typeof msg.q === "number") reason.q = msg.q;
        if (typeof msg.stack === "string") reason.stack = msg.stack.slice(0, 16 * 1024);
        if (typeof msg.sid === "string") this.realmGone(child, msg.sid, reason);
        else if (typeof msg.inspect === "number") this.inspectionGone(child, msg.inspect, reason);
        else this.kill(child, reason);
        break;
      }
      case "realm":
        child.realmsStarted++;
        break;
      case "api":
        this.apiRelay?.onRequest(child, msg.id, msg.request);
        break;
      case "dropped": {
        if (typeof msg.sid !== "string") return;
        // A batch already on its way finds no realm and no db: hand its calls to the next one.
        if (child.batches.has(msg.sid))
          this.realmGone(child, msg.sid, {
            code: "executor_crash",
            message: "A source sharing this source's realm stopped it",
          });
        else child.dbVersions.delete(msg.sid);
        break;
      }
      case "late": {
        if (typeof msg.sid !== "string") return;
        this.reportLate(child, msg.sid, 0, {
          code: "late_emit",
          message:
            "$emit was called after the invocation had returned (by a timer or promise it left running); the event was not stored. Await such work inside run.",
        });
        break;
      }
      case "usage": {
        if (typeof msg.sid !== "string") return;
        const ms = typeof msg.ms === "number" && msg.ms > 0 ? Math.min(msg.ms, 3_600_000) : 0;
        if (msg.stopped === true) {
          const message = `Work left running after the invocation returned kept the CPU busy for over ${this.defaultTimeoutMs} ms and was stopped`;
          this.realmGone(child, msg.sid, { code: "late_work_stopped", message });
          this.reportLate(child, msg.sid, ms, { code: "late_work_stopped", message });
        } else if (ms > 0) this.reportLate(child, msg.sid, ms);
        break;
      }
    }
  }

  private onResults(child: Child, msg: Extract<FromChild, { t: "results" }>): void {
    const batch = typeof msg.sid === "string" ? child.batches.get(msg.sid) : undefined;
    if (!batch || !Array.isArray(msg.results)) return;
    batch.source.restarts = 0;
    const now = Date.now();
    for (const raw of msg.results) {
      const call = batch.calls[batch.next];
      if (!call || !isObject(raw) || raw.q !== call.q) break;
      batch.next++;
      this.settle(batch.source, call, copyResult(raw as unknown as ItemResult, this.limits), child);
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
      const where = await syntaxLocation(inspection.component, child.owner.uid).catch(() => undefined);
      if (where) {
        data = where;
        message += ` (line ${where.line}${where.column ? `, column ${where.column}` : ""})`;
      }
    }
    inspection.reject(new ComponentInvalidError(message, data));
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
      realmIdleSince: new Map(),
      realmsStarted: 0,
      shedAt: undefined,
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
      scratch = await this.grants.prepareScratch(owner);
      child.scratch = { dir: scratch, measuring: false, over: false };
      this.runner ??= bundleExecutorCode(path.join(this.dataDir, "executor"));
      this.runner.catch(() => {
        this.runner = undefined;
      });
      runner = await this.runner;
      await this.grants.grantToExecutors(path.dirname(runner));
    } catch (err) {
      this.gone(child, null, null);
      throw err;
    }
    if (this.closed || child.killReason) {
      this.gone(child, null, null);
      throw stoppedError();
    }
    const init: ChildInit = { ...this.limits, scratchDir: scratch };
    let proc: ChildProcess;
    try {
      proc = forkExecutor({
        runner,
        scratch,
        allowed: child.allowed,
        memoryMb: this.memoryMb,
        uid: owner.uid,
        extraCaCertsFile: this.extraCaCertsFile,
        init,
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
    proc.stdout?.on("data", (chunk: Buffer) => logOutput(child, "stdout", chunk, this.logger));
    proc.stderr?.on("data", (chunk: Buffer) => logOutput(child, "stderr", chunk, this.logger));
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

  /**
   * A source's realm is gone (stopped at a timeout, or dead): the child's db copy went with it. The
   * call it was running fails; calls behind it never started and go to the next realm, with the db.
   */
  private realmGone(child: Child, sid: string, reason: Reason): void {
    child.dbVersions.delete(sid);
    const batch = child.batches.get(sid);
    if (!batch) {
      // Nothing of the source was running: what killed the realm is work left behind after `run`.
      if (reason.code !== "late_work_stopped" && reason.code !== "timeout") {
        const error = { code: reason.code, message: `After the invocation returned: ${reason.message}` };
        this.reportLate(child, sid, 0, reason.stack ? { ...error, stack: reason.stack } : error);
      }
      return;
    }
    child.batches.delete(sid);
    clearTimeout(batch.timer);
    const { source } = batch;
    const waiting = source.waiting;
    if (waiting?.child === child) {
      source.waiting = null;
      batch.calls.push(...waiting.calls);
    }
    const first = batch.calls[batch.next];
    let culprit = reason.q ?? (batch.received ? first?.q : undefined);
    let started = inCode(batch) || (batch.received && first !== undefined && first.q === culprit);
    if (!started && first && ++source.restarts >= MAX_REALM_RESTARTS) {
      // Realms that die before running anything, again and again: fail rather than loop.
      culprit = first.q;
      started = true;
    }
    if (!this.closed) {
      const firstNotStarted = started ? batch.next + 1 : batch.next;
      source.queue.unshift(...batch.calls.slice(firstNotStarted));
      batch.calls.length = Math.min(batch.calls.length, firstNotStarted);
    }
    const othersMessage = `The source's realm stopped before this invocation finished: ${reason.message}`;
    for (const call of batch.calls.slice(batch.next)) {
      const mine = call.q === culprit;
      const extra = mine && reason.stack ? { stack: reason.stack } : {};
      this.settle(
        source,
        call,
        mine ? failed(reason.code, reason.message, extra) : failed("executor_crash", othersMessage),
      );
    }
    batch.next = batch.calls.length;
    child.lastActive = Date.now();
    this.endBatch(batch);
    this.stopIfRetired(child);
  }

  /** An inspection's realm died while loading the component. */
  private inspectionGone(child: Child, q: number, reason: Reason): void {
    const inspection = child.inspections.get(q);
    if (!inspection) return;
    child.inspections.delete(q);
    clearTimeout(inspection.timer);
    inspection.reject(new ComponentInvalidError(`The component failed while loading: ${reason.message}`));
    this.stopIfRetired(child);
  }

  /** Passes work a source did after its invocation returned to `onLateWork`. */
  private reportLate(child: Child, sourceId: string, cpuMs: number, error?: LateWork["error"]): void {
    const report: LateWork = { ownerId: child.owner.id, sourceId, cpuMs };
    if (error) report.error = error;
    try {
      this.onLateWork?.(report);
    } catch (err) {
      this.logger?.warn({ err, sourceId }, "onLateWork callback threw");
    }
  }

  /** The process is gone: fail what it was running, blame the culprit, let queued calls go to a new one. */
  private gone(child: Child, code: number | null, signal: NodeJS.Signals | null): void {
    if (child.gone) return;
    child.gone = true;
    this.children.delete(child);
    if (child.scratch) void this.scratch.detach(child.scratch.dir, child.scratch.over);
    const { owner } = child;
    if (owner.child === child) owner.child = null;
    const reason = deathReason(child, code, signal, this.memoryMb);
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

  /** RSS cap (the heap cap misses Buffers) and idle shutdown. */
  private watchChildren(): void {
    if (this.children.size === 0) {
      clearInterval(this.watch);
      this.watch = undefined;
      return;
    }
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
      for (const [sid, since] of child.realmIdleSince) {
        if (child.batches.has(sid)) continue;
        if (now - since > REALM_IDLE_MS || !child.dbVersions.has(sid)) child.realmIdleSince.delete(sid);
        if (now - since > REALM_IDLE_MS && child.dbVersions.delete(sid))
          this.send(child, { t: "forget", sid });
      }
      if (this.scratch.current === "measured") this.measureScratch(child);
      // Live realms: one per source with a db copy, one per inspection, and the spare.
      const rssLimit = rssLimitBytes(this.memoryMb, child.dbVersions.size + child.inspections.size + 1);
      const rss = rssBytes(child.pid);
      if (rss === undefined || rss <= rssLimit) {
        child.shedAt = undefined;
        continue;
      }
      const message = `The executor used ${Math.round(rss / 1048576)} MB of memory (limit ${Math.round(rssLimit / 1048576)} MB)`;
      if (child.shedAt === undefined) {
        // First the source realm holding the most goes; only if that does not help, the process.
        child.shedAt = now;
        this.send(child, { t: "shed", message });
      } else if (now - child.shedAt >= SHED_GRACE_MS) {
        this.kill(child, { code: "out_of_memory", message, blameSole: true });
      }
    }
  }

  /**
   * Measured mode (after each batch and every WATCH_INTERVAL_MS): an owner whose scratch folder is over
   * the limit has its process stopped and the folder emptied. The running invocation, if one, fails
   * with `scratch_full`; after a batch, the source whose batch just ended is told on `$errors`.
   */
  private measureScratch(child: Child, sourceId?: string): void {
    const scratch = child.scratch;
    if (!scratch || scratch.measuring) return;
    scratch.measuring = true;
    void this.scratch
      .usedBytes(scratch.dir)
      .then((used) => {
        if (used <= this.scratch.limitBytes || child.gone || child.killReason) return;
        scratch.over = true;
        const mb = (n: number) => Math.round((n / 1048576) * 10) / 10;
        const message = `The owner's scratch folder held ${mb(used)} MB (limit ${mb(this.scratch.limitBytes)} MB): the executor was stopped and the folder emptied`;
        const running = [...child.batches.values()].some((b) => b.received && b.next < b.calls.length);
        if (sourceId && !running) this.reportLate(child, sourceId, 0, { code: "scratch_full", message });
        this.kill(child, { code: "scratch_full", message, blameSole: true });
      })
      .finally(() => {
        scratch.measuring = false;
      });
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
    await this.scratch.detachAll().catch(() => {});
  }
}
