/**
 * `npm run test:image`: builds the official image from the Containerfile and runs it here, printing
 * what it checked (docs/deploy.md, "Testing the image"). Needs root, podman and debootstrap (installed
 * from Debian's packages when missing), and the network (Debian's mirror, the npm registry).
 *
 * No base image can be pulled here and `podman run` is refused (crun cannot set rlimits in this
 * sandbox), so: the Containerfile's base (`debian:<suite>-slim`) is made with debootstrap and imported
 * under that name, cached in `.cache/image-test/` (git-ignored); the image is built with `podman build
 * --isolation chroot` on the vfs storage driver; and its entry point runs in a chroot of a container
 * made from it (scripts/test-image-box.ts, scripts/test-image-run.sh), given what compose.yaml and the
 * Kubernetes example give a container. The checks are in scripts/test-image-checks.ts.
 *
 * Settings (environment): FOUNT_IMAGE_TEST_MIRROR (Debian mirror for debootstrap, default
 * http://deb.debian.org/debian), FOUNT_IMAGE_TEST_KEEP=1 (keep the built image), and
 * FOUNT_IMAGE_TEST_REUSE=1 (check the image a KEEP run left, without building it again).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { type Box, cache, image, logs, makeBox, ok, podman, removeBox, repo, run } from "./test-image-box.ts";
import { checkFirstStart, checkRefusals, checkRestart } from "./test-image-checks.ts";

const mirror = process.env.FOUNT_IMAGE_TEST_MIRROR ?? "http://deb.debian.org/debian";
const phases: string[] = [];

async function timed<T>(what: string, fn: () => Promise<T>): Promise<T> {
  const t = Date.now();
  const value = await fn();
  phases.push(`${what} ${((Date.now() - t) / 1000).toFixed(0)} s`);
  return value;
}

const exists = (args: string[]) =>
  podman(args).then(
    () => true,
    () => false,
  );

async function ensureTools(): Promise<void> {
  assert.equal(process.getuid?.(), 0, "test:image needs root (it mounts, chroots and builds with podman)");
  const missing = ["podman", "debootstrap"].filter(
    (tool) => !["/usr/bin", "/usr/sbin"].some((dir) => existsSync(path.join(dir, tool))),
  );
  if (missing.length === 0) return;
  process.stdout.write(`installing ${missing.join(", ")} from Debian's packages\n`);
  const log = path.join(logs, "apt.log");
  await run("apt-get", ["update"], log);
  await run("apt-get", ["install", "-y", "--no-install-recommends", ...missing], log);
}

/** The Containerfile's base image, made with debootstrap (cached) and imported under its name. */
async function ensureBase(): Promise<string> {
  const base = /^ARG BASE=(\S+)$/m.exec(readFileSync(path.join(repo, "Containerfile"), "utf8"))?.[1];
  assert.ok(base, "the Containerfile names its base in ARG BASE=");
  const suite = /^docker\.io\/library\/debian:([a-z]+)-slim$/.exec(base)?.[1];
  assert.ok(suite, `test:image makes Debian bases only, not ${base}`);
  if (await exists(["image", "exists", base])) {
    phases.push("base cached");
    return base;
  }
  const tarball = path.join(cache, `debian-${suite}-minbase.tar`);
  if (!existsSync(tarball)) {
    await timed(`debootstrap ${suite}`, async () => {
      const log = path.join(logs, "debootstrap.log");
      const target = path.join(cache, `rootfs-${suite}`);
      rmSync(target, { recursive: true, force: true });
      await run("debootstrap", ["--variant=minbase", suite, target, mirror], log);
      // As in the slim images: no apt lists (each build fetches them).
      rmSync(path.join(target, "var/lib/apt/lists"), { recursive: true, force: true });
      mkdirSync(path.join(target, "var/lib/apt/lists/partial"), { recursive: true });
      await run("tar", ["-C", target, "-cf", `${tarball}.part`, "."], log);
      await run("mv", [`${tarball}.part`, tarball], log);
      rmSync(target, { recursive: true, force: true });
    });
  }
  await timed(`import ${base}`, () => podman(["import", "--change", 'CMD ["bash"]', tarball, base]));
  return base;
}

