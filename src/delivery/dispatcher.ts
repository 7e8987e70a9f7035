/**
 * The delivery loop: claims due deliveries from the outbox, sends them with bounded concurrency (overall
 * and per destination host), and records each result with the next attempt time from the retry schedule.
 * It wakes when events are stored, when a slot frees up, and on a short timer for retries coming due.
 * Tests drive it with `tick()` and `drain()` and an injected clock.
 */
import { randomUUID } from "node:crypto";
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../clock.ts";
import type { Bus } from "../domain/bus.ts";
import type { Delivery, DeliveryAttempt } from "../domain/types.ts";
import { isStoreUnavailable } from "../storage/health.ts";
import type { Storage } from "../storage/port.ts";
import type { Deliverers, PreparedDelivery } from "./deliverers.ts";
import type { DeliveryLedger, Settlement } from "./ledger.ts";
import type { AttemptOutcome } from "./outcome.ts";
import {
  deliveriesClaimedAtRouting,
  deliveryContext,
  queuedDeliveries,
  queuedSourceListeners,
} from "./routing.ts";
import { maxAttempts, retryDelay } from "./schedule.ts";

export interface DispatcherOptions {
  /** Deliveries in flight at once, all destinations together. */
  maxConcurrency: number;
  /** Deliveries in flight at once to one host (one listener source counts as one host). */
  maxPerHost: number;
  /**
   * Deliveries claimed ahead and waiting in memory for a slot of their host, per host, in flight ones
   * included: claiming in batches keeps a busy destination's queue moving without a claim per delivery.
   */
  maxHeldPerHost: number;
  /** Deliveries claimed and not finished, all destinations together (in flight and waiting). */
  maxHeld: number;
  /** Least time between two claims, so that a stream of wake-ups cannot turn into a stream of queries. */
  minClaimGapMs: number;
  /** How long one HTTP attempt may take, answer included. */
  timeoutMs: number;
  /**
   * A claim's lease outlasts one attempt (`timeoutMs`) by this much, so that a node that stalls between
   * renewals (a long GC pause, a slow commit) does not lose its claims to another node.
   */
  leaseMarginMs: number;
  /** Longest sleep between looks for due retries. */
  pollMs: number;
  /** Finished deliveries are kept this long for the deliveries API, then pruned. */
  retentionMs: number;
  /** [0, 1) for the retry jitter; tests pin it. */
  random: () => number;
}

export const defaultDispatcherOptions: DispatcherOptions = {
  // Measured with npm run bench: 8 per host left a healthy local receiver at ~1,000 deliveries/s,
  // since each request waits on the busy event loop; 32 per host (128 sockets in all) keeps it fed
  // while several destinations still share the sockets.
  maxConcurrency: 128,
  maxPerHost: 32,
  maxHeldPerHost: 128,
  maxHeld: 512,
  minClaimGapMs: 2,
  timeoutMs: 15_000,
  leaseMarginMs: 30_000,
  pollMs: 1_000,
  retentionMs: 7 * 24 * 3_600_000,
  random: Math.random,
};

export interface DispatcherDeps {
  store: Storage;
  bus: Bus;
  clock: Clock;
  ledger: DeliveryLedger;
  deliverers: Deliverers;
  logger?: FastifyBaseLogger;
  /** Runs when the dispatcher stops, after the last attempt (closes connection pools). */
  onStop?: () => Promise<void>;
  /**
   * This node's name (`FOUNT_NODE_ID`), which marks its claims: a start releases the claims an earlier
   * run of the same node left, and never another node's. Default: a name of its own for each dispatcher.
   */
  nodeId?: string;
  /**
   * Several nodes: this process's member name in the cluster, with the rule for a live node. Claims
   * leave deliveries to a source another live node runs to that node (`DeliveryClaim.member`); when a
   * commit of this node queues deliveries to a source it does not run, `wakeOthers` tells the other
   * nodes to claim.
   */
  member?: {
    nodeId: string;
    deadAfterMs: number;
    runsHere: (sourceId: string) => boolean;
    wakeOthers: () => void;
  };
}

/** A delivery that waited longer than this for a slot reads its listener again before sending. */
const staleAfterWaitMs = 1_000;

/** How often a claim looks past the whole backlog of busy destinations (see #claimAndStart). */
const thoroughClaimEveryMs = 200;

/** Adds `delta` to the count of `key`; a count that reaches zero leaves the map. */
function adjust(counts: Map<string, number>, key: string, delta: number): void {
  const n = (counts.get(key) ?? 0) + delta;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}

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

