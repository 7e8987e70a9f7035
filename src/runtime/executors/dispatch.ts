/**
 * Getting calls to a process: each source's invocations queued in call order and sent to the owner's
 * process in batches (the calls of one event-loop turn together, the next batch sent behind a running
 * one when the process holds the db it needs), inspections sent at once, and each call's result handed
 * back with the db bookkeeping kept in step. What goes to a child per batch: the calls' shared
 * configurations once, and a db copy only when the child lacks the version the caller knows (see the
 * `ExecutorPool` class comment for the version rules).
 */
import { createHash } from "node:crypto";
import { clientLeft } from "../../errors.ts";
import type { BatchConfig, BatchItem, BatchMessage, ToChild } from "../child/protocol.ts";
import type { BuiltComponent, ComponentMeta, HttpResponse, InvokeRequest, InvokeResult } from "../types.ts";
import type { PoolCore } from "./core.ts";
import {
  type Batch,
  type Call,
  type Child,
  ComponentInvalidError,
  dirsKey,
  ExecutorError,
  failed,
  MAX_BATCH,
  MAX_CACHED_DBS,
  newBatch,
  type Owner,
  type SourceState,
  STARTUP_TIMEOUT_MS,
  stoppedError,
} from "./model.ts";

/** Builds the batch message and updates the source's and the child's db bookkeeping to match. */
export function batchMessage(
  batch: Batch,
  child: Child,
  send: (message: ToChild) => void,
  entryPath: (component: BuiltComponent) => string,
): BatchMessage {
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
      r.httpProps === prev.httpProps &&
      r.dynamicProps === prev.dynamicProps;
    if (!same) {
      const key = `${r.component.entryFile}\0${JSON.stringify([r.props, r.dbProps, r.httpProps, r.dynamicProps])}`;
      const found = index.get(key);
      if (found === undefined) {
        c = cfgs.length;
        index.set(key, c);
        cfgs.push({
          entryFile: entryPath(r.component),
          props: r.props,
          dbProps: r.dbProps,
          httpProps: r.httpProps,
          ...(r.dynamicProps?.length ? { dynamicProps: r.dynamicProps } : {}),
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
      send({ t: "forget", sid: oldest });
      break;
    }
  }
  return message;
}

/** Queues, batches and settles the pool's calls. */
export class Dispatch {
  private readonly core: PoolCore;
  /** Numbers calls and inspections, unique in the pool. */
  private seq = 0;

  constructor(core: PoolCore) {
    this.core = core;
  }

  private owner(ownerId: string): Owner {
    let owner = this.core.owners.get(ownerId);
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
      this.core.owners.set(ownerId, owner);
    }
    return owner;
  }

  /** Loads a component in the owner's process to read its definition. */
  async inspect(ownerId: string, component: BuiltComponent, timeoutMs?: number): Promise<ComponentMeta> {
    const limit = timeoutMs && timeoutMs > 0 ? timeoutMs : this.core.settings.defaultTimeoutMs;
    if (this.core.closed) throw stoppedError();
    const owner = this.owner(ownerId);
    const dirs = await this.core.grants.readDirsOf(owner, [component]);
    const child = await this.core.readyChild(owner, dirs);
    if (child.gone) throw new ExecutorError("executor_crash", "The executor process stopped");
    const q = ++this.seq;
    return new Promise<ComponentMeta>((resolve, reject) => {
      const expire = () => {
        // Only the inspection's realm stops; the owner's sources go on.
        child.inspections.delete(q);
        this.core.send(child, { t: "stop", q });
        reject(new ComponentInvalidError(`Loading the component did not finish within ${limit} ms`));
        this.core.stopIfRetired(child);
      };
      // Until its realm says it began loading, the realm's startup gets an allowance on top.
      const timer = setTimeout(expire, limit + STARTUP_TIMEOUT_MS);
      child.inspections.set(q, { q, component, resolve, reject, timer, expire, limit });
      child.lastActive = Date.now();
      this.core.send(child, { t: "inspect", q, entryFile: this.core.entryPath(child, component) });
    });
  }

  /**
   * The caller applied the source's results up to db `version`: the writes we returned up to it are let
   * go (kept, every source that ever wrote its db pinned them in the server's memory, up to 4 MiB each),
   * and with them the source's state once it has nothing to run.
   */
  applied(ownerId: string, sourceId: string, version: number): void {
    const source = this.core.owners.get(ownerId)?.sources.get(sourceId);
    if (!source) return;
    for (const [key, write] of source.overlay) if (write.v <= version) source.overlay.delete(key);
    this.forgetIfIdle(source);
  }

  /** Queues an invocation behind the source's earlier ones; see the `ExecutorPool` class comment. */
  invoke(request: InvokeRequest, onRespond?: (response: HttpResponse) => void): Promise<InvokeResult> {
    return new Promise<InvokeResult>((resolve, reject) => {
      if (this.core.closed) {
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
      const call: Call = { q: ++this.seq, req: request, onRespond, resolve, responded: false };
      source.queue.push(call);
      // A call its caller gave up on before it left for the child is dropped, failing with the reason.
      request.signal?.addEventListener(
        "abort",
        () => {
          const at = source.queue.indexOf(call);
          if (at === -1) return;
          source.queue.splice(at, 1);
          reject(clientLeft());
          this.forgetIfIdle(source);
        },
        { once: true },
      );
      // The first queued call waits for the end of this event-loop turn, so the calls that arrive in the
      // same turn (every request read in one poll) go to the child as one batch, instead of a batch of
      // one followed by a batch of the rest.
      if (source.queue.length === 1 && !source.waiting) setImmediate(() => this.pump(source));
    });
  }

  /**
   * Sends the source's queued calls as one batch; with a batch already out, as the batch waiting
   * behind it when `pipeline` allows, else they wait for it to end.
   */
  pump(source: SourceState): void {
    if (source.queue.length === 0 || this.core.closed) return;
    if (source.batch) {
      this.pipeline(source, source.batch);
      return;
    }
    const batch = newBatch(source, source.queue.splice(0, MAX_BATCH));
    source.batch = batch;
    this.startBatch(batch).catch((err: unknown) => {
      const code = this.core.closed ? "executor_stopped" : "executor_crash";
      const message = err instanceof Error ? err.message : String(err);
      for (const call of batch.calls.slice(batch.next)) this.settle(source, call, failed(code, message));
      this.endBatch(batch);
    });
  }

  private async startBatch(batch: Batch): Promise<void> {
    const { source } = batch;
    const dirs = await this.core.grants.readDirsOf(
      source.owner,
      batch.calls.map((c) => c.req.component),
    );
    const child = await this.core.readyChild(source.owner, dirs);
    if (this.core.closed) throw stoppedError();
    if (child.gone) throw new ExecutorError("executor_crash", "The executor process stopped");
    batch.child = child;
    child.batches.set(source.sourceId, batch);
    const message = this.message(batch, child);
    batch.started = Date.now();
    child.lastActive = batch.started;
    this.core.arm(batch);
    this.core.send(child, message);
    // Calls that arrived while the process was being found can follow at once.
    this.pump(source);
  }

  private message(batch: Batch, child: Child): BatchMessage {
    return batchMessage(
      batch,
      child,
      (m) => this.core.send(child, m),
      (component) => this.core.entryPath(child, component),
    );
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
    const message = this.message(batch, child);
    this.core.send(child, message);
  }

  settle(source: SourceState, call: Call, result: InvokeResult, child?: Child): void {
    const keys = result.error ? [] : Object.keys(result.dbWrites);
    if (keys.length > 0) {
      const v = ++source.version;
      for (const key of keys) source.overlay.set(key, { value: result.dbWrites[key], v });
      // The child applied these writes to its copy as well.
      if (child?.dbVersions.has(source.sourceId)) child.dbVersions.set(source.sourceId, v);
    }
    call.resolve(result);
  }

  endBatch(batch: Batch): void {
    clearTimeout(batch.timer);
    const { source, child } = batch;
    if (source.batch === batch) source.batch = null;
    if (child && child.batches.get(source.sourceId) === batch) {
      child.batches.delete(source.sourceId);
      if (child.spare) this.core.spareAnswered(child);
      child.lastActive = Date.now();
      child.realmIdleSince.set(source.sourceId, child.lastActive);
      const next = source.waiting;
      if (next && next.child === child && !child.gone) {
        // The child starts the waiting batch as it sends this one's last results.
        source.waiting = null;
        source.batch = next;
        child.batches.set(source.sourceId, next);
        next.started = child.lastActive;
        this.core.arm(next);
      }
      this.core.stopIfRetired(child);
      if (this.core.scratch.current === "measured" && !child.gone)
        this.core.measureScratch(child, source.sourceId);
    }
    this.pump(source);
    this.forgetIfIdle(source);
  }

  /** Drops a source's state once it matters no more (options calls use throwaway source ids, too). */
  private forgetIfIdle(source: SourceState): void {
    if (source.batch || source.waiting || source.queue.length > 0 || source.overlay.size > 0) return;
    if (source.owner.sources.get(source.sourceId) === source) source.owner.sources.delete(source.sourceId);
  }
}
