/**
 * The life of executor processes: one per owner, started on demand (granted every folder the owner's
 * components need, a process that lacks one retired for a new one), sent to, killed, stopped when idle,
 * and all stopped at close. The fork itself is fork.ts; what a death costs is failures.ts.
 */
import type { ChildProcess } from "node:child_process";
import path from "node:path";
import type { ChildInit, ToChild } from "../child/protocol.ts";
import type { PoolCore } from "./core.ts";
import { bundleExecutorCode, forkExecutor } from "./fork.ts";
import { logOutput } from "./limits.ts";
import {
  type Child,
  ExecutorError,
  failed,
  type Owner,
  type Reason,
  type SpareSlot,
  STARTUP_TIMEOUT_MS,
  stoppedError,
  WATCH_INTERVAL_MS,
} from "./model.ts";
import { usableV8Flags } from "./v8-flags.ts";

/** Starts, watches and stops the pool's processes. */
export class Lifecycle {
  private readonly core: PoolCore;
  private watch: NodeJS.Timeout | undefined;
  /** The executor's code bundled into `<dataDir>/executor`, once per pool. */
  private runner: Promise<string> | undefined;
  /** The operator's V8 flags this Node knows, checked once per pool. */
  private v8Flags: Promise<string[]> | undefined;

  constructor(core: PoolCore) {
    this.core = core;
  }

  /** The owner's process if it may read `dirs`; else a new one granted every dir the owner needed so far. */
  async readyChild(owner: Owner, dirs: string[]): Promise<Child> {
    for (let attempt = 0; attempt < 3; attempt++) {
      if (this.core.closed) throw stoppedError();
      let child = owner.child;
      if (!child || child.gone || child.retiring || !dirs.every((d) => child!.allowed.has(d))) {
        for (const d of dirs) owner.dirs.add(d);
        if (child) this.retire(child);
        child = this.core.takeSpare(owner) ?? this.spawnChild(owner);
        owner.child = child;
      }
      await child.ready;
      if (!child.gone && !child.killReason) return child;
    }
    throw new ExecutorError("executor_crash", "The executor process stopped while starting");
  }