/** How often finished deliveries past their retention are pruned. */
const pruneEveryMs = 3_600_000;

export class DeliveryDispatcher {
  /** Mutable so tests can shorten the timeout or pin the jitter. */
  readonly options: DispatcherOptions;
  readonly #d: DispatcherDeps;
  /** Marks this node's claims; a restart of the node releases the claims its earlier run left. */
  readonly #claimToken: string;
  #renewTimer: NodeJS.Timeout | undefined;
  /** Deliveries being handled, by ID: the claims this node works on, and renews. */
  readonly #inflight = new Map<string, Promise<void>>();
  /** Deliveries handled to the end (settled, released or left claimed), for `drain`. */
  #finished = 0;
  /** In-flight deliveries per destination key. */
  readonly #perKey = new Map<string, number>();
  /** Claimed deliveries per destination key, in flight or waiting for a slot. */
  readonly #heldPerKey = new Map<string, number>();
  /** Deliveries waiting for a slot, oldest first; `start(false)` means the dispatcher is stopping. */
  #waiters: Array<{ key: string; start: (ok: boolean) => void }> = [];
  readonly #waitingPerKey = new Map<string, number>();
  #sending = 0;
  #lastClaimMs = Number.NEGATIVE_INFINITY;
  /** Destination key of each listener seen, to leave busy destinations out of the next claim. */
  readonly #keyOf = new Map<string, string>();
  #stop = new AbortController();
  #started = false;
  #unsubscribe: (() => void) | undefined;
  #timer: NodeJS.Timeout | undefined;
  #wakeQueued = false;
  #lastThoroughMs = 0;
  #looping = false;
  #loopAgain = false;
  #ticking: Promise<number> | undefined;
  #tickAgain = false;
  #lastPruneMs = 0;
  /** The last claim may have left due work behind for want of room (see `#claimAndStart`). */
  #starved = false;
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
  /** Whether routing may claim: from the end of `start` (claims reset, commits heard) to `stop`. */
  #routing = false;
  #lastForgetMs = 0;
  /** Deliveries claimed at routing whose commit landed after `stop` (see `releaseLeftovers`). */
  readonly #leftovers = new Set<string>();
  /** When a delivery last found each listener inactive (see `inactiveRecheckMs`). */
  readonly #inactiveSeen = new Map<string, number>();

  constructor(deps: DispatcherDeps, options: Partial<DispatcherOptions> = {}) {
    this.#d = deps;
    this.options = { ...defaultDispatcherOptions, ...options };
    this.#claimToken = deps.nodeId ?? randomUUID();
  }

