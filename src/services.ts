/** The wired collaborators that route plugins and background workers use. */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "./clock.ts";
import type { Config } from "./config.ts";
import type { SecretBox } from "./crypto/secret-box.ts";
import type { DeliveryDispatcher } from "./delivery/dispatcher.ts";
import type { Accounts } from "./domain/accounts/accounts.ts";
import type { Sessions } from "./domain/accounts/sessions.ts";
import type { Bus } from "./domain/bus.ts";
import type { HitForwarding } from "./domain/cluster/hit-forwarding.ts";
import type { ComponentCatalog } from "./domain/components/components.ts";
import type { DynamicProps } from "./domain/components/dynamic-props.ts";
import type { Committer } from "./domain/events/committer.ts";
import type { EventPruner } from "./domain/events/pruner.ts";
import type { EventRecorder } from "./domain/events/recorder.ts";
import type { Retention } from "./domain/events/retention.ts";
import type { SearchIndexer } from "./domain/events/search-indexer.ts";
import type { StreamInterest } from "./domain/events/stream-hub.ts";
import type { SourceRunner } from "./domain/sources/runner.ts";
import type { TimerScheduler } from "./domain/sources/scheduler.ts";
import type { SourceService } from "./domain/sources/sources.ts";
import type { Metrics } from "./metrics.ts";
import type { Executor } from "./runtime/types.ts";
import type { Storage } from "./storage/port.ts";

export interface Services {
  config: Config;
  clock: Clock;
  store: Storage;
  secrets: SecretBox;
  accounts: Accounts;
  /** Console sessions (docs/console.md). */
  sessions: Sessions;
  logger: FastifyBaseLogger;
  bus: Bus;
  committer: Committer;
  recorder: EventRecorder;
  /** Which events each channel keeps (issue 28). */
  retention: Retention;
  /** Deletes what retention no longer keeps, in the background. */
  pruner: EventPruner;
  /** Puts events in the search's indexes after their commit, where the store has `indexEventsForSearch`. */
  searchIndexer: SearchIndexer | undefined;
  executor: Executor;
  catalog: ComponentCatalog;
  runner: SourceRunner;
  sources: SourceService;
  dynamicProps: DynamicProps;
  scheduler: TimerScheduler;
  dispatcher: DeliveryDispatcher;
  metrics: Metrics;
  /** Several nodes: tells the others which emitters this node's SSE clients stream. */
  streamInterest?: StreamInterest;
  /** Several nodes: sends a source's endpoint hits to the node that runs it. */
  forwarding?: HitForwarding;
  /** Several nodes: this process's name among them (`FOUNT_NODE_ID` and its own suffix). */
  memberId?: string;
}

declare module "fastify" {
  interface FastifyInstance {
    fount: Services;
  }
}
