/**
 * Starting executor processes: the fork with its permission flags, heap cap, empty environment and
 * uid, its lower CPU priority, and the `node --check` run that locates a syntax error.
 */
import { type ChildProcess, fork, spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";
import type { ChildInit } from "../child/protocol.ts";
import type { BuiltComponent } from "../types.ts";
import { EXECUTOR_NICE } from "./model.ts";

/** What one executor process is started with. */
export interface ExecutorSpawn {
  /** Real path of child/runner.ts. */
  runner: string;
  /** The owner's scratch folder: the process's cwd and its only writable place. */
  scratch: string;
  /** Folders of the owner's components the process may read. */
  allowed: Iterable<string>;
  memoryMb: number;
  uid: number | undefined;
  extraCaCertsFile: string | undefined;
  init: ChildInit;
}

/** Forks an executor process (throws when it cannot) and lowers its CPU priority. */
export function forkExecutor(spec: ExecutorSpawn): ChildProcess {
  const { runner, scratch, uid } = spec;
  const execArgv = [
    "--permission",
    `--allow-fs-read=${path.dirname(runner)}`,
    ...[...spec.allowed].map((d) => `--allow-fs-read=${d}`),
    `--allow-fs-read=${scratch}`,
    `--allow-fs-write=${scratch}`,
    `--max-old-space-size=${spec.memoryMb}`,
  ];
  const ids = uid === undefined ? {} : { uid, gid: uid };
  const proc = fork(runner, [JSON.stringify(spec.init)], {
    cwd: scratch,
    env: spec.extraCaCertsFile ? { NODE_EXTRA_CA_CERTS: spec.extraCaCertsFile } : {},
    execPath: process.execPath,
    execArgv,
    serialization: "json",
    stdio: ["ignore", "pipe", "pipe", "ipc"],
    ...ids,
  });
  if (proc.pid !== undefined) {
    try {
      os.setPriority(proc.pid, Math.min(19, os.getPriority() + EXECUTOR_NICE));
    } catch {
      // The process may already be gone; its close event reports that.
    }
  }
  return proc;
}

/** Where `node --check`, run under the same sandbox, places a syntax error of the component. */
export function syntaxLocation(
  component: BuiltComponent,
  uid: number | undefined,
): Promise<{ line: number; column?: number } | undefined> {
  return new Promise((resolve) => {
    const file = component.entryFile;
    const args = ["--permission", ...component.readDirs.map((d) => `--allow-fs-read=${d}`), "--check", file];
    const ids = uid === undefined ? {} : { uid, gid: uid };
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