  /** How long a claim holds: one attempt and a margin, renewed every third of it while held. */
  get #leaseMs(): number {
    return this.options.timeoutMs + this.options.leaseMarginMs;
  }

  /**
   * Starts the loop; claims this node's crashed run left are released first (other nodes' claims are
   * theirs until their lease runs out). Idempotent.
   */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#stop = new AbortController();
    this.#unsubscribe?.();
    const reset = await this.#d.store.resetDeliveryClaims(this.#claimToken);
    if (reset > 0) this.#d.logger?.warn({ reset }, "released deliveries claimed by an earlier run");
    // Deliveries wait in memory for a slot of their host for longer than one lease: the node keeps
    // its claims alive while it holds them, and a node that died stops renewing.
    this.#renewTimer = setInterval(() => void this.#renew(), Math.ceil(this.#leaseMs / 3));
    this.#renewTimer.unref();
    this.#unsubscribe = this.#d.bus.on("event.stored", (e) => {
      for (const d of deliveriesClaimedAtRouting(e)) this.#startRouted(d);
      if (queuedDeliveries(e)) this.wake();
      const member = this.#d.member;
      if (member && queuedSourceListeners(e).some((id) => !member.runsHere(id))) member.wakeOthers();
    });
    // Only now: a delivery claimed at routing before the reset, or before its commit could be heard,
    // would never be sent by this run.
    this.#leftovers.clear();
    this.#routing = true;
    this.wake();
  }

  /** Stops claiming, aborts HTTP attempts in flight (their deliveries stay pending) and waits for the rest. Idempotent. */
  async stop(): Promise<void> {
    this.#started = false;
    this.#routing = false;
    // Still listening: deliveries claimed at routing whose commit lands from now on are kept for
    // `releaseLeftovers`.
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    clearInterval(this.#renewTimer);
    this.#renewTimer = undefined;
    this.#stop.abort();
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w.start(false);
    await this.#ticking?.catch(() => undefined);
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight.values()]);
    await this.#d.onStop?.();
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
    if (!this.#routing || this.#stop.signal.aborted || d.listenerKind === "source") return false;
    const now = this.#d.clock.now();
    if (now - this.#lastForgetMs >= routedClaimForgetMs) this.#forgetUnpublished(now);
    if (d.nextAttemptMs === null || d.nextAttemptMs > now) return false;
    const inactiveAt = this.#inactiveSeen.get(d.listenerId);
    if (inactiveAt !== undefined) {
      if (now - inactiveAt < inactiveRecheckMs) return false;
      this.#inactiveSeen.delete(d.listenerId);
    }
    if (this.#inflight.size + this.#unpublished >= this.options.maxHeld) return false;
    // Deliveries of the destination being sent or waiting for a slot; not those only waiting for their
    // result's commit, which the group commit shares with the emits and which may take a while.
    const key = this.#keyOf.get(d.listenerId);
    const busy =
      (key === undefined ? 0 : (this.#perKey.get(key) ?? 0) + (this.#waitingPerKey.get(key) ?? 0)) +
      (this.#unpreparedPerListener.get(d.listenerId) ?? 0);
    if (busy >= this.options.maxHeldPerHost / 2) return false;
    d.claimedBy = this.#claimToken;
    d.claimedUntilMs = now + this.#leaseMs;
    this.#addUnprepared(d, now, false);
    return true;
  }

  /** Forgets the claims made at routing whose commit was not published in time (`routedClaimForgetMs`). */
  #forgetUnpublished(now: number): void {
    this.#lastForgetMs = now;
    for (const [id, claim] of this.#unprepared)
      if (!claim.published && now - claim.atMs > routedClaimForgetMs) this.#prepared(id);
  }

  #addUnprepared(d: Delivery, now: number, published: boolean): void {
    this.#unprepared.set(d.id, { listenerId: d.listenerId, atMs: now, published });
    adjust(this.#unpreparedPerListener, d.listenerId, 1);
    if (!published) this.#unpublished++;
  }

  /** A claimed delivery knows its destination, will not be sent, or was forgotten: no longer unprepared. */
  #prepared(id: string): void {
    const claim = this.#unprepared.get(id);
    if (!claim) return;
    this.#unprepared.delete(id);
    adjust(this.#unpreparedPerListener, claim.listenerId, -1);
    if (!claim.published) this.#unpublished--;
  }

  /** Starts a delivery claimed at routing, now that its transaction committed. */
  #startRouted(d: Delivery): void {
    if (this.#stop.signal.aborted) {
      // Stopped meanwhile: released by `releaseLeftovers` once the commits in flight have landed.
      this.#prepared(d.id);
      this.#leftovers.add(d.id);
      return;
    }
    // Still unprepared until it knows its destination (`#handle`).
    const claim = this.#unprepared.get(d.id);
    if (claim && !claim.published) {
      claim.published = true;
      this.#unpublished--;
    }
    this.#start(d);
  }

  /**
   * After `stop`, once the commits in flight have landed (the app calls it after draining the
   * committers): releases the deliveries claimed at routing whose transaction committed after the
   * dispatcher stopped, so that another node sends them at once instead of after their lease (45 s), and
   * stops listening for them.
   */
  async releaseLeftovers(): Promise<void> {
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    const ids = [...this.#leftovers];
    this.#leftovers.clear();
    if (ids.length === 0) return;
    try {
      await this.#d.store.releaseDeliveries(ids, this.#claimToken);
      this.#d.logger?.info({ released: ids.length }, "released deliveries routed while stopping");
    } catch (err) {
      // Their lease runs out, or this node's next start releases them: none is lost.
      this.#d.logger?.warn({ err, ids: ids.length }, "could not release deliveries routed while stopping");
    }
  }

  /** Asks the loop to look for due deliveries soon (new events, redeliveries). */
  wake(): void {
    if (!this.#started || this.#wakeQueued) return;
    this.#wakeQueued = true;
    // Wakes come from anywhere (bus listeners inside a listener source's commit): the loop itself runs
    // outside any delivery's hop context.
    setImmediate(() => {
      this.#wakeQueued = false;
      deliveryContext.exit(() => void this.#loop());
    });
  }

  /** Claims what is due now and starts it; resolves with how many were claimed. */
  tick(): Promise<number> {
    if (this.#ticking) {
      this.#tickAgain = true;
      return this.#ticking;
    }
    const run = (async () => {
      let claimed = 0;
      do {
        this.#tickAgain = false;
        claimed += await this.#claimAndStart();
      } while (this.#tickAgain);
      return claimed;
    })();
    this.#ticking = run;
    // Both ways: `finally` would pass a failed claim on to a promise nobody awaits (an unhandled
    // rejection); the caller of `tick` gets the failure.
    const done = () => {
      if (this.#ticking === run) this.#ticking = undefined;
    };
    void run.then(done, done);
    return run;
  }

  /** Delivers everything due now, and what that causes (chains of sources), until nothing due is left. */
  async drain(): Promise<void> {
    for (;;) {
      const finishedBefore = this.#finished;
      const claimed = await this.tick();
      // A delivery that finished while the claim ran may have made another due (the next event of a
      // listener source's subscription): the claim did not see it, so look again.
      if (claimed === 0 && this.#inflight.size === 0 && this.#finished === finishedBefore) return;
      if (this.#inflight.size > 0) await Promise.race(this.#inflight.values());
    }
  }

  /** One pass: claim and start what is due, then sleep until the next due time, a wake-up or the poll. */
  async #loop(): Promise<void> {
    if (!this.#started) return;
    if (this.#looping) {
      this.#loopAgain = true;
      return;
    }
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    const early = this.#lastClaimMs + this.options.minClaimGapMs - performance.now();
    if (early > 0) {
      this.#timer = setTimeout(() => deliveryContext.exit(() => void this.#loop()), Math.ceil(early));
      this.#timer.unref();
      return;
    }
    this.#looping = true;
    let delay = this.options.pollMs;
    try {
      const claimed = await this.tick();
      await this.#maybePrune();
      const now = this.#d.clock.now();
      if (claimed > 0 && this.#inflight.size < this.options.maxConcurrency) delay = 0;
      else {
        // Due-but-unclaimable rows (inactive listeners, busy hosts, queued behind an older one) would
        // make "next due" always now: wait for a wake-up or the poll instead of spinning.
        const next = await this.#d.store.nextDeliveryMs();
        if (next !== undefined && next > now) delay = Math.min(delay, next - now);
      }
    } catch (err) {
      // A lost store is logged once by app.ts; the loop polls again after `pollMs`.
      if (isStoreUnavailable(err)) this.#d.logger?.debug({ err }, "delivery loop failed; retrying shortly");
      else this.#d.logger?.error({ err }, "delivery loop failed; retrying shortly");
    } finally {
      this.#looping = false;
    }
    if (this.#loopAgain) {
      this.#loopAgain = false;
      delay = 0;
    }
    if (!this.#started) return;
    this.#timer = setTimeout(() => deliveryContext.exit(() => void this.#loop()), delay);
    this.#timer.unref();
  }

  async #renew(): Promise<void> {
    const now = this.#d.clock.now();
    this.#forgetUnpublished(now);
    for (const [listener, at] of this.#inactiveSeen)
      if (now - at >= inactiveRecheckMs) this.#inactiveSeen.delete(listener);
    if (this.#inflight.size === 0) return;
    try {
      // Only what it works on: a row claimed at routing whose commit was never published is left to
      // run out, for any node's claim.
      await this.#d.store.renewDeliveryClaims(this.#claimToken, now + this.#leaseMs, [
        ...this.#inflight.keys(),
        ...this.#unsettled,
      ]);
    } catch (err) {
      this.#d.logger?.warn({ err }, "could not renew this node's delivery claims; retrying");
    }
  }

  async #maybePrune(): Promise<void> {
    const now = this.#d.clock.now();
    if (now - this.#lastPruneMs < pruneEveryMs) return;
    this.#lastPruneMs = now;
    const pruned = await this.#d.store.pruneDeliveries(now - this.options.retentionMs);
    if (pruned > 0) this.#d.logger?.info({ pruned }, "pruned finished deliveries past their retention");
  }

  async #claimAndStart(): Promise<number> {
    if (this.#unsettled.size > 0 && !this.#stop.signal.aborted) {
      const ids = [...this.#unsettled];
      await this.#d.store.releaseDeliveries(ids, this.#claimToken);
      for (const id of ids) this.#unsettled.delete(id);
      this.#d.logger?.info(
        { released: ids.length },
        "released deliveries left claimed while the store was lost",
      );
    }
    const free = this.options.maxHeld - this.#inflight.size;
    if (free <= 0 || this.#stop.signal.aborted) {
      this.#starved = true;
      return 0;
    }
    this.#lastClaimMs = performance.now();
    const perHost = this.options.maxHeldPerHost;
    const except: string[] = [];
    const room: Record<string, number> = {};
    for (const [listener, key] of this.#keyOf) {
      // Deliveries claimed count from the start, before they know their destination.
      const left =
        perHost - (this.#heldPerKey.get(key) ?? 0) - (this.#unpreparedPerListener.get(listener) ?? 0);
      if (left <= 0) except.push(listener);
      else if (left < perHost) room[listener] = left;
    }
    for (const [listener, n] of this.#unpreparedPerListener) {
      if (this.#keyOf.has(listener)) continue;
      // A new listener's first deliveries, whose destination is not known yet.
      if (n >= perHost) except.push(listener);
      else room[listener] = perHost - n;
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
      claimToken: this.#claimToken,
      leaseUntilMs: now + this.#leaseMs,
      exceptListeners: except,
      room,
      scanLimit: thorough ? undefined : Math.min(free, perHost) * 2 + 64,
      member: this.#d.member,
    });
    // Busy destinations were left out, or it took something (a limit may have stopped it): a freed slot
    // should claim again. A claim that found nothing due, with nobody left out, clears it.
    this.#starved = except.length > 0 || claimed.length > 0;
    for (const d of claimed) {
      this.#addUnprepared(d, now, true);
      this.#start(d);
    }
    return claimed.length;
  }

  #canSend(key: string): boolean {
    return (
      this.#sending < this.options.maxConcurrency &&
      (this.#perKey.get(key) ?? 0) < this.options.maxPerHost &&
      !this.#waitingPerKey.get(key)
    );
  }

  #take(key: string): void {
    this.#sending++;
    adjust(this.#perKey, key, 1);
  }

  /** Resolves true once a slot of `key` is this delivery's (in claim order), false when stopping. */
  #slot(key: string): Promise<boolean> {
    if (this.#stop.signal.aborted) return Promise.resolve(false);
    if (this.#canSend(key)) {
      this.#take(key);
      return Promise.resolve(true);
    }
    adjust(this.#waitingPerKey, key, 1);
    return new Promise((start) => this.#waiters.push({ key, start }));
  }

  /** Frees a slot of `key` and hands slots to the oldest waiters that may now send. */
  #release(key: string): void {
    this.#sending--;
    adjust(this.#perKey, key, -1);
    for (let i = 0; i < this.#waiters.length && this.#sending < this.options.maxConcurrency; i++) {
      const w = this.#waiters[i]!;
      if ((this.#perKey.get(w.key) ?? 0) >= this.options.maxPerHost) continue;
      this.#waiters.splice(i, 1);
      i--;
      adjust(this.#waitingPerKey, w.key, -1);
      this.#take(w.key);
      w.start(true);
    }
  }

  #start(d: Delivery): void {
    let done = false;
    const task = this.#handle(d)
      .then(
        (finished) => {
          done = finished;
        },
        (err) => {
          if (!isStoreUnavailable(err)) {
            this.#d.logger?.error({ err, deliveryId: d.id }, "delivery handling failed");
            return;
          }
          this.#unsettled.add(d.id);
          this.#d.logger?.debug({ err, deliveryId: d.id }, "delivery left claimed: the store is unavailable");
        },
      )
      .finally(() => {
        this.#prepared(d.id);
        this.#inflight.delete(d.id);
        this.#finished++;
        // Its slot is free: claim again when something may be waiting for one (the last claim left due
        // work behind for want of room), when it made the next delivery of a source's subscription
        // claimable, or when it is pending again. Not after every webhook delivery: with deliveries
        // claimed at routing, that was a claim per delivery that found nothing.
        if (!done || d.listenerKind === "source" || this.#starved) this.wake();
      });
    this.#inflight.set(d.id, task);
  }

  /** Attempts `d`; resolves true when it is settled for good (succeeded or failed). */
  async #handle(d: Delivery): Promise<boolean> {
    const { store, clock } = this.#d;
    let prepared = await this.#prepare(d);
    // Counted from here in its destination's held deliveries.
    this.#prepared(d.id);
    if (!("key" in prepared)) {
      if (prepared.kind === "release") this.#inactiveSeen.set(d.listenerId, clock.now());
      return this.#finish(d, prepared, clock.now(), 0);
    }
    let { key } = prepared;
    this.#keyOf.set(d.listenerId, key);
    adjust(this.#heldPerKey, key, 1);
    try {
      const waitedFrom = this.#canSend(key) ? undefined : performance.now();
      if (!(await this.#slot(key))) {
        // Stopping: the delivery stays pending for the next run.
        await store.releaseDeliveries([d.id], this.#claimToken);
        return false;
      }
      if (waitedFrom !== undefined && performance.now() - waitedFrom > staleAfterWaitMs) {
        // It waited long for its host: the listener may have changed (deleted, deactivated, new URL).
        const again = await this.#prepare(d);
        if (!("key" in again) || again.key !== key) {
          this.#release(key);
          if (!("key" in again)) return this.#finish(d, again, clock.now(), 0);
          adjust(this.#heldPerKey, key, -1);
          key = again.key;
          adjust(this.#heldPerKey, key, 1);
          this.#keyOf.set(d.listenerId, key);
          if (!(await this.#slot(key))) {
            await store.releaseDeliveries([d.id], this.#claimToken);
            return false;
          }
        }
        prepared = again;
      }
      const started = clock.now();
      const startedAt = performance.now();
      let outcome: AttemptOutcome;
      try {
        outcome = await prepared.send({
          timeoutMs: this.options.timeoutMs,
          stop: this.#stop.signal,
          nowMs: started,
        });
      } catch (err) {
        // A listener source's run whose commit found the store lost: nothing was stored, no attempt counts.
        outcome = isStoreUnavailable(err)
          ? { kind: "release" }
          : { kind: "retry", error: (err as Error).message || String(err) };
      } finally {
        this.#release(key);
      }
      return await this.#finish(d, outcome, started, Math.round(performance.now() - startedAt));
    } finally {
      adjust(this.#heldPerKey, key, -1);
    }
  }

  async #prepare(d: Delivery): Promise<PreparedDelivery | AttemptOutcome> {
    try {
      return await this.#d.deliverers[d.listenerKind].prepare(d);
    } catch (err) {
      // The store is out of reach, not the destination: no attempt is counted, the delivery waits.
      if (isStoreUnavailable(err)) return { kind: "release" };
      return { kind: "retry", error: `could not prepare the delivery: ${(err as Error).message}` };
    }
  }

  /** Turns an outcome into the delivery's next state and records it. */
  async #finish(
    d: Delivery,
    outcome: AttemptOutcome,
    startedMs: number,
    durationMs: number,
  ): Promise<boolean> {
    if (outcome.kind === "release") {
      await this.#d.store.releaseDeliveries([d.id], this.#claimToken);
      return false;
    }
    const now = this.#d.clock.now();
    const attempted = outcome.kind === "retry" || outcome.attempted !== false;
    const attempts = d.attempts + (attempted ? 1 : 0);
    const round = d.roundAttempts + (attempted ? 1 : 0);
    const statusCode = outcome.statusCode ?? null;
    const s: Settlement = {
      patch: {
        status: "succeeded",
        attempts,
        roundAttempts: round,
        nextAttemptMs: null,
        lastStatusCode: attempted ? statusCode : d.lastStatusCode,
        lastError: null,
        lastDurationMs: attempted ? durationMs : d.lastDurationMs,
        updatedMs: now,
      },
    };
    let result: DeliveryAttempt["outcome"] = "succeeded";
    if (outcome.kind === "succeeded") {
      s.patch.lastError = outcome.note ?? null;
    } else if (outcome.kind === "retry") {
      const delay =
        round < maxAttempts ? (outcome.retryAfterMs ?? retryDelay(round, this.options.random)) : undefined;
      if (delay !== undefined) {
        result = "retry";
        s.patch.status = "pending";
        s.patch.nextAttemptMs = now + delay;
        s.patch.lastError = outcome.error;
      } else {
        result = "failed";
        s.patch.status = "failed";
        s.patch.lastError = `${outcome.error} (gave up after ${round} attempts)`;
        s.failure = { code: "delivery_failed", message: s.patch.lastError };
      }
    } else {
      result = "failed";
      s.patch.status = "failed";
      s.patch.lastError = outcome.error;
      s.deactivate = outcome.deactivate;
      if (outcome.report !== false) s.failure = { code: outcome.code, message: outcome.error };
    }
    if (attempted) {
      s.attempt = {
        deliveryId: d.id,
        n: attempts,
        startedMs,
        durationMs,
        statusCode,
        error: s.patch.lastError,
        response: outcome.response ?? null,
        outcome: result,
      };
    }
    await this.#d.ledger.settle(d, s);
    return s.patch.status !== "pending";
  }
}
