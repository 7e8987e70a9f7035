/**
 * Starts the server: reads config, sets traces up when an OTLP endpoint is given, listens, prints the
 * URL, what confines component code here (egress, scratch) and the first API key once, stops on signals.
 */
import type { FastifyBaseLogger } from "fastify";
import type { BuiltApp } from "./app.ts";
import { readVersion } from "./cli/version.ts";
import { type Config, ConfigError, loadConfig } from "./config.ts";
import { derivedEndpointUrl, endpointPlace } from "./endpoint-origin.ts";
import type { FileLock } from "./file-lock.ts";
import { lockDataDir } from "./storage/data-dir-lock.ts";
import { tracesWanted } from "./tracing.ts";
import type { TracingHandle } from "./tracing-sdk.ts";

/**
 * Under `npm start`, one Ctrl-C reaches the server twice: from the terminal (the whole foreground
 * process group gets it) and forwarded by npm. A repeat this soon after the first is that echo.
 */
const SIGNAL_ECHO_MS = 500;

/** The OpenTelemetry SDK, loaded only now that traces are wanted (docs/operations.md, *Traces*). */
async function startTraces(config: Config, log: FastifyBaseLogger): Promise<TracingHandle> {
  const { startTracing } = await import("./tracing-sdk.ts");
  return startTracing({ nodeId: config.nodeId, version: readVersion(), log });
}

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  let dataDirLock: FileLock;
  let built: BuiltApp;
  try {
    config = loadConfig();
    dataDirLock = lockDataDir(config.dataDir);
    // The admin is made only once the server listens: a start that fails before (the port is taken)
    // must not create a key nobody saw.
    // The app's modules load only now: a wrong setting or a data dir in use is told at once.
    const { buildApp } = await import("./app.ts");
    built = await buildApp(config, { deferBootstrap: true });
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`fount: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  const { app } = built;
  const traces = tracesWanted() ? await startTraces(config, app.log) : undefined;
  let bound: { url: string; endpoints: string };
  try {
    bound = await built.listen();
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { port?: number };
    // Node's error names the port that failed: the API's or the endpoints'.
    const [port, setting] =
      e.port === config.endpointPort && e.port !== config.port
        ? [config.endpointPort, "FOUNT_ENDPOINT_PORT"]
        : [config.port, "PORT"];
    // Errors of Node's own listen name a port; others (the metrics listener's) say what failed themselves.
    console.error(
      e.syscall !== "listen"
        ? `fount: ${e.message}`
        : e.code === "EADDRINUSE"
          ? `fount: ${config.host}:${port} is already in use; stop what listens there or set ${setting} to another port`
          : `fount: cannot listen on ${config.host}:${port}: ${e.message}`,
    );
    await app.close().catch(() => {});
    await traces?.stop();
    dataDirLock.release();
    process.exit(1);
  }
  // A port of 0 asks for any free port: generated URLs (source endpoints) name the one given.
  if (config.port === 0 && !process.env.PUBLIC_URL) config.publicUrl = bound.url;
  if (config.endpointPort === 0 && !process.env.FOUNT_ENDPOINT_URL) {
    config.endpointUrl = derivedEndpointUrl(config.publicUrl, Number(new URL(bound.endpoints).port));
  }
  const bootstrap = await built.services.accounts.bootstrap(config.bootstrapApiKey);

  const lines = [
    `Fount is listening on ${config.publicUrl}  (API: ${config.publicUrl}/v1, docs: ${config.publicUrl}/docs)`,
    `Source endpoints answer on ${endpointPlace(config.endpointUrl)}`,
    // What confines component code on this machine: the egress layers, the scratch folders.
    ...built.startNotes,
    ...(traces ? [`Traces go to ${traces.target} (OpenTelemetry, OTLP/HTTP JSON)`] : []),
  ];
  if (bootstrap) {
    lines.push(
      `Created the admin user "${bootstrap.user.username}". Its API key, shown only this once:`,
      `  ${bootstrap.secret}`,
      `Try: curl -H "Authorization: Bearer ${bootstrap.secret}" ${config.publicUrl}/v1/users/me`,
    );
  }
  // Signals are handled before the banner goes out: whoever reads it may stop the server at once.
  let stoppedAt: number | undefined;
  const stop = (signal: string) => {
    if (stoppedAt !== undefined) {
      if (Date.now() - stoppedAt < SIGNAL_ECHO_MS) return;
      // A second signal ends the process at once.
      app.log.warn({ signal }, "second signal: exiting without finishing in-flight work");
      process.exit(130);
    }
    stoppedAt = Date.now();
    app.log.info({ signal }, "shutting down: finishing in-flight requests (a second signal exits at once)");
    // A stuck shutdown ends after 30 s.
    const force = setTimeout(() => process.exit(1), 30_000);
    force.unref();
    app
      .close()
      .then(() => traces?.stop())
      .then(
        () => {
          dataDirLock.release();
          process.exit(0);
        },
        (err) => {
          app.log.error({ err }, "shutdown failed");
          process.exit(1);
        },
      );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  process.stdout.write(`${lines.join("\n")}\n`);
}

main().catch((err) => {
  // A store that cannot be opened (unreachable, or written by a newer Fount), whose secrets this node's
  // encryption key cannot open, or where another running node has this node's ID, is the operator's to
  // fix: one line, no stack.
  const code = (err as { code?: unknown }).code;
  if (
    code === "store_unreachable" ||
    code === "store_too_new" ||
    code === "encryption_key_mismatch" ||
    code === "node_id_in_use"
  ) {
    console.error(`fount: ${(err as Error).message}`);
    process.exit(1);
  }
  console.error("fount: failed to start:", err);
  process.exit(1);
});
