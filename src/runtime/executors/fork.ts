/**
 * Starting executor processes: the fork with its permission flags, heap cap, empty environment and
 * uid, its lower CPU priority, and the `node --check` run that locates a syntax error.
 */
import { type ChildProcess, fork, spawn } from "node:child_process";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import type { ChildInit } from "../child/protocol.ts";
import type { BuiltComponent } from "../types.ts";
import { EXECUTOR_NICE } from "./model.ts";

const childDir = fileURLToPath(new URL("../child/", import.meta.url));

/**
 * Bundles the executor's code (child/runner/runner.ts, child/realm/realm.ts and what they import) into plain
 * JavaScript in `outDir`: `runner.mjs` and `realm.mjs`. Every realm is a worker thread, and a worker
 * that loads TypeScript starts Node's type stripper anew, which measured about 250 ms and 3 MB more
 * per worker than loading JavaScript (docs/architecture.md). Returns the real path of runner.mjs.
 */
export async function bundleExecutorCode(outDir: string): Promise<string> {
  bundled ??= buildExecutorCode();
  const files = await bundled;
  await fsp.mkdir(outDir, { recursive: true, mode: 0o755 });
  for (const file of files) await fsp.writeFile(path.join(outDir, file.name), file.text, { mode: 0o644 });
  return fsp.realpath(path.join(outDir, "runner.mjs"));
}

/** The bundle, built once per server process and written into each pool's folder. */
let bundled: Promise<Array<{ name: string; text: string }>> | undefined;

async function buildExecutorCode(): Promise<Array<{ name: string; text: string }>> {
  try {
    const result = await esbuild.build({
      entryPoints: {
        runner: path.join(childDir, "runner", "runner.ts"),
        realm: path.join(childDir, "realm", "realm.ts"),
      },
      outdir: "/",
      outExtension: { ".js": ".mjs" },
      bundle: true,
      format: "esm",
      platform: "node",
      target: "node24",
      charset: "utf8",
      tsconfigRaw: {},
      write: false,
      logLevel: "silent",
    });
    return result.outputFiles.map((f) => ({ name: path.basename(f.path), text: f.text }));
  } catch (err) {
    bundled = undefined;
    throw err;
  }
}

/** What one executor process is started with. */
export interface ExecutorSpawn {
  /** Real path of the bundled runner (`bundleExecutorCode`); realm.mjs sits beside it. */
  runner: string;
  /** The owner's scratch folder: the process's cwd and its only writable place. */
  scratch: string;
  /** Folders of the owner's components the process may read. */
  allowed: Iterable<string>;
  memoryMb: number;
  /** Extra V8 flags, checked against this Node already (v8-flags.ts). */
  v8Flags: readonly string[];
  /** `MALLOC_ARENA_MAX` of the process; 0: glibc's default. */
  mallocArenaMax: number;
  uid: number | undefined;
  /** A spare (spares.ts): it reads its owner's folders through links, by their linked paths. */
  preserveSymlinks: boolean;
  extraCaCertsFile: string | undefined;
  init: ChildInit;
}

/** Forks an executor process (throws when it cannot) and lowers its CPU priority. */
export function forkExecutor(spec: ExecutorSpawn): ChildProcess {
  const { runner, scratch, uid } = spec;
  const execArgv = [
    "--permission",
    // The runner starts a worker thread per source (its realm); realm.ts keeps Worker from components.
    "--allow-worker",
    // Node warns on stderr once per worker that --allow-worker weakens the permission model.
    "--disable-warning=PERM0006",
    `--allow-fs-read=${path.dirname(runner)}`,
    ...[...spec.allowed].map((d) => `--allow-fs-read=${d}`),
    `--allow-fs-read=${scratch}`,
    `--allow-fs-write=${scratch}`,
    `--max-old-space-size=${spec.memoryMb}`,
    ...(spec.preserveSymlinks ? ["--preserve-symlinks"] : []),
    ...spec.v8Flags,
  ];
  const ids = uid === undefined ? {} : { uid, gid: uid };
  const proc = fork(runner, [JSON.stringify(spec.init)], {
    cwd: scratch,
    env: {
      ...(spec.extraCaCertsFile ? { NODE_EXTRA_CA_CERTS: spec.extraCaCertsFile } : {}),
      // glibc reads it at the process's start; realms get an empty env of their own (realms.ts).
      ...(spec.mallocArenaMax > 0 ? { MALLOC_ARENA_MAX: String(spec.mallocArenaMax) } : {}),
    },
    execPath: process.execPath,
    execArgv,
    serialization: "json",
    stdio: ["ignore", "pipe", "pipe", "ipc"],
    ...ids,
  });
  return proc;
}

/**
 * Lowers an executor's priority once it is `ready`: no component code runs before that, and node's own
 * start at full priority is what keeps a start on a busy host within STARTUP_TIMEOUT_MS.
 */
export function reniceExecutor(pid: number): void {
  try {
    os.setPriority(pid, Math.min(19, os.getPriority() + EXECUTOR_NICE));
  } catch {
    // The process may already be gone; its close event reports that.
  }
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
