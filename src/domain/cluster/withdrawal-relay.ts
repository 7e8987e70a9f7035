/**
 * Tells the other nodes on the same database which routes were taken away through this one (bus event
 * `deliveries.withdrawn`: deleted subscriptions, listeners, an ended membership), so that their
 * dispatchers send none of the deliveries of those routes they hold in memory (delivery/withdrawals.ts).
 * A channel of its own: cluster-link.ts carries the rest. A message lost (the channel broke) leaves the
 * held deliveries of a deleted subscription to be sent at most once more each, their settlement then
 * finding no row, as before this relay.
 */
import type { FastifyBaseLogger } from "fastify";
import type { ClusterStore } from "../../storage/port.ts";
import type { Bus, EventMap } from "../bus.ts";

export const withdrawalChannel = "fount_withdrawn";
/** IDs per message: NOTIFY payloads stay well under PostgreSQL's 8,000 bytes (an ID is about 30). */
const idsPerMessage = 150;

type Withdrawn = EventMap["deliveries.withdrawn"][0];
type Message = { n: string; s?: string[]; l?: string[]; o?: string[] };

/** Relays withdrawals both ways until the returned function is called. */
export async function relayWithdrawals(deps: {
  cluster: ClusterStore;
  nodeId: string;
  bus: Bus;
  logger: FastifyBaseLogger;
}): Promise<() => Promise<void>> {
  const { cluster, nodeId, bus, logger } = deps;
  const send = async (m: Message) => {
    try {
      await cluster.notify(withdrawalChannel, JSON.stringify(m));
    } catch (err) {
      logger.warn({ err }, "could not tell the other nodes of deleted routes");
    }
  };
  const off = bus.on("deliveries.withdrawn", (w: Withdrawn) => {
    if (w.remote) return;
    for (const [field, ids] of [
      ["s", w.subscriptionIds],
      ["l", w.listenerIds],
      ["o", w.ownerIds],
    ] as const)
      for (let i = 0; i < (ids?.length ?? 0); i += idsPerMessage)
        void send({ n: nodeId, [field]: ids!.slice(i, i + idsPerMessage) });
  });
  const stop = await cluster.listen(withdrawalChannel, (payload) => {
    let m: Message;
    try {
      m = JSON.parse(payload) as Message;
    } catch {
      return;
    }
    if (m.n === nodeId) return;
    bus.emit("deliveries.withdrawn", {
      subscriptionIds: m.s,
      listenerIds: m.l,
      ownerIds: m.o,
      remote: true,
    });
  });
  return async () => {
    off();
    await stop();
  };
}