async function build(base: string): Promise<void> {
  const log = path.join(logs, "build.log");
  writeFileSync(log, "");
  // Lets the build through a TLS-intercepting proxy whose CA this host trusts (a build secret).
  const caCerts = "/etc/ssl/certs/ca-certificates.crt";
  await timed("build", () =>
    podman(
      [
        ...["build", "--isolation", "chroot", "--format", "docker", "--pull=never"],
        // vfs copies the whole tree for each cached layer: one layer per stage keeps it to minutes.
        "--layers=false",
        ...(existsSync(caCerts) ? ["--secret", `id=ca-certs,src=${caCerts}`] : []),
        ...["-f", "Containerfile", "-t", image, "."],
      ],
      log,
    ),
  );
  ok(`built ${image} on ${base} (podman build --isolation chroot --format docker, vfs storage)`);
}

/** The capabilities compose.yaml and the Kubernetes example add (lower case, sorted). */
function capabilities(): { compose: string[]; kubernetes: string[] } {
  const read = (file: string, pattern: RegExp) => {
    const list = pattern.exec(readFileSync(path.join(repo, file), "utf8"))?.[1];
    assert.ok(list, `${file} lists the capabilities it adds`);
    return list
      .split(",")
      .map((c) => c.trim().toLowerCase())
      .sort();
  };
  const compose = read("deploy/compose/compose.yaml", /^\s*cap_add: \[([^\]]*)\]/m);
  const kubernetes = read("deploy/kubernetes/fount.yaml", /^\s*add: \[([^\]]*)\]/m);
  assert.deepEqual(
    kubernetes,
    compose.filter((c) => c !== "sys_nice"),
    "the Kubernetes example adds compose.yaml's capabilities but SYS_NICE (docs/deploy.md)",
  );
  return { compose, kubernetes };
}

/** `systemd-analyze verify` of the unit, pointed at this checkout (where systemd-analyze exists). */
async function verifyUnit(): Promise<void> {
  if (!existsSync("/usr/bin/systemd-analyze")) return;
  const dir = mkdtempSync(path.join(os.tmpdir(), "fount-unit-"));
  try {
    const unit = readFileSync(path.join(repo, "deploy/systemd/fount.service"), "utf8");
    writeFileSync(path.join(dir, "fount.service"), unit.replaceAll("/opt/fount/", repo));
    await run("systemd-analyze", ["verify", path.join(dir, "fount.service")], path.join(logs, "systemd.log"));
    ok("deploy/systemd/fount.service passes systemd-analyze verify");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const started = Date.now();
  mkdirSync(logs, { recursive: true });
  process.stdout.write(
    `test:image: build the Containerfile's image and run it (logs in ${path.relative(repo, logs)}/)\n`,
  );
  await ensureTools();
  const caps = capabilities();
  await verifyUnit();
  const base = await ensureBase();
  if (process.env.FOUNT_IMAGE_TEST_REUSE === "1" && (await exists(["image", "exists", image])))
    ok(`reusing ${image} (FOUNT_IMAGE_TEST_REUSE=1)`);
  else await build(base);

  const scratch = mkdtempSync(path.join(os.tmpdir(), "fount-image-test-"));
  const dirs = { data: path.join(scratch, "data"), secrets: path.join(scratch, "secrets") };
  mkdirSync(dirs.data, { mode: 0o755 });
  mkdirSync(dirs.secrets, { mode: 0o700 });
  writeFileSync(path.join(dirs.secrets, "fount_encryption_key"), `${randomBytes(32).toString("base64")}\n`);
  const name = `fount-image-test-${process.pid}`;
  let box: Box | undefined;
  try {
    box = await makeBox(name);
    const made = box;
    await timed("run", async () => {
      const key = await checkFirstStart(made, dirs, caps.compose);
      await checkRestart(made, dirs, caps.kubernetes, key);
      await checkRefusals(made, dirs, caps.kubernetes);
    });
  } finally {
    await removeBox(box, name);
    if (process.env.FOUNT_IMAGE_TEST_KEEP !== "1") await podman(["rmi", "--force", image]).catch(() => {});
    rmSync(scratch, { recursive: true, force: true });
  }
  process.stdout.write(
    `test:image passed in ${((Date.now() - started) / 1000).toFixed(0)} s (${phases.join(", ")})\n`,
  );
}

main().catch((err) => {
  process.stderr.write(`test:image failed: ${(err as Error).stack ?? err}\n`);
  process.exit(1);
});
