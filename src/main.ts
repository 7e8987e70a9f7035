/** Starts the server: reads config, listens, prints the URL (and the first API key once), stops on signals. */
import { buildApp } from "./app.ts";
import { ConfigError, loadConfig } from "./config.ts";

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`fount: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  const { app, bootstrap } = await buildApp(config);
  await app.listen({ host: config.host, port: config.port });

  const lines = [
    `Fount is listening on ${config.publicUrl}  (API: ${config.publicUrl}/v1, docs: ${config.publicUrl}/docs)`,
  ];
  if (bootstrap) {
    lines.push(
      `Created the admin user "${bootstrap.username}". Its API key, shown only this once:`,
      `  ${bootstrap.apiKey}`,
      `Try: curl -H "Authorization: Bearer ${bootstrap.apiKey}" ${config.publicUrl}/v1/users/me`,
    );
  }
  process.stdout.write(`${lines.join("\n")}\n`);

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ signal }, "shutting down: finishing in-flight requests");
    // A second signal, or a stuck shutdown after 30 s, ends the process at once.
    const force = setTimeout(() => process.exit(1), 30_000);
    force.unref();
    app.close().then(
      () => process.exit(0),
      (err) => {
        app.log.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}

main().catch((err) => {
  // A store that cannot be opened (unreachable, or written by a newer Fount) is the operator's to fix:
  // one line, no stack.
  const code = (err as { code?: unknown }).code;
  if (code === "store_unreachable" || code === "store_too_new") {
    console.error(`fount: ${(err as Error).message}`);
    process.exit(1);
  }
  console.error("fount: failed to start:", err);
  process.exit(1);
});
