/**
 * Puts what goes wrong in the server's log with the IDs an operator searches by: every `$errors` entry a
 * source gets (a component that threw, a refused emit, a timer skipped over quota…) with its source,
 * owner and error code, and at debug every delivery attempt that failed with its delivery, subscription,
 * emitter, event and listener (webhook, workflow or source) IDs (at info and above, a destination's
 * failures are told once per change of its state: delivery/destination-health.ts). It listens on the bus,
 * so the runner and the dispatcher need no logging of their own for it.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Bus } from "../bus.ts";

type Obj = Record<string, unknown>;

function obj(value: unknown): Obj {
  return typeof value === "object" && value !== null ? (value as Obj) : {};
}

/** Starts logging; returns the function that stops it. */
export function logErrors(bus: Bus, logger: FastifyBaseLogger): () => void {
  const offStored = bus.on("event.stored", (e) => {
    if (e.channel !== "$errors") return;
    const body = obj(e.event);
    const context = obj(body.original_context);
    // A delivery's failure is logged once, from delivery.settled below, with all its IDs.
    if (context.source_type === "delivery") return;
    const error = obj(body.error);
    logger.warn(
      {
        sourceId: e.emitterId,
        ownerId: context.owner_id,
        trigger: context.source_type,
        errorEventId: e.id,
        code: error.code,
      },
      `source error: ${String(error.message ?? error.code ?? "unknown")}`,
    );
  });
  const offSettled = bus.on("delivery.settled", (d) => {
    if (d.outcome === "succeeded") return;
    const ids = {
      deliveryId: d.deliveryId,
      subscriptionId: d.subscriptionId,
      sourceId: d.emitterId,
      eventId: d.eventId,
      listenerId: d.listenerId,
      listenerKind: d.kind,
      statusCode: d.statusCode,
    };
    // One line per attempt would repeat itself while a receiver is down (282 lines in 35 minutes for one
    // webhook): above debug, its destination's changes of state are logged instead.
    if (d.outcome === "retry") logger.debug(ids, `delivery attempt failed, will retry: ${d.error}`);
    else logger.debug(ids, `delivery failed: ${d.error}`);
  });
  return () => {
    offStored();
    offSettled();
  };
}
