/**
 * The test process's heap after a full collection, in MiB: what the in-process server keeps, for the
 * memory tests of its caches (cache-memory, component-cache-memory).
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

let gc: (() => void) | undefined;

export function heapMib(): number {
  if (!gc) {
    setFlagsFromString("--expose-gc");
    gc = runInNewContext("gc") as () => void;
  }
  gc();
  return process.memoryUsage().heapUsed / (1024 * 1024);
}
