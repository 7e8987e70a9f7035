/**
 * What the CLI does differently on a terminal: colour (unless `NO_COLOR`; `FORCE_COLOR` forces it on or
 * off) and a spinner while a long request runs, which elsewhere is one plain line.
 */
import { createInterface } from "node:readline";
import { styleText } from "node:util";

/** A style `util.styleText` knows: `red`, `dim`, `bold`… */
export type Style = Parameters<typeof styleText>[0];

/** Styles text, or leaves it alone when colour is off. */
export type Painter = (style: Style, text: string) => string;

/** The painter that never colours. */
export const plain: Painter = (_style, text) => text;

/** An output stream as the CLI sees it. */
export interface OutStream {
  write(text: string): unknown;
  isTTY?: boolean;
}

/**
 * Whether text written to `stream` gets colour: `FORCE_COLOR` decides when set (`0`/`false` is off, any
 * other value on, as in Node), then a non-empty `NO_COLOR` turns it off (no-color.org), then `TERM=dumb`;
 * otherwise colour goes to terminals only.
 */
export function colourWanted(stream: OutStream, env: NodeJS.ProcessEnv): boolean {
  const force = env.FORCE_COLOR;
  if (force !== undefined) return force !== "0" && force.toLowerCase() !== "false";
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== "") return false;
  if (env.TERM === "dumb") return false;
  return stream.isTTY === true;
}

/** The painter for `stream`. */
export function painterFor(stream: OutStream, env: NodeJS.ProcessEnv): Painter {
  if (!colourWanted(stream, env)) return plain;
  // The stream was judged above; styleText's own check would look at process.stdout instead.
  return (style, text) => styleText(style, text, { validateStream: false });
}

/** A running progress display; `stop` clears it. */
export interface Progress {
  stop(): void;
}

const frames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
// Fast enough to look alive, slow enough to cost nothing.
const frameMs = 100;

/**
 * Shows `label` on `stream` until stopped: on a terminal a spinner with the seconds elapsed, redrawn
 * in place and erased at the end; elsewhere (a pipe, a log file) the label once, as a plain line.
 */
export function startProgress(stream: OutStream, label: string, paint: Painter = plain): Progress {
  if (stream.isTTY !== true) {
    stream.write(`${label}\n`);
    return { stop: () => {} };
  }
  const started = Date.now();
  let frame = 0;
  const draw = () => {
    const seconds = Math.floor((Date.now() - started) / 1000);
    const elapsed = seconds > 0 ? paint("dim", ` ${seconds}s`) : "";
    stream.write(`\r\x1b[2K${paint("cyan", frames[frame++ % frames.length]!)} ${label}${elapsed}`);
  };
  draw();
  const timer = setInterval(draw, frameMs);
  // A spinner must not keep the process alive on its own.
  timer.unref();
  let stopped = false;
  return {
    stop() {
      if (stopped) return;
      stopped = true;
      clearInterval(timer);
      stream.write("\r\x1b[2K");
    },
  };
}

/** Runs `work` with a progress display of `label`, cleared when it settles either way. */
export async function withProgress<T>(
  stream: OutStream,
  label: string,
  paint: Painter,
  work: () => Promise<T>,
): Promise<T> {
  const progress = startProgress(stream, label, paint);
  try {
    return await work();
  } finally {
    progress.stop();
  }
}

/** Writes `prompt` to `output` and resolves to the line typed on `input`; undefined at end of input. */
export function askLine(
  input: NodeJS.ReadableStream,
  output: OutStream,
  prompt: string,
): Promise<string | undefined> {
  return new Promise((resolve) => {
    const rl = createInterface({ input, output: output as NodeJS.WritableStream, terminal: false });
    let answered = false;
    output.write(prompt);
    rl.once("line", (line) => {
      answered = true;
      rl.close();
      resolve(line);
    });
    rl.once("close", () => {
      if (!answered) resolve(undefined);
    });
  });
}
