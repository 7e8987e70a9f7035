/**
 * V8 flags the operator adds to every executor process (`FOUNT_EXECUTOR_V8_FLAGS`), kept only when this
 * Node's V8 knows them: a flag a newer or older V8 lacks makes `node` refuse to start, which would fail
 * every tenant's first call instead of costing a little memory. Only V8's own flags pass (those
 * `node --v8-options` lists), so the setting cannot reach Node's options (`--allow-fs-read`, `--require`)
 * nor the flags that hand component code more power than the sandbox gives it.
 */
import { execFile } from "node:child_process";

/** V8 flags that would give component code reach it must not have (natives syntax, extra globals). */
const REFUSED = /^--(no-)?(allow-natives-syntax|expose|harmony-shadow-realm|wasm-|experimental)/;
const SHAPE = /^--[a-z0-9][a-z0-9_-]*(=[A-Za-z0-9_.:-]+)?$/;

/** A flag's name as `--v8-options` lists it: dashes, no `no-` prefix, no value. */
function flagName(flag: string): string {
  const name = flag.slice(2).split("=")[0]!.replaceAll("_", "-");
  return name.startsWith("no-") ? name.slice(3) : name;
}

/** The flags of `wanted` this Node's V8 knows, and why each other one was dropped. */
export async function usableV8Flags(
  wanted: readonly string[],
  execPath = process.execPath,
): Promise<{ flags: string[]; dropped: Array<{ flag: string; why: string }> }> {
  const dropped: Array<{ flag: string; why: string }> = [];
  if (wanted.length === 0) return { flags: [], dropped };
  const listing = await new Promise<string>((resolve) => {
    execFile(
      execPath,
      ["--v8-options"],
      { env: {}, maxBuffer: 16 * 1024 * 1024, timeout: 30_000 },
      (err, out) => resolve(err ? "" : out),
    );
  });
  const known = new Set<string>();
  for (const m of listing.matchAll(/^\s+--([a-z0-9-]+)/gm)) known.add(m[1]!);
  const flags: string[] = [];
  for (const flag of wanted) {
    if (!SHAPE.test(flag)) dropped.push({ flag, why: "not of the form --name or --name=value" });
    else if (REFUSED.test(flag))
      dropped.push({ flag, why: "gives component code more than the sandbox allows" });
    else if (!known.has(flagName(flag))) dropped.push({ flag, why: "not a V8 flag of this Node" });
    else flags.push(flag);
  }
  return { flags, dropped };
}
