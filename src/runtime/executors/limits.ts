/**
 * The limits the pool enforces on an executor from outside: the invocation timeout (and whom it
 * blames), the RSS cap, what a death is blamed on, and how much of a process's output is logged.
 */
import fs from "node:fs";
import {
  type Batch,
  type Call,
  type Child,
  type ExecutorLogger,
  OOM_PATTERN,
  OUTPUT_LINES_PER_WINDOW,
  OUTPUT_WINDOW_MS,
  type Reason,
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

/** Resident set size of a process in bytes, or undefined when it cannot be read (it is gone). */
export function rssBytes(pid: number): number | undefined {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
  } catch {
    return undefined;
  }
}
