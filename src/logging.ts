/**
 * How the server's log is written: pino's JSON lines for a collector, or one readable line per entry
 * (pino-pretty) for a person at a terminal. LOG_FORMAT chooses; unset, a terminal on stdout gets the
 * readable form and anything else (a file, a pipe, journald, a container's log) gets JSON.
 */
import type { FastifyServerOptions } from "fastify";
import pretty from "pino-pretty";
import type { Config } from "./config.ts";

/** The two ways of writing the log (LOG_FORMAT). */
export type LogFormat = "pretty" | "json";

/** The format in force: the setting, else readable on a terminal and JSON anywhere else. */
export function logFormat(
  setting: Config["logFormat"],
  stdoutIsTerminal = process.stdout.isTTY === true,
): LogFormat {
  return setting ?? (stdoutIsTerminal ? "pretty" : "json");
}

/** Fastify's `logger` option for the server's own log, on stdout. */
export function loggerOptions(
  config: Pick<Config, "logLevel" | "logFormat">,
): FastifyServerOptions["logger"] {
  if (logFormat(config.logFormat) === "json") return { level: config.logLevel };
  return {
    level: config.logLevel,
    // Written at once (sync), as pino writes its JSON to stdout: a line logged just before
    // `process.exit` is not lost. Colours only where stdout is a terminal that takes them.
    stream: pretty({
      sync: true,
      translateTime: "SYS:HH:MM:ss.l",
      ignore: "pid,hostname",
      singleLine: true,
    }),
  };
}
