/**
 * How `fount` starts: under an older Node (the system's, after `npm link`) `--version`, `--help` and the
 * client commands run in that one process from the plain-JavaScript bundle, and the admin commands,
 * which open the store with node:sqlite, hand over to the checkout's Node.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { freshBundle } from "../../bin/cli-bundle.mjs";
import { olderNode, runNode } from "./run.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const older = olderNode();
/** Preloaded to make any second process an error: what runs must run in the first. */
let noChildren = "";

before(() => {
  // `npm ci` builds the bundle; after an edit of the CLI's sources it is stale until built again.
  if (freshBundle() === undefined)
    execFileSync(process.execPath, [path.join(root, "scripts", "build-cli.ts")], { stdio: "ignore" });
  const dir = mkdtempSync(path.join(os.tmpdir(), "fount-start-"));
  const file = path.join(dir, "no-children.mjs");
  writeFileSync(
    file,
    `import cp from "node:child_process";
import { syncBuiltinESMExports } from "node:module";
for (const name of ["spawn", "execFile", "fork", "exec"]) cp[name] = () => { throw new Error("started a second process"); };
syncBuiltinESMExports();
`,
  );
  noChildren = pathToFileURL(file).href;
});

const pkg = JSON.parse(
  execFileSync(process.execPath, ["-p", "JSON.stringify(require('./package.json'))"], {
    cwd: root,
    encoding: "utf8",
  }),
);

test("--version, --help and help <command> run in one process on an older Node", {
  skip: !older,
}, async () => {
  const version = await runNode(older!, ["--import", noChildren, "bin/fount.mjs", "--version"]);
  assert.deepEqual([version.code, version.stdout, version.stderr], [0, `fount ${pkg.version}\n`, ""]);
  const help = await runNode(older!, ["--import", noChildren, "bin/fount.mjs", "--help"]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^Usage: fount <command>/m);
  assert.match(help.stdout, /^ {2}listen +Receive your sources' events/m);
  const one = await runNode(older!, ["--import", noChildren, "bin/fount.mjs", "help", "delete"]);
  assert.equal(one.code, 0, one.stderr);
  assert.match(one.stdout, /^Usage: fount delete <dc_…\|name> \[--yes\]$/m);
  // A client command gets as far as the network in the same process.
  const whoami = await runNode(older!, ["--import", noChildren, "bin/fount.mjs", "whoami"], {
    FOUNT_URL: "http://127.0.0.1:9",
    FOUNT_API_KEY: "fnt_x",
  });
  assert.equal(whoami.code, 1);
  assert.match(whoami.stderr, /^fount: Cannot reach http:\/\/127\.0\.0\.1:9: .+ \(network_error\)$/m);
});

test("an admin command on an older Node hands over to the checkout's Node", { skip: !older }, async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-start-admin-"));
  const res = await runNode(older!, ["bin/fount.mjs", "admin", "show-user", "nobody"], {
    FOUNT_DATA_DIR: dataDir,
  });
  assert.equal(res.code, 1);
  // Said by the admin command itself, which only a Node with node:sqlite and type stripping runs.
  assert.match(res.stderr, /^fount: No Fount store at .*fount\.db: set FOUNT_DATA_DIR/m);
  // Refused in one process, it would not get there.
  const alone = await runNode(
    older!,
    ["--import", noChildren, "bin/fount.mjs", "admin", "show-user", "nobody"],
    {
      FOUNT_DATA_DIR: dataDir,
    },
  );
  assert.equal(alone.code, 1);
  assert.match(alone.stderr, /started a second process/);
});
