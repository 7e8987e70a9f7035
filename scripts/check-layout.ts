/**
 * The layout rules of `src/`, checked by `npm run lint` after `biome ci`: no file over 500 lines, no class
 * over 400, no import cycle (type-only imports included: biome's noImportCycles already refuses the
 * others), and every import pointing down the layers below, or, inside `src/domain/`, along the arrows
 * between its concern folders that src/domain/README.md draws (`domainImports`). docs/architecture.md,
 * *Layers*, tells why; this turns the style guide's rules into a check a reviewer need not do by hand.
 *
 * Files are parsed with the TypeScript compiler (the `typescript` devDependency: TypeScript 7 parses in
 * its native binary and hands the syntax tree over through `typescript/unstable/sync`), so strings,
 * comments and template literals cannot fool the import or class scan. Usage:
 * `node scripts/check-layout.ts [root]` (default: this checkout); one line per problem, and exit code 1.
 */
import { readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Node, SourceFile } from "typescript/unstable/ast";
import { SyntaxKind } from "typescript/unstable/ast";
import { API } from "typescript/unstable/sync";

/** A file past this many lines holds more than one concern (style guide: ~400 is the smell, 500 the bound). */
const maxFileLines = 500;
/** A class past this many lines does: compose it from smaller parts. */
const maxClassLines = 400;

/**
 * The layers of `src/`, lowest first: a file may import files of its own layer or of lower ones. An entry
 * ending in `/` is a folder, any other a file. A file in none of them is a problem: place it here.
 */
const layers: readonly { name: string; members: readonly string[] }[] = [
  {
    name: "kernel",
    members: [
      "src/clock.ts",
      "src/ids.ts",
      "src/errors.ts",
      "src/bounded-cache.ts",
      "src/file-lock.ts",
      "src/endpoint-origin.ts",
      "src/config.ts",
      "src/async-lock.ts",
      "src/pace.ts",
      "src/turns.ts",
      "src/non-public-ranges.ts",
      "src/crypto/",
      // The switch spans are made behind, for the domain, delivery and HTTP code; no SDK in it.
      "src/tracing.ts",
    ],
  },
  { name: "runtime", members: ["src/runtime/"] },
  { name: "domain", members: ["src/domain/"] },
  { name: "storage", members: ["src/storage/"] },
  { name: "delivery", members: ["src/delivery/", "src/metrics.ts"] },
  { name: "services", members: ["src/services.ts"] },
  { name: "http", members: ["src/http/"] },
  // logging.ts: how the server's log is written, which the composition root decides.
  { name: "composition", members: ["src/app.ts", "src/app/", "src/logging.ts"] },
  // tracing-sdk.ts: the OpenTelemetry SDK, which main.ts loads when traces are on.
  { name: "process", members: ["src/main.ts", "src/cli/", "src/tracing-sdk.ts"] },
];

/**
 * Imports up the layers that are part of the design: the domain is written against the storage port
 * (its operations, records and health), which the drivers under `storage/` implement.
 */
const ports: readonly { from: string; to: readonly string[]; why: string }[] = [
  {
    from: "src/domain/",
    to: ["src/storage/port.ts", "src/storage/health.ts"],
    why: "the storage port the domain is written against",
  },
];

/**
 * What each part of `src/domain/` may import besides its own folder, the base modules (the first layer)
 * and the storage port: the table of src/domain/README.md. `kernel` is `bus.ts` and `types.ts`, which every
 * concern shares; the arrows run from the source runner, which uses every other concern, down to the event
 * path and the accounts, which use none.
 */
const domainImports: Readonly<Record<string, readonly string[]>> = {
  kernel: ["src/domain/bus.ts", "src/domain/types.ts", "src/runtime/types.ts"],
  accounts: ["src/domain/types.ts"],
  components: ["src/domain/types.ts", "src/runtime/"],
  events: ["src/domain/types.ts", "src/domain/bus.ts", "src/runtime/types.ts"],
  cluster: ["src/domain/events/", "src/domain/types.ts", "src/domain/bus.ts"],
  sources: [
    "src/domain/events/",
    "src/domain/components/",
    "src/domain/accounts/",
    "src/domain/cluster/",
    "src/domain/types.ts",
    "src/domain/bus.ts",
    "src/runtime/",
  ],
};

/**
 * Files allowed past `maxFileLines`, or holding a class past `maxClassLines`, for now: each names who is
 * splitting it. An entry whose file keeps both bounds again (or is gone) is a problem too, so the list
 * only shrinks.
 */
const oversized: Readonly<Record<string, string>> = {};

/**
 * Imports that break the rules above for now, each with its reason; an entry no import needs any more is
 * a problem too. `from` and `to` are files. Empty: the two found when the check came (the registry's use
 * of storage/lock.ts, the egress rules' of delivery/address-guard.ts) moved their shared code down.
 */
