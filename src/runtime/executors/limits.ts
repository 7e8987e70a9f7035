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
  inCode,
  OOM_PATTERN,
  OUTPUT_LINES_PER_WINDOW,
  OUTPUT_WINDOW_MS,
  type Reason,
} from "./model.ts";

/**
 * The call a timeout of `batch`'s running `call` is blamed on. A call that is not in component code
 * yet (its batch unread, or its module still loading) waits for another one: blame the longest-running
 * call that is. With none, the loading module is stuck.
 */
export function timeoutCulprit(batch: Batch, call: Call, child: Child): number | undefined {
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
  return blamed;
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

/** The RSS cap of an executor process: the heap cap misses Buffers, hence twice the heap plus 128 MiB. */
export function rssLimitBytes(memoryMb: number): number {
  return (memoryMb * 2 + 128) * 1024 * 1024;
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
