/**
 * Errors in a realm. A fatal one (`process.exit()`, an uncaught exception, an unhandled rejection) is
 * reported to the runner with the invocation or inspection that caused it, and ends the realm (the
 * source's next batch starts a fresh one). Any other error is serialized for the pool, its stack
 * cleaned of the executor's own frames and of the server's paths.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { SerializedError } from "../../../errors.ts";
import { InvalidComponent } from "../component/definition.ts";
import { als, inspecting, running, send } from "./state.ts";

const MAX_STACK_CHARS = 16 * 1024;

// Taken before installFatalHandlers replaces process.exit.
const realExit = process.exit.bind(process);

let dying = false;
function blame(): number | undefined {
  const ctx = als.getStore();
  if (ctx && "inspect" in ctx) {
    if (inspecting.has(ctx.inspect)) return ctx.inspect;
  } else if (ctx) {
    if (!ctx.inv.closed) return ctx.inv.q;
    // Code left behind by a finished invocation (a timer): blame its source's running invocation.
    for (const inv of running) if (inv.sourceId === ctx.inv.sourceId) return inv.q;
  }
  if (running.size === 1 && inspecting.size === 0) return [...running][0]!.q;
  if (inspecting.size === 1 && running.size === 0) return [...inspecting][0];
  return undefined;
}

function fatal(code: string, message: string, err?: unknown): void {
  if (dying) return;
  dying = true;
  const stack =
    err instanceof Error && typeof err.stack === "string" ? err.stack.slice(0, MAX_STACK_CHARS) : undefined;
  try {
    send({ t: "fatal", code, message, stack, q: blame() });
  } finally {
    // A message posted before the thread stops still reaches the runner.
    realExit(70);
  }
}

/** Reports and ends the realm on `process.exit()` and on errors nobody caught; realm.ts calls it once. */
export function installFatalHandlers(): void {
  process.exit = ((code?: number | string | null) => {
    fatal("process_exit", `The component called process.exit(${code ?? ""})`);
  }) as typeof process.exit;
  process.on("uncaughtException", (err) => {
    fatal("unhandled_rejection", `Uncaught exception: ${describe(err)}`, err);
  });
  process.on("unhandledRejection", (reason) => {
    fatal("unhandled_rejection", `Unhandled promise rejection: ${describe(reason)}`, reason);
  });
}

/** A thrown value in one line, for a message. */
export function describe(value: unknown): string {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  try {
    return typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    return String(value);
  }
}

const runnerDir = path.dirname(fileURLToPath(import.meta.url));

/**
 * Stacks go to the component's owner: frames of the runner itself are dropped, and the package-cache
 * path of the bundle goes (its owner folder, `owners/<hash>/`, or the `components/` of older versions). Source maps already give the author's lines; names from a map the CLI sent
 * (`sources/hello/hello.mjs`) resolve below the bundle's folder and keep their relative path, and a
 * bundle without one is plain `component`.
 */
function cleanStack(stack: string): string {
  return stack
    .split("\n")
    .filter((line) => !line.includes(runnerDir))
    .map((line) =>
      line.replace(
        /(?:file:\/\/)?\/[^\s()]*?\/packages\/[^\s()/]+\/(?:owners\/[0-9a-f]+|components)\/([0-9a-f]{64}\.mjs)?/g,
        (_, bundle: string | undefined) => (bundle ? "component" : ""),
      ),
    )
    .join("\n");
}

/** An error as it crosses to the pool: its own `code` when it has one, else `fallbackCode`. */
export function serialize(err: unknown, fallbackCode: string): SerializedError {
  if (!(err instanceof Error)) return { code: fallbackCode, message: describe(err) };
  const own = (err as { code?: unknown }).code;
  const out: SerializedError = {
    code: typeof own === "string" && own !== "" ? own : fallbackCode,
    message: String(err.message),
    name: String(err.name),
  };
  if (typeof err.stack === "string") out.stack = cleanStack(err.stack).slice(0, MAX_STACK_CHARS);
  if (err instanceof InvalidComponent && err.data) out.data = err.data;
  return out;
}