  /** Starts a process for `owner`, or a spare (with `spare`) whose `owner` is a stand-in (spares.ts). */
  spawnChild(owner: Owner, spare?: SpareSlot): Child {
    const child: Child = {
      owner,
      ...(spare ? { spare } : {}),
      proc: undefined,
      pid: undefined,
      // A spare may read no owner's folder until one takes it (spares.ts).
      allowed: new Set(spare ? [] : owner.dirs),
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
    this.core.children.add(child);
    child.ready = this.start(child);
    child.ready.catch(() => {});
    this.watch ??= setInterval(() => this.watchChildren(), WATCH_INTERVAL_MS).unref();
    return child;
  }

  private async start(child: Child): Promise<void> {
    const { owner } = child;
    let scratch: string;
    let runner: string;
    let v8Flags: string[];
    try {
      scratch = await this.core.grants.prepareScratch(owner);
      child.scratch = { dir: scratch, measuring: false, over: false };
      if (child.spare) await this.core.prepareSpare(child);
      this.runner ??= bundleExecutorCode(path.join(this.core.settings.dataDir, "executor"));
      this.runner.catch(() => {
        this.runner = undefined;
      });
      runner = await this.runner;
      this.v8Flags ??= this.checkV8Flags();
      v8Flags = await this.v8Flags;
      await this.core.grants.grantToExecutors(path.dirname(runner));
    } catch (err) {
      this.core.gone(child, null, null);
      throw err;
    }
    if (this.core.closed || child.killReason) {
      this.core.gone(child, null, null);
      throw stoppedError();
    }
    const init: ChildInit = {
      ...this.core.settings.limits,
      scratchDir: scratch,
      ...(child.spare ? { spare: true } : {}),
      ...(this.core.settings.inspectOnly.has(owner.id) ? { spareRealms: false as const } : {}),
    };
    let proc: ChildProcess;
    try {
      proc = forkExecutor({
        runner,
        scratch,
        // A spare reads its owner's folders through links in its own folder (spares.ts).
        allowed: child.spare ? [child.spare.folder] : child.allowed,
        memoryMb: this.core.settings.memoryMb,
        v8Flags,
        mallocArenaMax: this.core.settings.mallocArenaMax,
        uid: owner.uid,
        preserveSymlinks: child.spare !== undefined,
        extraCaCertsFile: this.core.settings.extraCaCertsFile,
        init,
      });
    } catch (err) {
      this.core.gone(child, null, null);
      throw new ExecutorError(
        "executor_crash",
        `The executor process could not start: ${(err as Error).message}`,
      );
    }
    child.proc = proc;
    child.pid = proc.pid;
    proc.on("message", (m: unknown) => this.core.onMessage(child, m));
    proc.on("error", (err) => {
      this.core.logger?.warn({ ownerId: owner.id, err }, "executor process error");
      if (proc.pid === undefined) this.core.gone(child, null, null);
    });
    proc.on("close", (code, signal) => this.core.gone(child, code, signal));
    proc.stdout?.on("data", (chunk: Buffer) => logOutput(child, "stdout", chunk, this.core.logger));
    proc.stderr?.on("data", (chunk: Buffer) => logOutput(child, "stderr", chunk, this.core.logger));
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

  private async checkV8Flags(): Promise<string[]> {
    const { flags, dropped } = await usableV8Flags(this.core.settings.v8Flags);
    for (const { flag, why } of dropped)
      this.core.logger?.warn({ flag, why }, "executor V8 flag ignored (FOUNT_EXECUTOR_V8_FLAGS)");
    return flags;
  }

  /** Sends to a child; a channel that is closed or fails kills it (`executor_crash`). */
  send(child: Child, message: ToChild): void {
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
  kill(child: Child, reason: Reason): void {
    child.killReason ??= reason;
    if (child.gone) return;
    if (child.proc && child.proc.exitCode === null && child.proc.signalCode === null)
      child.proc.kill("SIGKILL");
    else if (!child.proc) this.core.gone(child, null, null);
  }

  private retire(child: Child): void {
    child.retiring = true;
    if (child.owner.child === child) child.owner.child = null;
    this.stopIfRetired(child);
  }

  stopIfRetired(child: Child): void {
    if (child.retiring && child.batches.size === 0 && child.inspections.size === 0) {
      this.kill(child, { code: "executor_stopped", message: "retired", quiet: true });
    }
  }

  /**
   * Every WATCH_INTERVAL_MS: idle shutdown of processes and of realms, then each process's scratch size
   * (measured mode) and RSS cap (limits.ts).
   */
  private watchChildren(): void {
    if (this.core.children.size === 0) {
      clearInterval(this.watch);
      this.watch = undefined;
      return;
    }
    const now = Date.now();
    for (const child of this.core.children) {
      if (!child.pid || child.gone || child.killReason) continue;
      // A spare nobody took yet waits as long as it takes.
      const idle =
        !(child.spare && !child.spare.taken) &&
        child.started &&
        child.batches.size === 0 &&
        child.inspections.size === 0;
      if (idle && now - child.lastActive > this.core.settings.idleMs) {
        this.retire(child);
        for (const [id, source] of child.owner.sources) {
          if (!source.batch && source.queue.length === 0) child.owner.sources.delete(id);
        }
        continue;
      }
      for (const [sid, since] of child.realmIdleSince) {
        if (child.batches.has(sid)) continue;
        if (!child.dbVersions.has(sid)) {
          child.realmIdleSince.delete(sid);
          continue;
        }
        // The process's last realm stays while the process does: stopped, the next hit would start it
        // again (REALM_IDLE_MS says what that cost), and the process itself stops after `idleMs`.
        if (now - since <= this.core.settings.realmIdleMs || child.dbVersions.size <= 1) continue;
        child.realmIdleSince.delete(sid);
        child.dbVersions.delete(sid);
        this.send(child, { t: "forget", sid });
      }
      if (this.core.scratch.current === "measured") this.core.measureScratch(child);
      this.core.checkMemory(child, child.pid, now);
    }
  }

  /** Stops every process; queued calls fail with `executor_stopped`. Once, from `close`. */
  async shutdown(): Promise<void> {
    this.core.closed = true;
    clearInterval(this.watch);
    this.watch = undefined;
    for (const owner of this.core.owners.values()) {
      for (const source of owner.sources.values()) {
        for (const call of source.queue.splice(0))
          call.resolve(failed("executor_stopped", "The executor pool was closed"));
      }
    }
    const waits = [...this.core.children].map(
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
    await this.core.scratch.detachAll().catch(() => {});
  }
}
