/**
 * The delivery loop: claims due deliveries from the outbox, sends them with bounded concurrency (overall
 * and per destination host), and records each result with the next attempt time from the retry schedule.
 * It wakes when events are stored, when a slot frees up, and on a short timer for retries coming due.
 * Tests drive it with `tick()` and `drain()` and an injected clock.
 *
 * The loop composes the parts: `claims.ts` (what this node claims, and its leases), `send-slots.ts` and
 * `sending.ts` (a slot of the destination, the attempt), `settlement.ts` and `ledger.ts` (the result).
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../clock.ts";
import type { Bus } from "../domain/bus.ts";
import type { Delivery } from "../domain/types.ts";
import { inPacedBatches } from "../pace.ts";
import { isStoreUnavailable } from "../storage/health.ts";
import type { DueKey, Storage } from "../storage/port.ts";
import { type ClaimMember, DeliveryClaims } from "./claims.ts";
import type { Deliverers } from "./deliverers.ts";
import type { DeliveryLedger } from "./ledger.ts";
import { type DispatcherOptions, defaultDispatcherOptions } from "./options.ts";
import {
  deliveriesClaimedAtRouting,
  deliveryContext,
  queuedDeliveries,
  queuedSourceListeners,
} from "./routing.ts";
import { SendSlots } from "./send-slots.ts";
import { DeliverySending } from "./sending.ts";
import { SerialJob } from "./serial-job.ts";
import { HeldWithdrawals } from "./withdrawals.ts";

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
  /** Several nodes: see `ClaimMember`. */
  member?: ClaimMember;
}

/** How often finished deliveries past their retention are pruned: a minute's worth at a time. */
const pruneEveryMs = 60_000;

