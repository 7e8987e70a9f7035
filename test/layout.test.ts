/**
 * scripts/check-layout.ts, the layout rules `npm run lint` checks: this checkout keeps them, and a made-up
 * tree that breaks each of them is refused with a line naming the file and the rule.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const script = fileURLToPath(new URL("../scripts/check-layout.ts", import.meta.url));

function checkLayout(root?: string): { status: number | null; out: string; err: string } {
  const run = spawnSync(process.execPath, [script, ...(root ? [root] : [])], { encoding: "utf8" });
  return { status: run.status, out: run.stdout, err: run.stderr };
}

function write(root: string, file: string, text: string): void {
  mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
  writeFileSync(path.join(root, file), text);
}

test("this checkout's src/ keeps its layout", () => {
  const { status, out, err } = checkLayout();
  assert.equal(err, "");
  assert.equal(status, 0);
  assert.match(out, /keep their layout/);
});

test("oversized files and classes, upward imports, crossed domain arrows and cycles are refused", (t) => {
  const root = mkdtempSync(path.join(os.tmpdir(), "fount-layout-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  write(root, "src/clock.ts", "export const x = 1;\n".repeat(501));
  // Braces in strings, comments and templates do not end the class: it spans all 403 lines.
  const body = Array.from({ length: 400 }, (_, i) => `  m${i}() { return "}" + \`}\${"{"}\`; } // }`);
  write(root, "src/domain/accounts/big.ts", `export class Big {\n${body.join("\n")}\n  /* } */\n}\n`);
  write(root, "src/domain/accounts/small.ts", 'export class Small {\n  s = "}}}}";\n}\n');
  write(root, "src/http/route.ts", "export const route = 1;\n");
  write(
    root,
    "src/domain/events/up.ts",
    'import { route } from "../../http/route.ts";\nexport const y = route;\n',
  );
  // The domain is written against the storage port: that import up is allowed.
  write(root, "src/storage/port.ts", "export interface Storage {}\n");
  write(
    root,
    "src/domain/events/store.ts",
    'import type { Storage } from "../../storage/port.ts";\nexport type S = Storage;\n',
  );
  write(root, "src/domain/sources/run.ts", "export const run = 1;\n");
  write(
    root,
    "src/domain/cluster/lease.ts",
    'import { run } from "../sources/run.ts";\nexport const z = run;\n',
  );
  // A cycle made of type-only imports is a cycle too.
  write(root, "src/domain/events/a.ts", 'import type { B } from "./b.ts";\nexport type A = B | 1;\n');
  write(root, "src/domain/events/b.ts", 'import type { A } from "./a.ts";\nexport type B = A | 2;\n');
  write(root, "src/stray.ts", "export {};\n");

  const { status, err } = checkLayout(root);
  assert.equal(status, 1);
  const lines = err.split("\n");
  const has = (pattern: RegExp) =>
    assert.ok(
      lines.some((l) => pattern.test(l)),
      `${pattern} in:\n${err}`,
    );
  has(/^src\/clock\.ts: 501 lines, over the 500 a file may have/);
  has(/^src\/domain\/accounts\/big\.ts:1: class Big spans 403 lines, over the 400 a class may/);
  has(/^src\/domain\/events\/up\.ts:1: its import of src\/http\/route\.ts runs upward: layer 2 \(domain\)/);
  has(
    /^src\/domain\/cluster\/lease\.ts:1: its import of src\/domain\/sources\/run\.ts is not for src\/domain\/cluster\//,
  );
  has(/^import cycle: src\/domain\/events\/a\.ts → src\/domain\/events\/b\.ts → src\/domain\/events\/a\.ts$/);
  has(/^src\/stray\.ts: in no layer/);
  has(/^check-layout: \d+ problem\(s\)/);
  assert.ok(!/small\.ts|store\.ts/.test(err), `no problem with small.ts or store.ts:\n${err}`);
});
