/**
 * What this node claims of the outbox, and how: deliveries taken at routing inside their event's
 * transaction, claims of due deliveries from the store (busy destinations left out, now and then a look
 * past their backlog), and the leases that keep them this node's while it holds them (renewed on a timer,
 * released at a restart or once a lost store answers again). It keeps the counts per listener and per
 * destination that size the next claim; the dispatcher starts what it gets from here.
 */
import { randomUUID } from "node:crypto";
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../clock.ts";
import type { Delivery } from "../domain/types.ts";
import type { Storage } from "../storage/port.ts";
import type { DispatcherOptions } from "./options.ts";
import { OwnerHolds } from "./owner-holds.ts";
import { RecentListeners } from "./recent-listeners.ts";
import { adjust } from "./tally.ts";

/**
 * Several nodes: this process's member name in the cluster, with the rule for a live node. Claims
 * leave deliveries to a source another live node runs to that node (`DeliveryClaim.member`); when a
 * commit of this node queues deliveries to a source it does not run, `wakeOthers` tells the other
 * nodes to claim.
 */
export interface ClaimMember {
  nodeId: string;
  deadAfterMs: number;
  runsHere: (sourceId: string) => boolean;
  wakeOthers: () => void;
}

export interface ClaimsDeps {
  store: Storage;
  clock: Clock;
  /** The dispatcher's options, read when used (tests change them). */
  options: DispatcherOptions;
  logger?: FastifyBaseLogger;
  /** Marks this node's claims (see `DispatcherDeps.nodeId`); default: a name of its own. */
  nodeId?: string;
  member?: ClaimMember;
  /** The deliveries this node works on, by ID: in flight, waiting for a slot, or being settled. */
  handling: ReadonlyMap<string, unknown>;
  /** Deliveries of a destination being sent or waiting for a slot on this node. */
  busy: (key: string) => number;
  /** Whether the dispatcher is stopping or stopped. */
  stopped: () => boolean;
}

/** How often a claim looks past the whole backlog of busy destinations (see `claim`). */
const thoroughClaimEveryMs = 200;

/**
 * A delivery that ends makes the dispatcher claim again for its listener only once 1/`claimBatchShare`
 * of the listener's hold (`maxHeldPerHost`) is free: that claim then takes a batch (64 of 128; the 32 in
 * flight and as many waiting keep the destination busy meanwhile). Claiming as soon as one slot was free
 * made a claim per delivery while a backlog drained, each walking a page of the due index to take one
 * row. Claims for other reasons (new events queued, the poll) take whatever room there is.
 */
const claimBatchShare = 2;

/** A listener found inactive is left to the claims for this long before routing claims its deliveries again. */
const inactiveRecheckMs = 1_000;

/**
 * A delivery claimed at routing whose commit was not published within this time is taken to have rolled
 * back (a failed group commit retries its jobs one by one, routing them again under new IDs), and no
 * longer counts against its listener's room. Only the count: if its commit is published after all, it is
 * started as usual; if the commit landed but was never published (its answer lost), nobody renews its
 * lease, and any node claims it once the lease ran out.
 */
const routedClaimForgetMs = 5_000;

export class DeliveryClaims {
  readonly #d: ClaimsDeps;
  /** Marks this node's claims; a restart of the node releases the claims its earlier run left. */
  readonly #token: string;
  #renewTimer: NodeJS.Timeout | undefined;
  #lastClaimMs = Number.NEGATIVE_INFINITY;
  #lastThoroughMs = 0;
  /** The last claim took all it had room for, or found no room at all: a freed slot should claim again. */
  #starved = false;
  /**
   * Listeners the last claim left out for want of room (the look past their backlog is due every
   * `thoroughClaimEveryMs`), and those it took deliveries of: one of them with a batch's room again
   * should claim.
   */
  #leftOut = new Set<string>();
  #filled = new Set<string>();
  /** Claimed deliveries per destination key, in flight or waiting for a slot. */
  readonly #heldPerKey = new Map<string, number>();
  /** Destination key of each listener seen lately, to leave busy destinations out of the next claim. */
  readonly #keyOf = new RecentListeners<string>();
  /** Held deliveries per owner, to leave an owner at `maxHeldPerOwner` out of the next claim. */
  readonly #owners = new OwnerHolds();
  /**
   * Deliveries this run claimed whose result or release could not be written because the store was
   * out of reach: still claimed in the store, so no claim would take them again. They are released
   * once the store answers (before the next claim), and retried from there: none is lost.
   */
  readonly #unsettled = new Set<string>();
  /**
   * Claimed deliveries that do not know their destination yet, so are not in `#heldPerKey`, by ID:
   * those claimed at routing from then on (`published` once their commit was heard), and those a claim
   * took until they looked their listener up. They count against their listener's room meanwhile, so
   * that the next claim, 2 ms later, does not take their places again.
   */
  readonly #unprepared = new Map<string, { listenerId: string; atMs: number; published: boolean }>();
  readonly #unpreparedPerListener = new Map<string, number>();
  /** Entries of `#unprepared` not yet published: claimed at routing, their commit not heard. */
  #unpublished = 0;
  /** Whether routing may claim: from the end of the dispatcher's `start` (claims reset, commits heard) to `stop`. */
  #routing = false;
  #lastForgetMs = 0;
  /** Deliveries claimed at routing whose commit landed after `stop` (see `releaseLeftovers`). */
  readonly #leftovers = new Set<string>();
  /** When a delivery last found each listener inactive (see `inactiveRecheckMs`). */
  readonly #inactiveSeen = new Map<string, number>();

