/**
 * The sandbox: component code runs in one long-lived child process per owner, never in the server.
 * Each child is forked with an empty environment, Node's permission model (read: its code, write:
 * its scratch folder), a V8 heap cap and, when the server runs as root, a uid of its own. Invocations
 * of a source are queued here and sent to the child in batches; see docs/isolation.md. This file is
 * the pool's face: it builds the rooms beside it and hands them one core (core.ts), through which they
 * call each other: `dispatch` (queues, batches, results), `lifecycle` (starting, watching and stopping
 * processes; the fork itself in `fork`), `limits` (timeouts, memory, scratch size, output), `failures`
 * (realms and processes that end), `messages` (what a child says), with `grants` (files), `results`
 * (copying untrusted answers), `api-relay` (component requests to Pipedream's API) and `model` (the
 * state they share).
 */
import type {
  BuiltComponent,
  ComponentMeta,
  Executor,
  HttpResponse,
  InvokeRequest,
  InvokeResult,
} from "../types.ts";
import { ApiRelay } from "./api-relay.ts";
import { type PoolCore, poolSettings } from "./core.ts";
import { Dispatch } from "./dispatch.ts";
import { Failures } from "./failures.ts";
import { Grants } from "./grants.ts";
import { Lifecycle } from "./lifecycle.ts";
import { Limits } from "./limits.ts";
import { ChildMessages } from "./messages.ts";
import { type ExecutorPoolOptions, inCode } from "./model.ts";
import { ScratchLimit, type ScratchMode } from "./scratch.ts";
import { Spares } from "./spares.ts";

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
  private readonly core: PoolCore;
  private readonly dispatch: Dispatch;
  private readonly lifecycle: Lifecycle;
  private readonly spares: Spares;
  private closing: Promise<void> | undefined;

  constructor(options: ExecutorPoolOptions) {
    const settings = poolSettings(options);
    const apiRelay = options.pipedreamApi
      ? new ApiRelay({
          ...options.pipedreamApi,
          send: (child, message) => core.send(child, message),
          logger: options.logger,
        })
      : undefined;
    const root = process.getuid?.() === 0;
    const isolateUsers = options.isolateUsers ?? root;
    if (isolateUsers && !root) throw new Error("isolateUsers needs the server to run as root");
    const scratch = new ScratchLimit(options.scratchMb ?? 256, options.scratchMode);
    const grants = new Grants(settings.dataDir, isolateUsers, options.uidBase ?? 200_000, scratch);
    // Each operation goes to the room that holds it; the rooms reach one another only through `core`.
    const core: PoolCore = {
      settings,
      logger: options.logger,
      owners: new Map(),
      children: new Set(),
      grants,
      scratch,
      closed: false,
      readyChild: (owner, dirs) => lifecycle.readyChild(owner, dirs),
      send: (child, message) => lifecycle.send(child, message),
      kill: (child, reason) => lifecycle.kill(child, reason),
      stopIfRetired: (child) => lifecycle.stopIfRetired(child),
      spawn: (owner, spare) => lifecycle.spawnChild(owner, spare),
      takeSpare: (owner) => spares.take(owner),
      prepareSpare: (child) => spares.prepare(child),
      entryPath: (child, component) => spares.entryPath(child, component),
      spareGone: (child, released) => spares.gone(child, released),
      spareAnswered: (child) => spares.answered(child),
      pump: (source) => dispatch.pump(source),
      settle: (source, call, result, child) => dispatch.settle(source, call, result, child),
      endBatch: (batch) => dispatch.endBatch(batch),
      arm: (batch) => limits.arm(batch),
      checkMemory: (child, pid, now) => limits.checkMemory(child, pid, now),
      measureScratch: (child, sourceId) => limits.measureScratch(child, sourceId),
      realmGone: (child, sid, reason) => failures.realmGone(child, sid, reason),
      inspectionGone: (child, q, reason) => failures.inspectionGone(child, q, reason),
      gone: (child, code, signal) => failures.gone(child, code, signal),
      reportLate: (child, sourceId, cpuMs, error) => failures.reportLate(child, sourceId, cpuMs, error),
      onMessage: (child, raw) => messages.onMessage(child, raw),
    };
    const lifecycle = new Lifecycle(core);
    const dispatch = new Dispatch(core);
    const limits = new Limits(core);
    const failures = new Failures(core, options.onLateWork);
    const messages = new ChildMessages(core, apiRelay);
    // A spare as root without per-uid isolation would run as root: none then.
    const spares = new Spares(core, root && !isolateUsers ? 0 : Math.max(0, options.spares ?? 0));
    this.core = core;
    this.spares = spares;
    this.dispatch = dispatch;
    this.lifecycle = lifecycle;
  }

  // ---- public API ------------------------------------------------------------------------------

  inspect(ownerId: string, component: BuiltComponent, timeoutMs?: number): Promise<ComponentMeta> {
    return this.dispatch.inspect(ownerId, component, timeoutMs);
  }

  invoke(request: InvokeRequest, onRespond?: (response: HttpResponse) => void): Promise<InvokeResult> {
    return this.dispatch.invoke(request, onRespond);
  }

  applied(ownerId: string, sourceId: string, version: number): void {
    this.dispatch.applied(ownerId, sourceId, version);
  }

  /** Starts the spare processes the pool keeps (`spares`; docs/isolation.md). */
  startSpares(): void {
    this.spares.fill();
  }

  /** Spare processes waiting for an owner (started or starting). */
  get spareCount(): number {
    return this.spares.size;
  }

  close(): Promise<void> {
    this.spares.close();
    this.closing ??= this.lifecycle.shutdown();
    return this.closing;
  }

  /** Prepares `<dataDir>/scratch` (stale mounts gone) and says how its size limit is enforced. */
  async scratchLimit(): Promise<{ mode: ScratchMode; limitMb: number }> {
    await this.core.grants.scratchRootDir();
    return { mode: this.core.scratch.current ?? "measured", limitMb: this.core.scratch.limitBytes / 1048576 };
  }

  /** pid of the owner's current executor process, if one runs (for tests and diagnostics). */
  pidOf(ownerId: string): number | undefined {
    return this.core.owners.get(ownerId)?.child?.pid;
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
    return [...this.core.owners.values()].map((owner) => {
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
}
