/**
 * The limits the pool enforces on an executor from outside: the invocation timeout (and whom it
 * blames), the RSS cap, the scratch folder's size in measured mode (scratch.ts), what a death is
 * blamed on, and how much of a process's output is logged.
 */
import fs from "node:fs";
import type { PoolCore } from "./core.ts";
import {
  type Batch,
  type Call,
  type Child,
  type ExecutorLogger,
  OOM_PATTERN,
  OUTPUT_LINES_PER_WINDOW,
  OUTPUT_WINDOW_MS,
  type Reason,
  SHED_GRACE_MS,
  STARTUP_TIMEOUT_MS,
} from "./model.ts";

/**
 * The call a timeout of `batch`'s running `call` is blamed on: each source runs in its own realm, so
 * it is that call once the realm read the batch. Before that nothing of the batch ran, and its calls
 * go to the source's next realm.
 */
export function timeoutCulprit(batch: Batch, call: Call): number | undefined {
  return batch.received ? call.q : undefined;
}

/** Why a process died, when nobody killed it on purpose: an OOM on stderr, else its exit. */
export function deathReason(
  child: Child,
  code: number | null,
  signal: NodeJS.Signals | null,
  memoryMb: number,
): Reason {
  if (child.killReason) return child.killReason;
  if (OOM_PATTERN.test(child.stderrTail)) {
    return {
      code: "out_of_memory",
      message: `The executor ran out of memory (heap limit ${memoryMb} MB)`,
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

/** Logs a process's output, cut to 2,000 characters a chunk and OUTPUT_LINES_PER_WINDOW chunks a window. */
export function logOutput(
  child: Child,
  stream: "stdout" | "stderr",
  chunk: Buffer,
  logger: ExecutorLogger | undefined,
): void {
  const text = chunk.toString("utf8");
  if (stream === "stderr") child.stderrTail = (child.stderrTail + text).slice(-8192);
  const out = child.output;
  const now = Date.now();
  if (now - out.windowStart >= OUTPUT_WINDOW_MS) {
    if (out.dropped > 0)
      logger?.warn(
        { ownerId: child.owner.id, pid: child.pid, dropped: out.dropped },
        "executor output dropped",
      );
    out.windowStart = now;
    out.count = 0;
    out.dropped = 0;
  }
  if (out.count++ < OUTPUT_LINES_PER_WINDOW) {
    logger?.info(
      { ownerId: child.owner.id, pid: child.pid, stream, output: text.slice(0, 2000) },
      "executor output",
    );
  } else out.dropped++;
}

/** What a realm (a worker thread with the realm code loaded) adds to its process's RSS, with room. */
const REALM_RSS_MB = 8;

/**
 * The RSS cap of an executor process: the heap cap misses Buffers, hence twice the heap plus 128 MiB,
 * plus the base cost of each live realm.
 */
export function rssLimitBytes(memoryMb: number, realms: number): number {
  return (memoryMb * 2 + 128 + REALM_RSS_MB * realms) * 1024 * 1024;
}

/**
 * Resident set size of a process in bytes and whether it is stopped by a signal (state T: SIGSTOP,
 * SIGTSTP, SIGTTIN, SIGTTOU; not `t`, an operator's strace or debugger), or undefined when it cannot be
 * read (it is gone).
 */
export function processStatus(pid: number): { rss: number; stopped: boolean } | undefined {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    return {
      rss: Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024,
      stopped: /^State:\s+T/m.test(status),
    };
  } catch {
    return undefined;
  }
}

/** The limits the pool enforces with timers and measurements, per batch and per process. */
export class Limits {
  private readonly core: PoolCore;

  constructor(core: PoolCore) {
    this.core = core;
  }

  /** (Re)starts the kill timer of the batch's running call. */
  arm(batch: Batch): void {
    clearTimeout(batch.timer);
    const call = batch.calls[batch.next];
    const child = batch.child;
    if (!call || !child) return;
    const limit = call.req.timeoutMs > 0 ? call.req.timeoutMs : this.core.settings.defaultTimeoutMs;
    // A call is timed from when its realm began the batch; until then (a new realm starting up on a
    // busy machine) it gets the startup allowance on top.
    const allowance = batch.received ? 0 : STARTUP_TIMEOUT_MS;
    const wait = Math.max(0, batch.started + limit + allowance - Date.now());
    batch.timer = setTimeout(() => {
      // Only the source's realm stops: the owner's other sources keep running.
      const sid = batch.source.sourceId;
      this.core.send(child, { t: "stop", sid });
      this.core.realmGone(child, sid, {
        code: "timeout",
        message: `The invocation did not finish within ${limit} ms`,
        q: timeoutCulprit(batch, call),
      });
    }, wait);
  }

  /**
   * Measured mode (after each batch and every WATCH_INTERVAL_MS): an owner whose scratch folder is over
   * the limit has its process stopped and the folder emptied. The running invocation, if one, fails
   * with `scratch_full`; after a batch, the source whose batch just ended is told on `$errors`.
   */
  measureScratch(child: Child, sourceId?: string): void {
    const scratch = child.scratch;
    if (!scratch || scratch.measuring) return;
    scratch.measuring = true;
    void this.core.scratch
      .usedBytes(scratch.dir)
      .then((used) => {
        if (used <= this.core.scratch.limitBytes || child.gone || child.killReason) return;
        scratch.over = true;
        const mb = (n: number) => Math.round((n / 1048576) * 10) / 10;
        const message = `The owner's scratch folder held ${mb(used)} MB (limit ${mb(this.core.scratch.limitBytes)} MB): the executor was stopped and the folder emptied`;
        const running = [...child.batches.values()].some((b) => b.received && b.next < b.calls.length);
        if (sourceId && !running) this.core.reportLate(child, sourceId, 0, { code: "scratch_full", message });
        this.core.kill(child, { code: "scratch_full", message, blameSole: true });
      })
      .finally(() => {
        scratch.measuring = false;
      });
  }

  /**
   * The RSS cap (the heap cap misses Buffers), checked every WATCH_INTERVAL_MS: over it, the process is
   * asked to stop its biggest realm, and killed if that did not help within SHED_GRACE_MS. A process
   * found stopped by a signal is killed at once.
   */
  checkMemory(child: Child, pid: number, now: number): void {
    const status = processStatus(pid);
    // A stopped process (a component may send SIGSTOP to its own) answers nothing, not even the stop of
    // a timed-out realm, so its owner's calls would wait forever: it is replaced like one that died.
    if (status?.stopped) {
      const message = "The executor process was stopped by a signal (SIGSTOP or the like) and was replaced";
      this.core.kill(child, { code: "executor_crash", message, blameSole: true });
      return;
    }
    // Live realms: one per source with a db copy, one per inspection, and the spare.
    const rssLimit = rssLimitBytes(
      this.core.settings.memoryMb,
      child.dbVersions.size + child.inspections.size + 1,
    );
    const rss = status?.rss;
    if (rss === undefined || rss <= rssLimit) {
      child.shedAt = undefined;
      return;
    }
    const message = `The executor used ${Math.round(rss / 1048576)} MB of memory (limit ${Math.round(rssLimit / 1048576)} MB)`;
    if (child.shedAt === undefined) {
      // First the source realm holding the most goes; only if that does not help, the process.
      child.shedAt = now;
      this.core.send(child, { t: "shed", message });
    } else if (now - child.shedAt >= SHED_GRACE_MS) {
      this.core.kill(child, { code: "out_of_memory", message, blameSole: true });
    }
  }
}