export class DeliveryDispatcher {
  /** Mutable so tests can shorten the timeout or pin the jitter. */
  readonly options: DispatcherOptions;
  readonly #d: DispatcherDeps;
  readonly #claims: DeliveryClaims;
  readonly #slots: SendSlots;
  readonly #sending: DeliverySending;
  /** Deliveries being handled, by ID: the claims this node works on, and renews. */
  readonly #inflight = new Map<string, Promise<void>>();
  #stop = new AbortController();
  #started = false;
  #unsubscribe: (() => void) | undefined;
  #timer: NodeJS.Timeout | undefined;
  #wakeQueued = false;
  #looping = false;
  #loopAgain = false;
  #ticking: Promise<number> | undefined;
  #tickAgain = false;
  #lastPruneMs = 0;
  /** The prune under way, if any (it runs beside the loop, in paced batches). */
  #pruning: Promise<number> | undefined;
  /** Unparking and parking, each beside the loop in paced batches, one run at a time. */
  readonly #unparking = new SerialJob(() => this.#unpark(), {
    canStart: () => this.#started,
    failed: (err) => this.#logLater(err, "unparking deliveries failed; retrying later"),
  });
  readonly #parking = new SerialJob(() => this.#park(), {
    canStart: () => this.#started,
    failed: (err) => this.#logLater(err, "parking deliveries failed; claims park the rest"),
  });
  /** Listeners made inactive whose due deliveries are still to be parked. */
  readonly #toPark = new Set<string>();

  constructor(deps: DispatcherDeps, options: Partial<DispatcherOptions> = {}) {
    this.#d = deps;
    this.options = { ...defaultDispatcherOptions, ...options };
    const stopped = () => this.#stop.signal.aborted;
    const slots = new SendSlots(this.options, stopped);
    const withdrawals = new HeldWithdrawals(() => deps.clock.now());
    this.#slots = slots;
    this.#claims = new DeliveryClaims({
      store: deps.store,
      clock: deps.clock,
      options: this.options,
      logger: deps.logger,
      nodeId: deps.nodeId,
      member: deps.member,
      handling: this.#inflight,
      busy: (key) => slots.busy(key),
      stopped,
    });
    this.#sending = new DeliverySending({
      deliverers: deps.deliverers,
      claims: this.#claims,
      slots,
      ledger: deps.ledger,
      clock: deps.clock,
      options: this.options,
      stop: () => this.#stop.signal,
      inflight: this.#inflight,
      wake: () => this.wake(),
      parkSoon: (listenerId) => this.parkSoon(listenerId),
      withdrawals,
      stillPending: async (id) => (await deps.store.getDelivery(id))?.status === "pending",
      logger: deps.logger,
    });
    // Heard while stopped too: deliveries still in flight at a stop are handled to their end.
    deps.bus.on("deliveries.withdrawn", (w) => withdrawals.withdraw(w));
    deps.bus.on("source.deleted", ({ sourceId }) => withdrawals.withdraw({ listenerIds: [sourceId] }));
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
    await this.#claims.begin();
    this.#unsubscribe = this.#d.bus.on("event.stored", (e) => {
      // Deliveries claimed at routing, now that their transaction committed.
      for (const d of deliveriesClaimedAtRouting(e)) if (this.#claims.committed(d)) this.#sending.start(d);
      if (queuedDeliveries(e)) this.wake();
      const member = this.#d.member;
      if (member && queuedSourceListeners(e).some((id) => !member.runsHere(id))) member.wakeOthers();
    });
    this.#claims.openRouting();
    this.wake();
    // What an earlier run left parked under a listener made active (it stopped or died midway).
    this.unparkSoon();
  }

  /** Stops claiming, aborts HTTP attempts in flight (their deliveries stay pending) and waits for the rest. Idempotent. */
  async stop(): Promise<void> {
    this.#started = false;
    // Still listening: deliveries claimed at routing whose commit lands from now on are kept for
    // `releaseLeftovers`.
    this.#claims.end();
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#stop.abort();
    this.#slots.refuseWaiters();
    await this.#ticking?.catch(() => undefined);
    await this.#pruning?.catch(() => undefined);
    await this.#unparking.running;
    await this.#parking.running;
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight.values()]);
    await this.#d.onStop?.();
  }

  /**
   * Asked by routing, inside the transaction that stores an event, for each delivery it writes: true
   * when this node takes it at once, with no claim (see `DeliveryClaims.claimAtRouting`).
   */
  claimAtRouting(d: Delivery): boolean {
    return this.#claims.claimAtRouting(d);
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
    await this.#claims.releaseLeftovers();
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
        claimed += await this.#claims.claim((d) => this.#sending.start(d));
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
      // Deliveries being unparked are due work too; those being parked are not, but claims would take
      // them meanwhile (to park them on release).
      await this.#unparking.running;
      await this.#parking.running;
      const finishedBefore = this.#sending.finished;
      const claimed = await this.tick();
      // A delivery that finished while the claim ran may have made another due (the next event of a
      // listener source's subscription): the claim did not see it, so look again.
      if (claimed === 0 && this.#inflight.size === 0 && this.#sending.finished === finishedBefore) return;
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
    const early = this.#claims.lastClaimMs + this.options.minClaimGapMs - performance.now();
    if (early > 0) {
      this.#timer = setTimeout(() => deliveryContext.exit(() => void this.#loop()), Math.ceil(early));
      this.#timer.unref();
      return;
    }
    this.#looping = true;
    let delay = this.options.pollMs;
    try {
      const claimed = await this.tick();
      this.#housekeeping();
      const now = this.#d.clock.now();
      if (claimed > 0 && this.#inflight.size < this.options.maxConcurrency) delay = 0;
      else {
        // Due-but-unclaimable rows (inactive listeners, busy hosts, queued behind an older one) would
        // make "next due" always now: wait for a wake-up or the poll instead of spinning.
        const next = await this.#d.store.nextDeliveryMs();
        if (next !== undefined && next > now) delay = Math.min(delay, next - now);
      }
    } catch (err) {
      // A lost store is logged once by app/services.ts; the loop polls again after `pollMs`.
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

  /**
   * Once `pruneEveryMs` passed since the last began: starts a prune beside the loop, unless one runs, and
   * looks for parked deliveries left under a listener made active (by another node that stopped midway).
   */
  #housekeeping(): void {
    const now = this.#d.clock.now();
    if (this.#pruning || now - this.#lastPruneMs < pruneEveryMs) return;
    this.#lastPruneMs = now;
    void this.pruneFinished().catch((err) =>
      this.#logLater(err, "pruning deliveries failed; retrying later"),
    );
    this.unparkSoon();
  }

  #logLater(err: unknown, message: string): void {
    if (isStoreUnavailable(err)) this.#d.logger?.debug({ err }, message);
    else this.#d.logger?.error({ err }, message);
  }

  /**
   * Makes the parked deliveries of every listener that is no longer inactive due (docs/delivery.md,
   * *Inactive listeners*), beside the loop; called once a listener is made active. Does nothing while
   * the dispatcher is stopped: its start looks for them.
   */
  unparkSoon(): void {
    this.#unparking.request();
  }

  /**
   * Makes due, `unparkBatch` at a time and oldest first, the parked deliveries of each listener made
   * active again (or deleted), pausing after each batch as long as it took, and wakes the loop after
   * each; resolves with how many.
   */
  async #unpark(): Promise<number> {
    const stopped = () => this.#stop.signal.aborted;
    let unparked = 0;
    for (const listenerId of await this.#d.store.listUnparkableListeners()) {
      unparked += await inPacedBatches(
        this.options.unparkBatch,
        async (limit) => {
          const n = await this.#d.store.unparkDeliveries(listenerId, this.#d.clock.now(), limit);
          if (n > 0) this.wake();
          return n;
        },
        { stopped },
      );
    }
    return unparked;
  }

  /**
   * Parks the due deliveries of a listener just made inactive, `unparkBatch` at a time and soonest due
   * first, pausing after each batch as long as it took (docs/delivery.md, *Inactive listeners*). Until
   * they are parked claims may still take them: a claimer finds the listener inactive and parks the
   * delivery as it gives it back, which also finishes a parking cut short by a stop.
   */
  parkSoon(listenerId: string): void {
    if (!this.#started) return;
    this.#toPark.add(listenerId);
    this.#parking.request();
  }

  async #park(): Promise<number> {
    const stopped = () => this.#stop.signal.aborted;
    let parked = 0;
    // A listener added meanwhile is visited too (a Set's iteration reaches what is added during it); one
    // left by a stop waits for the next parking after a start.
    for (const listenerId of this.#toPark) {
      if (stopped()) break;
      this.#toPark.delete(listenerId);
      let after: DueKey | undefined;
      parked += await inPacedBatches(
        this.options.unparkBatch,
        async (limit) => {
          const r = await this.#d.store.parkDeliveries(listenerId, limit, after);
          after = r.last ?? after;
          return r.parked;
        },
        { stopped },
      );
    }
    // On PostgreSQL a batch that began while its listener was inactive commits after a change that made
    // it active, whose unparking could not see the rows yet (uncommitted, locked) and left them parked
    // until the dispatcher's once-a-minute look: one more unparking after the batches commit finds them.
    if (parked > 0) this.unparkSoon();
    return parked;
  }

  /**
   * Deletes the finished deliveries past `retentionMs`, `pruneBatch` at a time, pausing after each batch
   * as `pruneRate` asks; stops early when the dispatcher stops. Resolves with how many it deleted. One
   * at a time: a call while one runs answers that one.
   */
  pruneFinished(): Promise<number> {
    this.#pruning ??= this.#prune().finally(() => {
      this.#pruning = undefined;
    });
    return this.#pruning;
  }

  async #prune(): Promise<number> {
    const before = this.#d.clock.now() - this.options.retentionMs;
    const pruned = await inPacedBatches(
      this.options.pruneBatch,
      (limit) => this.#d.store.pruneDeliveries(before, limit),
      { ratePerS: this.options.pruneRate, stopped: () => this.#stop.signal.aborted },
    );
    if (pruned > 0) this.#d.logger?.info({ pruned }, "pruned finished deliveries past their retention");
    return pruned;
  }
}
