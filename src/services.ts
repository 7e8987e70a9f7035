/** The wired collaborators that route plugins and background workers use. */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "./clock.ts";
import type { Config } from "./config.ts";
import type { SecretBox } from "./crypto/secret-box.ts";
import type { Accounts } from "./domain/accounts.ts";
import type { Storage } from "./storage/port.ts";

export interface Services {
  config: Config;
  clock: Clock;
  store: Storage;
  secrets: SecretBox;
  accounts: Accounts;
  logger: FastifyBaseLogger;
}

declare module "fastify" {
  interface FastifyInstance {
    fount: Services;
  }
}
