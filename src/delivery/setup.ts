/** Wires guaranteed delivery: routing on the recorder, the address policy, the deliverers and the dispatcher. */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../clock.ts";
import type { Config } from "../config.ts";
import type { SecretBox } from "../crypto/secret-box.ts";
import type { Bus } from "../domain/bus.ts";
import type { Committer } from "../domain/events/committer.ts";
import type { EventRecorder } from "../domain/events/recorder.ts";
import type { SourceRunner } from "../domain/sources/runner.ts";
import type { Storage } from "../storage/port.ts";
import { AddressPolicy } from "./address-guard.ts";
import type { ClaimMember } from "./claims.ts";
import { HttpDeliverer, SourceDeliverer } from "./deliverers.ts";
import { DeliveryDispatcher } from "./dispatcher.ts";
import { HttpSender } from "./http-sender.ts";
import { DeliveryLedger } from "./ledger.ts";
import type { DispatcherOptions } from "./options.ts";
import { registerRouting } from "./routing.ts";

export interface DeliverySetup {
  store: Storage;
  committer: Committer;
  /** Commits the usual settlements, when not `committer` (see `LedgerDeps.settlements`). */
  settlements?: Committer;
  recorder: EventRecorder;
  bus: Bus;
  runner: SourceRunner;
  secrets: SecretBox;
  clock: Clock;
  config: Config;
  logger?: FastifyBaseLogger;
  options?: Partial<DispatcherOptions>;
  /** Several nodes: see `ClaimMember`. */
  member?: ClaimMember;
}

/** Routes every stored event into the outbox and returns the (not yet started) dispatcher. */
export function setUpDelivery(s: DeliverySetup): DeliveryDispatcher {
  // The dispatcher takes what it can send at once as it is routed (see `claimAtRouting`).
  registerRouting(s.recorder, (d) => dispatcher.claimAtRouting(d));
  const policy = new AddressPolicy({
    allowPrivate: s.config.webhookAllowPrivate,
    allowHosts: s.config.webhookAllowHosts,
  });
  const sender = new HttpSender(policy, s.clock);
  const http = new HttpDeliverer(s.store, s.secrets, sender);
  const dispatcher: DeliveryDispatcher = new DeliveryDispatcher(
    {
      store: s.store,
      bus: s.bus,
      clock: s.clock,
      ledger: new DeliveryLedger({
        committer: s.committer,
        settlements: s.settlements,
        recorder: s.recorder,
        bus: s.bus,
      }),
      deliverers: { webhook: http, workflow: http, source: new SourceDeliverer(s.store, s.runner) },
      logger: s.logger,
      onStop: () => sender.close(),
      nodeId: s.config.nodeId,
      member: s.member,
    },
    {
      // An owner's claimed deliveries: four times its sends, as `maxHeldPerHost` is to `maxPerHost`.
      maxPerOwner: s.config.deliveryMaxPerOwner,
      maxHeldPerOwner: 4 * s.config.deliveryMaxPerOwner,
      ...s.options,
    },
  );
  return dispatcher;
}
