/**
 * The LISTEN/NOTIFY channel the nodes on one store talk over (cluster-link.ts holds what goes on it), and
 * the one message that also comes from outside a node: `fount admin` tells the nodes which kinds of
 * their cached rows its changes made stale, as a node does of its own.
 */
import type { ClusterStore } from "../../storage/port.ts";

export const channel = "fount_cluster";

/** Tells every node that rows of `kinds` changed (`sender` names who changed them; nodes skip their own). */
export function tellStale(cluster: ClusterStore, sender: string, kinds: string[]): Promise<void> {
  return cluster.notify(channel, JSON.stringify({ n: sender, t: "stale", k: kinds }));
}