const allowedImports: readonly { from: string; to: string; why: string }[] = [];

/**
 * One import of a file of `src/` by another: an import or re-export declaration, `import()`, or an
 * `import("…")` type. Type-only imports count as any other, for the layers as for cycles: they are how
 * one module is written against another, and the arrow a reader follows is the same.
 */
interface Import {
  from: string;
  to: string;
  line: number;
}

/** What the rules need of one file. */
interface Parsed {
  file: string;
  lines: number;
  classes: { name: string; line: number; lines: number }[];
  imports: Import[];
}

/** The files under `root/src`, as paths relative to `root` with forward slashes. */
function sourceFiles(root: string): string[] {
  return readdirSync(path.join(root, "src"), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts"))
    .map((f) => `src/${f.split(path.sep).join("/")}`)
    .sort();
}

function lineCount(text: string): number {
  if (text === "") return 0;
  let n = 0;
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) n++;
  return text.endsWith("\n") ? n : n + 1;
}

function parse(root: string, files: readonly string[]): Parsed[] {
  const absolute = files.map((f) => path.join(root, f));
  const api = new API({ cwd: root });
  try {
    const snapshot = api.updateSnapshot({ openFiles: absolute });
    return files.map((file, i) => {
      const name = absolute[i]!;
      const sf = snapshot.getDefaultProjectForFile(name)?.program.getSourceFile(name);
      if (!sf) throw new Error(`TypeScript did not parse ${file}`);
      return parsedFile(root, file, sf);
    });
  } finally {
    api.close();
  }
}

function parsedFile(root: string, file: string, sf: SourceFile): Parsed {
  const parsed: Parsed = { file, lines: lineCount(sf.text), classes: [], imports: [] };
  const lineOf = (pos: number) => sf.getLineAndCharacterOfPosition(pos).line + 1;
  const addImport = (specifier: Node | undefined, at: Node) => {
    if (specifier?.kind !== SyntaxKind.StringLiteral) return;
    const text = (specifier as unknown as { text: string }).text;
    if (!text.startsWith(".")) return;
    const target = path.relative(root, path.resolve(path.dirname(path.join(root, file)), text));
    const to = target.split(path.sep).join("/");
    if (!to.startsWith("src/") || !to.endsWith(".ts")) return;
    parsed.imports.push({ from: file, to, line: lineOf(at.getStart(sf)) });
  };
  const visit = (node: Node): void => {
    const n = node as unknown as Record<string, unknown> & Node;
    switch (node.kind) {
      case SyntaxKind.ImportDeclaration:
      case SyntaxKind.ExportDeclaration:
        addImport(n.moduleSpecifier as Node | undefined, node);
        return;
      case SyntaxKind.ImportType: {
        const argument = n.argument as Node & { literal?: Node };
        if (argument.kind === SyntaxKind.LiteralType) addImport(argument.literal, node);
        break;
      }
      case SyntaxKind.CallExpression: {
        const args = n.arguments as readonly Node[];
        if ((n.expression as Node).kind === SyntaxKind.ImportKeyword) addImport(args[0], node);
        break;
      }
      case SyntaxKind.ClassDeclaration:
      case SyntaxKind.ClassExpression: {
        const line = lineOf(node.getStart(sf));
        const id = n.name as { text?: string } | undefined;
        parsed.classes.push({ name: id?.text ?? "(anonymous)", line, lines: lineOf(node.end) - line + 1 });
        break;
      }
    }
    node.forEachChild(visit);
  };
  sf.forEachChild(visit);
  return parsed;
}

function isIn(file: string, member: string): boolean {
  return member.endsWith("/") ? file.startsWith(member) : file === member;
}

function layerOf(file: string): number {
  return layers.findIndex((l) => l.members.some((m) => isIn(file, m)));
}

/** The concern folder of a file of `src/domain/` (`kernel` for bus.ts and types.ts), else undefined. */
function concernOf(file: string): string | undefined {
  if (!file.startsWith("src/domain/")) return undefined;
  const rest = file.slice("src/domain/".length);
  return rest.includes("/") ? rest.slice(0, rest.indexOf("/")) : "kernel";
}

