/**
 * What the CLI does on a terminal and off it: a spinner and colour on a TTY (run under `script`, which
 * gives the process a pseudo-terminal), one plain line and no colour in a pipe, NO_COLOR and
 * FORCE_COLOR respected; and the entry started by a Node too old for the CLI hands over to the
 * checkout's own.
 */
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { startServer, type TestServer } from "../helpers.ts";
import { fount } from "./run.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const nodeBin = path.join(root, "node_modules", ".bin", "node");
const entry = path.join(root, "bin", "fount.mjs");
const esc = "\u001b[";
/** An SGR (colour or weight) escape, as opposed to the spinner's line clearing. */
const sgr = new RegExp(`${esc.replace("[", "\\[")}\\d+(;\\d+)*m`);

let server: TestServer;
let env: Record<string, string>;
let dir: string;
let file: string;

function has(command: string): boolean {
  try {
    execFileSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

before(async () => {
  server = await startServer();
  const user = await server.createUser("cli-terminal");
  env = { FOUNT_URL: server.url, FOUNT_API_KEY: user.key };
  dir = mkdtempSync(path.join(os.tmpdir(), "fount-cli-tty-"));
  file = path.join(dir, "hello.mjs");
  writeFileSync(
    file,
    `export default { name: "Hello", version: "0.0.1", async run() { this.$emit({ hi: 1 }); } };\n`,
  );
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `fount <args>` on a pseudo-terminal: stdout and stderr come back merged, as a terminal shows them. */
function onTerminal(args: string[], extraEnv: Record<string, string> = {}): Promise<string> {
  const line = [nodeBin, entry, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ");
  return new Promise((resolve, reject) => {
    execFile(
      "script",
      ["-q", "-e", "-c", line, "/dev/null"],
      {
        env: { PATH: process.env.PATH, HOME: os.tmpdir(), TERM: "xterm", ...env, ...extraEnv },
        timeout: 60_000,
      },
      (err, stdout) => (err ? reject(new Error(`${err.message}\n${stdout}`)) : resolve(stdout)),
    );
  });
}

test("off a terminal a deploy shows one plain progress line and no colour", async () => {
  const res = await fount(["deploy", file, "--name", "piped"], env, 60_000);
  assert.equal(res.code, 0, res.stderr);
  assert.equal(
    res.stderr,
    `Deploying ${file} (the server builds it and installs any packages it imports)…\n`,
    "one line, no spinner",
  );
  assert.ok(!res.stdout.includes(esc) && !res.stderr.includes(esc));
  const forced = await fount(["run", "piped"], { ...env, FORCE_COLOR: "1" });
  assert.match(forced.stdout, sgr, "FORCE_COLOR colours a pipe too");
});

test("on a terminal a deploy shows a spinner, and output is coloured unless NO_COLOR", {
  skip: !has("script") && "no `script` command for a pseudo-terminal",
}, async () => {
  const shown = await onTerminal(["deploy", file, "--name", "on-tty"]);
  const clear = `\r${esc}2K`;
  assert.ok(
    shown.includes(`${clear}${esc}36m⠋${esc}39m Deploying ${file}`),
    `a spinner frame: ${JSON.stringify(shown)}`,
  );
  assert.ok(shown.includes(`${clear}Deployed on-tty`), "the spinner is erased before the result");
  const run = await onTerminal(["run", "on-tty"]);
  assert.match(run, sgr);
  const plain = await onTerminal(["run", "on-tty"], { NO_COLOR: "1" });
  assert.doesNotMatch(plain, sgr, "NO_COLOR: no colour even on a terminal");
  assert.match(plain, /Ran in \d+ ms: 1 event emitted/);
});

/** A Node older than 24 on the PATH outside the checkout (a system Node), if there is one. */
function oldNode(): string | undefined {
  for (const dirOnPath of (process.env.PATH ?? "").split(path.delimiter)) {
    if (dirOnPath.includes("node_modules")) continue;
    const candidate = path.join(dirOnPath, "node");
    try {
      const version = execFileSync(candidate, ["--version"], { encoding: "utf8" }).trim();
      if (Number(version.slice(1).split(".")[0]) < 24) return candidate;
    } catch {
      // Not there.
    }
  }
  return undefined;
}

const old = oldNode();

test("started by an older Node (npm link with a system Node), the entry hands over to the checkout's", {
  skip: !old && "no Node older than 24 on this PATH",
}, async () => {
  const run = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(
        old!,
        [entry, ...args],
        { env: { PATH: process.env.PATH, HOME: os.tmpdir(), ...env } },
        (err, stdout, stderr) => resolve({ code: err ? Number(err.code) : 0, stdout, stderr }),
      ),
    );
  const version = await run(["--version"]);
  assert.equal(version.code, 0, version.stderr);
  assert.match(version.stdout, /^fount \d+\.\d+\.\d+\n$/);
  const listed = await run(["list", "sources", "--json"]);
  assert.equal(listed.code, 0, listed.stderr);
  assert.ok(Array.isArray(JSON.parse(listed.stdout)));
  const usage = await run(["nope"]);
  assert.equal(usage.code, 2, "the exit code comes through");
});
