/**
 * The part of the storage port that several nodes on one store share (drivers with `listenNotify`):
 * node heartbeats, source run leases and messages between nodes. `port.ts` re-exports it; it lives
 * apart so that the port stays one file of operations a reader can take in.
 */
/** A node process as the database knows it (`fount admin nodes`). */
export interface ClusterNode {
  /** `FOUNT_NODE_ID` and the process's own suffix (each start is a member of its own). */
  id: string;
  /** Where the other nodes send it hits, if it takes them. */
  url: string | undefined;
  startedMs: number;
  heartbeatMs: number;
  /** How long ago its last heartbeat was, by the database's clock. */
  heartbeatAgeMs: number;
  /** Its last heartbeat is at most `deadAfterMs` old. */
  live: boolean;
  /** Sources whose run lease it holds (a dead node's go to the next node that runs them). */
  leases: number;
}

/**
 * What several nodes on one store share (drivers with `listenNotify`): which nodes are alive, which node
 * may run each source now (its run lease), and messages between nodes.
 */
export interface ClusterStore {
  /**
   * Records `nodeId` as alive now (the database's clock, so nodes' own clocks never disagree), the URL
   * where the other nodes reach it, if it takes forwarded hits, and how many source leases it holds.
   */
  heartbeat(nodeId: string, url: string | undefined, held: number): Promise<void>;
  /**
   * Nodes whose last heartbeat is at most `deadAfterMs` old, with the URL they gave, if any, and the
   * leases they held then (placement.ts).
   */
  liveNodes(deadAfterMs: number): Promise<Array<{ id: string; url: string | undefined; held: number }>>;
  /** Every node with a heartbeat row (one that was killed keeps its row a day), oldest start first. */
  nodes(deadAfterMs: number): Promise<ClusterNode[]>;
  /** Removes a node's heartbeat (it stops): its leases are free at once. */
  leave(nodeId: string): Promise<void>;
  /**
   * Takes the run lease of a source for `nodeId`, unless another node holds it whose heartbeat is at
   * most `deadAfterMs` old. Returns the lease's generation (it grows with every taking), or undefined.
   */
  acquireSourceLease(sourceId: string, nodeId: string, deadAfterMs: number): Promise<number | undefined>;
  /** The live node (heartbeat at most `deadAfterMs` old) that holds the source's run lease, if any. */
  sourceLeaseHolder(sourceId: string, deadAfterMs: number): Promise<string | undefined>;
  /** Of these sources, those whose lease a live node other than `nodeId` holds. */
  leasedElsewhere(sourceIds: string[], nodeId: string, deadAfterMs: number): Promise<Set<string>>;
  /** Gives a lease back, if `nodeId` still holds it at `gen`. */
  releaseSourceLease(sourceId: string, nodeId: string, gen: number): Promise<void>;
  /** Sends `payload` (at most 7,900 bytes) to every node listening on `channel`, this one included. */
  notify(channel: string, payload: string): Promise<void>;
  /**
   * Calls `onMessage` for each message on `channel` on a connection of its own, which is opened again
   * when it breaks (`onGap` then says messages may have been missed; `onListening` follows each time
   * the connection listens, the first included). Returns a function that stops.
   */
  listen(
    channel: string,
    onMessage: (payload: string) => void,
    onGap?: (err: Error) => void,
    onListening?: () => void,
  ): Promise<() => Promise<void>>;
  /**
   * Calls `listener` with the kinds of cached rows (`sources`, `users`, `subscriptions`) that a change
   * made through this node made stale, once the change is committed: the other nodes must forget theirs.
   */
  onStale(listener: (kinds: string[]) => void): void;
  /** Forgets cached rows of `kinds` (every kind when omitted): another node changed them, or its messages were missed. */
  forgetCached(kinds?: string[]): void;
}
