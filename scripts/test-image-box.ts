/**
 * For `npm run test:image` (scripts/test-image.ts): commands run with their output in log files,
 * podman on the test's own storage, and a "box", a container of the built image whose commands run the
 * way a runtime would run them (scripts/test-image-run.sh: namespaces, read-only root, secrets, volume,
 * capabilities), since `podman run` cannot here.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createWriteStream, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const repo = fileURLToPath(new URL("../", import.meta.url));
export const cache = path.join(repo, ".cache", "image-test");
export const logs = path.join(cache, "logs");
export const image = "localhost/fount:test-image";

// vfs: the storage driver that works in this sandbox. The run root must be short (podman's limit).
const storage = [
  "--root",
  path.join(cache, "storage"),
  "--runroot",
  `/tmp/fount-img-${createHash("sha256").update(cache).digest("hex").slice(0, 8)}`,
  "--storage-driver",
  "vfs",
];

/** Runs a command; its output goes to `log` (appended), and a failure names that log. */
export function run(cmd: string, args: string[], log: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const out = createWriteStream(log, { flags: "a" });
    out.write(`\n$ ${cmd} ${args.join(" ")}\n`);
    const child = spawn(cmd, args, { cwd: repo, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString("utf8");
      out.write(d);
    });
    child.stderr.pipe(out, { end: false });
    child.on("error", reject);
    child.on("close", (code) => {
      out.end();
      if (code === 0) resolve(stdout.trim());
      else reject(new Error(`${cmd} ${args.slice(0, 3).join(" ")} … exited ${code}; see ${log}`));
    });
  });
}

export function podman(args: string[], log = path.join(logs, "podman.log")): Promise<string> {
  return run("podman", [...storage, ...args], log);
}

export function ok(line: string): void {
  process.stdout.write(`✔ ${line}\n`);
}

/** The host folders a box mounts: the data volume and the secrets. */
export interface BoxDirs {
  data: string;
  secrets: string;
}

/** A container of the image, mounted: its root filesystem, and what the image says to run. */
export interface Box {
  name: string;
  rootfs: string;
  env: string[];
  workdir: string;
  command: string[];
  healthcheck: string[];
}

/** Creates (never starts) and mounts a container of the image, after checking the image's settings. */
export async function makeBox(name: string): Promise<Box> {
  const inspect = JSON.parse(await podman(["image", "inspect", image]))[0];
  const config = inspect.Config;
  const health: string[] = inspect.Healthcheck?.Test ?? [];
  assert.equal(health[0], "CMD", "the image has a HEALTHCHECK (built with --format docker)");
  assert.equal(config.User, "root");
  assert.ok(config.Volumes?.["/var/lib/fount"], "/var/lib/fount is a volume");
  assert.ok(config.ExposedPorts?.["8787/tcp"], "port 8787 (the API) is exposed");
  assert.ok(config.ExposedPorts?.["8788/tcp"], "port 8788 (source endpoints) is exposed");
  ok(
    `image ${image}: user root, volume /var/lib/fount, ports 8787 and 8788, HEALTHCHECK ${health.slice(1).join(" ")}`,
  );
  await podman(["create", "--name", name, image]);
  return {
    name,
    rootfs: await podman(["mount", name]),
    env: config.Env,
    workdir: config.WorkingDir || "/",
    command: [...(config.Entrypoint ?? []), ...(config.Cmd ?? [])],
    healthcheck: health.slice(1),
  };
}

export async function removeBox(box: Box | undefined, name: string): Promise<void> {
  if (box) await podman(["umount", name]).catch(() => {});
  await podman(["rm", "--force", name]).catch(() => {});
}

/** A command running in a box as its PID 1. */
export interface BoxProcess {
  child: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  /** The host pid of the box's PID 1 (the child of `unshare`). */
  pid(): number;
}

/**
 * Starts `command` in the box as its PID 1 (scripts/test-image-run.sh), with the image's environment and
 * `env`, the capabilities `caps` (names, lower case) and no others.
 */
export function startInBox(
  box: Box,
  dirs: BoxDirs,
  caps: string[],
  env: Record<string, string>,
  command: string[],
  log: string,
): BoxProcess {
  const child = spawn(
    "unshare",
    [
      // --kill-child: should this test die, the box's PID 1 (and with it every process in it) dies too.
      ...["--mount", "--pid", "--fork", "--kill-child=SIGKILL", "--propagation", "private"],
      ...["/bin/sh", path.join(repo, "scripts/test-image-run.sh"), box.rootfs, dirs.data, dirs.secrets],
      `-all,${caps.map((c) => `+${c}`).join(",")}`,
      ...["/usr/bin/env", "-i", ...boxEnv(box, env)],
      ...["/bin/sh", "-c", 'cd "$0" && exec "$@"', box.workdir, ...command],
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let text = "";
  const out = createWriteStream(log, { flags: "a" });
  for (const stream of [child.stdout, child.stderr]) {
    stream.on("data", (d: Buffer) => {
      text += d.toString("utf8");
      out.write(d);
    });
  }
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  return {
    child,
    output: () => text,
    exited,
    pid: () => childrenOf(child.pid!)[0]!,
  };
}

/** Runs a command beside a box's PID 1: in its namespaces, chrooted, with the image's environment and `env`. */
export function execInBox(
  box: Box,
  pid: number,
  env: Record<string, string>,
  command: string[],
): Promise<string> {
  return run(
    "nsenter",
    [
      ...["--target", String(pid), "--mount", "--pid", "--", "chroot", box.rootfs],
      ...["/usr/bin/env", "-i", ...boxEnv(box, env), ...command],
    ],
    path.join(logs, "exec.log"),
  );
}

function boxEnv(box: Box, env: Record<string, string>): string[] {
  return [...box.env, ...Object.entries(env).map(([k, v]) => `${k}=${v}`)];
}

/** Host pids of a process's children. */
export function childrenOf(pid: number): number[] {
  const text = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim();
  return text ? text.split(" ").map(Number) : [];
}

/** A process's nice value and real uid, from /proc. */
export function niceAndUid(pid: number): { nice: number; uid: number } {
  // Fields after the command name, which is in parentheses and may hold spaces: nice is the 19th field.
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const uid = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return { nice: Number(fields[16]), uid: Number(uid) };
}

/** Polls `check` until it returns a value, the process `ended` first, or `timeoutMs` passes. */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined,
  timeoutMs: number,
  ended?: Promise<unknown>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  void ended?.then(() => {
    gone = true;
  });
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (gone) throw new Error(`${what}: the process ended first`);
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
