/** The server's configuration as the commands that work on its store read it: from the same environment. */
import type { Config } from "../config.ts";
import { CliError, type Context } from "./command.ts";

export async function serverConfig(ctx: Context): Promise<Config> {
  const { ConfigError, loadConfig } = await import("../config.ts");
  try {
    return loadConfig(ctx.io.env);
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, "config_error", 2);
    throw err;
  }
}