/** Why an import breaks the layers or the domain's own table; undefined when it does not. */
function ruleBroken(imp: Import): string | undefined {
  const from = layerOf(imp.from);
  const to = layerOf(imp.to);
  if (from === -1 || to === -1) return undefined;
  const port = ports.some((p) => isIn(imp.from, p.from) && p.to.includes(imp.to));
  if (port || to === 0) return undefined;
  if (to > from) {
    return `runs upward: layer ${from} (${layers[from]!.name}) may import only its own and lower layers, and this is layer ${to} (${layers[to]!.name})`;
  }
  const concern = concernOf(imp.from);
  if (concern === undefined || concern === concernOf(imp.to)) return undefined;
  const allowed = domainImports[concern];
  if (allowed === undefined)
    return `comes from src/domain/${concern}/, which is not in domainImports: add it there`;
  if (allowed.some((m) => isIn(imp.to, m))) return undefined;
  const who = concern === "kernel" ? "src/domain/bus.ts and types.ts" : `src/domain/${concern}/`;
  return `is not for ${who}, which may import only ${allowed.join(", ")}, its own files, the base modules and the storage port (src/domain/README.md)`;
}

/** The import cycles among `files` (Tarjan): each strongly connected set of files once, as one cycle through it. */
function cycles(files: readonly Parsed[]): string[][] {
  const edges = new Map<string, string[]>();
  for (const f of files) edges.set(f.file, [...new Set(f.imports.map((i) => i.to))].sort());
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const strongConnect = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!edges.has(w)) continue;
      if (!index.has(w)) {
        strongConnect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const set = new Set<string>();
    for (let w = stack.pop()!; ; w = stack.pop()!) {
      onStack.delete(w);
      set.add(w);
      if (w === v) break;
    }
    if (set.size > 1 || edges.get(v)!.includes(v)) found.push(cycleThrough(v, set, edges));
  };
  for (const f of files) if (!index.has(f.file)) strongConnect(f.file);
  return found;
}

/** A shortest path from `start` back to itself inside `set` (breadth first). */
function cycleThrough(
  start: string,
  set: ReadonlySet<string>,
  edges: ReadonlyMap<string, string[]>,
): string[] {
  const cameFrom = new Map<string, string>();
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    const v = queue[i]!;
    for (const w of edges.get(v) ?? []) {
      if (!set.has(w)) continue;
      if (w === start) {
        const path = [v];
        while (path[0] !== start) path.unshift(cameFrom.get(path[0]!)!);
        return [...path, start];
      }
      if (!cameFrom.has(w) && w !== start) {
        cameFrom.set(w, v);
        queue.push(w);
      }
    }
  }
  return [start, start];
}

/** Every breach of the layout rules under `root`, one line each, and how many files were checked. */
export function checkLayout(root: string): { files: number; problems: string[] } {
  const parsed = parse(root, sourceFiles(root));
  const problems: string[] = [];
  for (const f of parsed) {
    if (layerOf(f.file) === -1) {
      problems.push(`${f.file}: in no layer; place it in the layers of scripts/check-layout.ts`);
    }
    const big = f.classes.filter((c) => c.lines > maxClassLines);
    if (oversized[f.file] !== undefined) {
      if (f.lines <= maxFileLines && big.length === 0) {
        problems.push(
          `${f.file}: ${f.lines} lines now, its classes within bounds; remove it from oversized in scripts/check-layout.ts`,
        );
      }
      continue;
    }
    if (f.lines > maxFileLines) {
      problems.push(
        `${f.file}: ${f.lines} lines, over the ${maxFileLines} a file may have; split it at its seams`,
      );
    }
    for (const c of big) {
      problems.push(
        `${f.file}:${c.line}: class ${c.name} spans ${c.lines} lines, over the ${maxClassLines} a class may; compose it from smaller parts`,
      );
    }
  }
  const files = new Set(parsed.map((f) => f.file));
  for (const file of Object.keys(oversized)) {
    if (!files.has(file))
      problems.push(`${file} is gone; remove it from oversized in scripts/check-layout.ts`);
  }
  const used = new Set<(typeof allowedImports)[number]>();
  for (const imp of parsed.flatMap((f) => f.imports)) {
    const broken = ruleBroken(imp);
    if (broken === undefined) continue;
    const allowed = allowedImports.find((a) => a.from === imp.from && a.to === imp.to);
    if (allowed) used.add(allowed);
    else problems.push(`${imp.from}:${imp.line}: its import of ${imp.to} ${broken}`);
  }
  for (const a of allowedImports) {
    if (!used.has(a)) {
      problems.push(
        `${a.from} no longer imports ${a.to} against the rules; remove it from allowedImports in scripts/check-layout.ts`,
      );
    }
  }
  for (const cycle of cycles(parsed)) problems.push(`import cycle: ${cycle.join(" → ")}`);
  return { files: parsed.length, problems };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(process.argv[2] ?? fileURLToPath(new URL("..", import.meta.url)));
  const { files, problems } = checkLayout(root);
  for (const p of problems) console.error(p);
  if (problems.length > 0) {
    console.error(
      `check-layout: ${problems.length} problem(s) in the layout of src/ (the rules: scripts/check-layout.ts)`,
    );
    process.exitCode = 1;
  } else {
    console.log(`check-layout: the ${files} files of src/ keep their layout`);
  }
}