  constructor(deps: ClaimsDeps) {
    this.#d = deps;
    this.#token = deps.nodeId ?? randomUUID();
  }

  /** How long a claim holds: one attempt and a margin, renewed every third of it while held. */
  get #leaseMs(): number {
    return this.#d.options.timeoutMs + this.#d.options.leaseMarginMs;
  }

  /** When the last claim was asked of the store (`performance.now()`), for the least gap between claims. */
  get lastClaimMs(): number {
    return this.#lastClaimMs;
  }

  /**
   * Whether a delivery of `listenerId` that just ended should make the loop claim again: the last claim
   * had no more room (more may be due); or it took deliveries of this listener or left it out, and its
   * destination now has a batch's room; or it left some out and a look past their backlog is due (only
   * a left-out listener makes that look due: a bounded claim does not look past anything).
   */
  starvedFor(listenerId: string): boolean {
    if (this.#starved) return true;
    if (this.#leftOut.size > 0 && this.#d.clock.now() - this.#lastThoroughMs >= thoroughClaimEveryMs)
      return true;
    return (
      (this.#leftOut.has(listenerId) || this.#filled.has(listenerId)) && this.#room(listenerId) >= this.#batch
    );
  }

  /** The least room worth a claim for a listener (`claimBatchShare`). */
  get #batch(): number {
    return Math.max(1, Math.floor(this.#d.options.maxHeldPerHost / claimBatchShare));
  }

  /** How many more deliveries of `listenerId` this node may hold now, for its destination and its owner. */
  #room(listenerId: string): number {
    const key = this.#keyOf.get(listenerId);
    const held = key === undefined ? 0 : (this.#heldPerKey.get(key) ?? 0);
    const hostRoom =
      this.#d.options.maxHeldPerHost - held - (this.#unpreparedPerListener.get(listenerId) ?? 0);
    const owner = this.#owners.ownerOfListener(listenerId);
    if (owner === undefined) return hostRoom;
    return Math.min(hostRoom, this.#d.options.maxHeldPerOwner - this.#owners.held(owner));
  }

  /**
   * Releases the claims this node's earlier run left (other nodes' claims are theirs until their lease
   * runs out), then renews the ones it will hold: deliveries wait in memory for a slot of their host
   * for longer than one lease, so the node keeps its claims alive while it holds them, and a node that
   * died stops renewing.
   */
  async begin(): Promise<void> {
    const reset = await this.#d.store.resetDeliveryClaims(this.#token);
    if (reset > 0) this.#d.logger?.warn({ reset }, "released deliveries claimed by an earlier run");
    this.#renewTimer = setInterval(() => void this.#renew(), Math.ceil(this.#leaseMs / 3));
    this.#renewTimer.unref();
  }

  /**
   * Routing may claim from now on. Only once the dispatcher hears commits: a delivery claimed at routing
   * before the reset, or before its commit could be heard, would never be sent by this run.
   */
  openRouting(): void {
    this.#leftovers.clear();
    this.#routing = true;
  }

  /** Stopping: routing claims no more, and the leases are no longer renewed. */
  end(): void {
    this.#routing = false;
    clearInterval(this.#renewTimer);
    this.#renewTimer = undefined;
  }

  /**
   * Asked by routing, inside the transaction that stores an event, for each delivery it writes: takes
   * the delivery when this node can send it at once, so that it needs no claim. The delivery is marked
   * claimed by this node under a lease and written so; once its transaction committed (`event.stored`),
   * it is sent as a claimed one would be. A claim costs a statement that walks the due queue (on
   * PostgreSQL, most of the database's time in the webhook bench) and a second write of the row.
   *
   * Taken: a webhook's or workflow's delivery due now, while fewer than half of `maxHeldPerHost`
   * deliveries of its destination are being sent or wait for a slot on this node, and this node holds
   * fewer than `maxHeld` in all. The other half is the claims', so that retries coming due and a
   * backlog still get their turn while new deliveries keep a destination busy. Also left to the claims:
   * deliveries to sources (the claim keeps a subscription's deliveries in order), those scheduled
   * later, those of a listener a delivery found inactive in the last second, and all of them while the
   * dispatcher is stopped.
   */
  claimAtRouting(d: Delivery): boolean {
    if (!this.#routing || this.#d.stopped() || d.listenerKind === "source") return false;
    const now = this.#d.clock.now();
    if (now - this.#lastForgetMs >= routedClaimForgetMs) this.#forgetUnpublished(now);
    if (d.nextAttemptMs === null || d.nextAttemptMs > now) return false;
    const inactiveAt = this.#inactiveSeen.get(d.listenerId);
    if (inactiveAt !== undefined) {
      if (now - inactiveAt < inactiveRecheckMs) return false;
      this.#inactiveSeen.delete(d.listenerId);
    }
    if (this.#d.handling.size + this.#unpublished >= this.#d.options.maxHeld) return false;
    if (this.#owners.held(d.ownerId) >= this.#d.options.maxHeldPerOwner) return false;
    // Deliveries of the destination being sent or waiting for a slot; not those only waiting for their
    // result's commit, which the group commit shares with the emits and which may take a while.
    const key = this.#keyOf.get(d.listenerId);
    const busy =
      (key === undefined ? 0 : this.#d.busy(key)) + (this.#unpreparedPerListener.get(d.listenerId) ?? 0);
    if (busy >= this.#d.options.maxHeldPerHost / 2) return false;
    d.claimedBy = this.#token;
    d.claimedUntilMs = now + this.#leaseMs;
    this.#addUnprepared(d, now, false);
    return true;
  }

  /** Forgets the claims made at routing whose commit was not published in time (`routedClaimForgetMs`). */
  #forgetUnpublished(now: number): void {
    this.#lastForgetMs = now;
    for (const [id, claim] of this.#unprepared)
      if (!claim.published && now - claim.atMs > routedClaimForgetMs) {
        this.prepared(id);
        this.#owners.finished(id);
      }
  }

  #addUnprepared(d: Delivery, now: number, published: boolean): void {
    this.#unprepared.set(d.id, { listenerId: d.listenerId, atMs: now, published });
    adjust(this.#unpreparedPerListener, d.listenerId, 1);
    this.#owners.add(d);
    if (!published) this.#unpublished++;
  }

  /** A claimed delivery knows its destination, will not be sent, or was forgotten: no longer unprepared. */
  prepared(id: string): void {
    const claim = this.#unprepared.get(id);
    if (!claim) return;
    this.#unprepared.delete(id);
    adjust(this.#unpreparedPerListener, claim.listenerId, -1);
    if (!claim.published) this.#unpublished--;
  }

  /**
   * A delivery claimed at routing whose transaction committed: true when it is to be started now. When
   * stopped meanwhile it is kept for `releaseLeftovers` (released once the commits in flight have landed).
   */
  committed(d: Delivery): boolean {
    if (this.#d.stopped()) {
      this.prepared(d.id);
      this.#owners.finished(d.id);
      this.#leftovers.add(d.id);
      return false;
    }
    // Still unprepared until it knows its destination (`DeliverySending.handle`).
    const claim = this.#unprepared.get(d.id);
    if (claim && !claim.published) {
      claim.published = true;
      this.#unpublished--;
    }
    return true;
  }

  /**
   * Releases the deliveries claimed at routing whose transaction committed after the dispatcher stopped,
   * so that another node sends them at once instead of after their lease (45 s).
   */
  async releaseLeftovers(): Promise<void> {
    const ids = [...this.#leftovers];
    this.#leftovers.clear();
    if (ids.length === 0) return;
    try {
      await this.release(ids);
      this.#d.logger?.info({ released: ids.length }, "released deliveries routed while stopping");
    } catch (err) {
      // Their lease runs out, or this node's next start releases them: none is lost.
      this.#d.logger?.warn({ err, ids: ids.length }, "could not release deliveries routed while stopping");
    }
  }

  /** A delivery is done with on this node (settled, released or left claimed): its owner holds one less. */
  finished(id: string): void {
    this.#owners.finished(id);
  }

  /** Gives deliveries this node claimed back to the queue, untouched. */
  release(ids: string[]): Promise<void> {
    return this.#d.store.releaseDeliveries(ids, this.#token);
  }

  /** A delivery whose result or release could not be written, the store being out of reach (`#unsettled`). */
  leftClaimed(id: string): void {
    this.#unsettled.add(id);
  }

  /** A delivery found its listener inactive: routing leaves that listener's deliveries to the claims a while. */
  foundInactive(listenerId: string): void {
    this.#inactiveSeen.set(listenerId, this.#d.clock.now());
  }

  /** A claimed delivery of `listenerId` goes to destination `key`: it counts in that destination's held deliveries. */
  hold(listenerId: string, key: string): void {
    this.#keyOf.set(listenerId, key);
    adjust(this.#heldPerKey, key, 1);
  }

  /** A delivery held for destination `key` is done with it. */
  unhold(key: string): void {
    adjust(this.#heldPerKey, key, -1);
  }

  async #renew(): Promise<void> {
    const now = this.#d.clock.now();
    this.#forgetUnpublished(now);
    for (const [listener, at] of this.#inactiveSeen)
      if (now - at >= inactiveRecheckMs) this.#inactiveSeen.delete(listener);
    if (this.#d.handling.size === 0) return;
    try {
      // Only what it works on: a row claimed at routing whose commit was never published is left to
      // run out, for any node's claim.
      await this.#d.store.renewDeliveryClaims(this.#token, now + this.#leaseMs, [
        ...this.#d.handling.keys(),
        ...this.#unsettled,
      ]);
    } catch (err) {
      this.#d.logger?.warn({ err }, "could not renew this node's delivery claims; retrying");
    }
  }

  /**
   * Claims due deliveries from the store as far as this node has room, and hands each to `start`;
   * resolves with how many were claimed. Deliveries left claimed while the store was lost are released
   * first.
   */
  async claim(start: (d: Delivery) => void): Promise<number> {
    if (this.#unsettled.size > 0 && !this.#d.stopped()) {
      const ids = [...this.#unsettled];
      await this.release(ids);
      for (const id of ids) this.#unsettled.delete(id);
      this.#d.logger?.info(
        { released: ids.length },
        "released deliveries left claimed while the store was lost",
      );
    }
    const free = this.#d.options.maxHeld - this.#d.handling.size;
    if (free <= 0 || this.#d.stopped()) {
      this.#starved = true;
      return 0;
    }
    this.#lastClaimMs = performance.now();
    const perHost = this.#d.options.maxHeldPerHost;
    const except: string[] = [];
    const room: Record<string, number> = {};
    // Deliveries claimed count from the start, before they know their destination; a new listener's
    // first deliveries (destination not known yet) count against the listener itself.
    const listeners = new Set([
      ...this.#keyOf.keys(),
      ...this.#unpreparedPerListener.keys(),
      ...this.#owners.listeners(),
    ]);
    for (const listener of listeners) {
      const left = this.#room(listener);
      if (left <= 0) except.push(listener);
      else if (left < perHost) room[listener] = left;
    }
    // Claims look at a bounded page of due rows; now and then one looks past every row of the busy
    // destinations, so that a backlog behind a slow receiver never holds up the others for long.
    const now = this.#d.clock.now();
    const thorough = except.length > 0 && now - this.#lastThoroughMs >= thoroughClaimEveryMs;
    if (thorough) this.#lastThoroughMs = now;
    const claimed = await this.#d.store.claimDeliveries({
      nowMs: now,
      limit: free,
      perListener: perHost,
      claimToken: this.#token,
      leaseUntilMs: now + this.#leaseMs,
      exceptListeners: except,
      room,
      scanLimit: thorough ? undefined : Math.min(free, perHost) * 2 + 64,
      member: this.#d.member,
    });
    // Busy destinations were left out, or it took something (a limit may have stopped it): a freed slot
    // should claim again. A claim that found nothing due, with nobody left out, clears it.
    // Only a claim that ran out of room overall needs the next freed slot. A listener it filled, or left
    // out, is claimed for again once a batch's room is free (`starvedFor`); any other due work it could
    // not see is found by the look past the busy ones.
    this.#starved = claimed.length >= free;
    this.#leftOut = new Set(except);
    this.#filled = new Set(claimed.map((d) => d.listenerId));
    // One claim may take more of an owner than its room (several listeners, or one not seen before):
    // the excess goes back to the queue untouched, and the next claim leaves the owner out.
    const over: string[] = [];
    for (const d of claimed) {
      if (this.#owners.held(d.ownerId) >= this.#d.options.maxHeldPerOwner) {
        this.#owners.see(d);
        over.push(d.id);
        continue;
      }
      this.#addUnprepared(d, now, true);
      start(d);
    }
    if (over.length > 0) {
      try {
        await this.release(over);
      } catch (err) {
        // Released before the next claim, or by their lease: none is lost.
        for (const id of over) this.leftClaimed(id);
        this.#d.logger?.warn(
          { err, ids: over.length },
          "could not give back deliveries past an owner's hold",
        );
      }
    }
    return claimed.length - over.length;
  }
}
