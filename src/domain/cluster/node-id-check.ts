/**
 * The node ID check at start (several nodes): two running processes with one `FOUNT_NODE_ID` would take
 * each other's claimed deliveries for leftovers of a crash (a start releases the claims marked with its
 * ID, `resetDeliveryClaims`), and count each other's claims as their own against per-destination limits.
 * A node whose ID another live process uses refuses to start. A process of that ID that no longer beats
 * (the same node, restarted after a crash, before its old heartbeat went stale) is not in the way: the
 * check watches such a heartbeat for a while, and only one that moves is another running node.
 */
import { setTimeout } from "node:timers/promises";
import type { ClusterStore } from "../../storage/port.ts";
import { nodeDeadAfterMs } from "./source-leases.ts";

/** Thrown at start when another running node has this node's ID; the message is one line. */
export class NodeIdInUseError extends Error {
  readonly code = "node_id_in_use";
}

/** Longer than two heartbeats (one a second): a running process beats within it. */
const watchMs = 2_500;

export async function refuseSharedNodeId(cluster: ClusterStore, nodeId: string): Promise<void> {
  // Each process is a member named `<FOUNT_NODE_ID>/<its own suffix>` (app/services.ts).
  const sameId = async () =>
    (await cluster.nodes(nodeDeadAfterMs)).filter((n) => n.live && n.id.startsWith(`${nodeId}/`));
  const before = await sameId();
  if (before.length === 0) return;
  await setTimeout(watchMs);
  const beating = (await sameId()).filter((n) => {
    const earlier = before.find((b) => b.id === n.id);
    return earlier === undefined || n.heartbeatMs > earlier.heartbeatMs;
  });
  if (beating.length > 0) {
    throw new NodeIdInUseError(
      `another running node uses FOUNT_NODE_ID=${nodeId} (${beating[0]!.url ?? beating[0]!.id}): give each node an ID of its own`,
    );
  }
}
