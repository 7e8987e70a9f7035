/**
 * Whether each delivery destination (a webhook, a workflow, a listener source) works, as this node's
 * attempts find it, so that the log tells when one starts failing and when it recovers rather than a line
 * per failed attempt (one failing webhook wrote 282 lines in 35 minutes). It follows the settled attempts
 * on the bus, writes a line per change of state, a reminder at most hourly while one keeps failing, and
 * publishes each change (`destination.changed`) for /metrics. In a cluster each node tracks the attempts
 * it makes itself.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../clock.ts";
import type { Bus, EventMap } from "../domain/bus.ts";
import type { ListenerKind } from "../domain/types.ts";
import { maxRetryAfterMs } from "./schedule.ts";

type Settled = EventMap["delivery.settled"][0];

export interface DestinationHealthOptions {
  /**
   * After a recovery line, a destination's next failing line waits this long: one that flaps (fails,
   * recovers, fails again) writes two lines per period at most, its brief failures summed up in the next.
   */
  quietMs: number;
  /** While a destination keeps failing, a reminder line at most this often. */
  reminderMs: number;
  /**
   * A destination with no attempt for this long is forgotten: every delivery to it has had its next
   * attempt by then (the longest retry delay and the longest Retry-After honoured are shorter), so it was
   * deleted, turned inactive, or gets no events any more.
   */
  forgetAfterMs: number;
}

export const defaultDestinationHealthOptions: DestinationHealthOptions = {
  quietMs: 5 * 60_000,
  reminderMs: 3_600_000,
  // A receiver's Retry-After is honoured up to a day, the longest of the waits before a next attempt.
  forgetAfterMs: maxRetryAfterMs + 3_600_000,
};

/** How long sweeps for forgotten destinations wait between them. */
const sweepEveryMs = 60_000;

/** One destination whose attempts failed lately, or that recovered less than `quietMs` ago. */
interface Destination {
  kind: ListenerKind;
  /** How its last attempt went. */
  failing: boolean;
  /** What the log said of it last. */
  logged: "healthy" | "failing";
  lastLineMs: number | undefined;
  lastAttemptMs: number;
  /** Since the log last called it healthy: when it began to fail, and how often attempts failed. */
  sinceMs: number;
  failedAttempts: number;
  /** Deliveries that failed for good meanwhile. */
  gaveUp: number;
  /** Failures that ended before a line told of them (see `quietMs`). */
  briefFailures: number;
  lastError: string;
}

const kindNames: Record<ListenerKind, string> = {
  webhook: "webhook",
  workflow: "workflow",
  source: "listener source",
};

/** A duration in words: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`. */
export function inWords(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const min = Math.floor(s / 60);
  if (min < 60) return `${min} min`;
  const h = Math.floor(min / 60);
  if (h < 48) return min % 60 ? `${h} h ${min % 60} min` : `${h} h`;
  return h % 24 ? `${Math.floor(h / 24)} d ${h % 24} h` : `${Math.floor(h / 24)} d`;
}

function count(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

export class DestinationHealth {
  readonly options: DestinationHealthOptions;
  readonly #bus: Bus;
  readonly #logger: FastifyBaseLogger;
  readonly #clock: Clock;
  readonly #destinations = new Map<string, Destination>();
  #failing = 0;
  #lastSweepMs = 0;

  constructor(
    deps: { bus: Bus; logger: FastifyBaseLogger; clock: Clock },
    options: Partial<DestinationHealthOptions> = {},
  ) {
    this.#bus = deps.bus;
    this.#logger = deps.logger;
    this.#clock = deps.clock;
    this.options = { ...defaultDestinationHealthOptions, ...options };
  }

  /** Follows settled attempts; returns the function that stops. */
  listen(): () => void {
    return this.#bus.on("delivery.settled", (d) => this.observe(d));
  }

  /** Destinations whose last attempt failed. */
  get failing(): number {
    return this.#failing;
  }

  /** Takes a settled delivery into account: attempts only, not decisions made without one. */
  observe(d: Settled): void {
    if (d.durationMs === null) return;
    const now = this.#clock.now();
    if (now - this.#lastSweepMs >= sweepEveryMs) this.#sweep(now);
    if (d.outcome === "succeeded") this.#succeeded(d, now);
    else this.#failed(d, now);
  }

  #failed(d: Settled, now: number): void {
    let dest = this.#destinations.get(d.listenerId);
    if (!dest) {
      dest = {
        kind: d.kind,
        failing: false,
        logged: "healthy",
        lastLineMs: undefined,
        lastAttemptMs: now,
        sinceMs: now,
        failedAttempts: 0,
        gaveUp: 0,
        briefFailures: 0,
        lastError: "",
      };
      this.#destinations.set(d.listenerId, dest);
    }
    dest.lastAttemptMs = now;
    dest.failedAttempts++;
    if (dest.logged === "healthy" && dest.failedAttempts === 1) dest.sinceMs = now;
    if (d.outcome === "failed") dest.gaveUp++;
    dest.lastError = d.error ?? `answered ${d.statusCode}`;
    if (!dest.failing) {
      dest.failing = true;
      this.#changed(d.listenerId, dest, "failing");
    }
    const name = `${kindNames[dest.kind]} ${d.listenerId}`;
    const fields = {
      listenerId: d.listenerId,
      listenerKind: d.kind,
      deliveryId: d.deliveryId,
      subscriptionId: d.subscriptionId,
      sourceId: d.emitterId,
      eventId: d.eventId,
      statusCode: d.statusCode,
      failedAttempts: dest.failedAttempts,
    };
    if (dest.logged === "healthy") {
      const since = dest.lastLineMs === undefined ? undefined : now - dest.lastLineMs;
      if (since !== undefined && since < this.options.quietMs) return;
      const brief =
        since !== undefined && dest.briefFailures > 0
          ? `; it also failed ${count(dest.briefFailures, "time")} briefly since it recovered ${inWords(since)} ago`
          : "";
      this.#line(dest, now, "failing");
      this.#logger.warn(
        { ...fields, destination: "failing" },
        `${name} is failing: ${dest.lastError}${brief} (one line when it recovers, a reminder each hour until then)`,
      );
    } else if (now - dest.lastLineMs! >= this.options.reminderMs) {
      this.#line(dest, now, "failing");
      this.#logger.warn(
        { ...fields, destination: "still failing", gaveUp: dest.gaveUp, failingMs: now - dest.sinceMs },
        `${name} is still failing after ${inWords(now - dest.sinceMs)}: ${this.#tally(dest)}; last error: ${dest.lastError}`,
      );
    }
  }

  #succeeded(d: Settled, now: number): void {
    const dest = this.#destinations.get(d.listenerId);
    if (!dest) return;
    dest.lastAttemptMs = now;
    const wasFailing = dest.failing;
    if (wasFailing) {
      dest.failing = false;
      this.#changed(d.listenerId, dest, "recovered");
    }
    if (dest.logged === "failing") {
      this.#logger.info(
        {
          listenerId: d.listenerId,
          listenerKind: d.kind,
          destination: "recovered",
          failedAttempts: dest.failedAttempts,
          gaveUp: dest.gaveUp,
          failingMs: now - dest.sinceMs,
        },
        `${kindNames[dest.kind]} ${d.listenerId} recovered after ${inWords(now - dest.sinceMs)}: ${this.#tally(dest)}`,
      );
      this.#line(dest, now, "healthy");
    } else if (wasFailing) {
      // A failure held back by `quietMs` that ended before its line: told of in the next one.
      dest.briefFailures++;
    }
    if (this.#done(dest, now)) this.#destinations.delete(d.listenerId);
  }

  #tally(dest: Destination): string {
    return `${count(dest.failedAttempts, "failed attempt")}, ${count(dest.gaveUp, "delivery", "deliveries")} given up`;
  }

  /** A line was written: the log now says `logged`; a recovery starts the counts afresh. */
  #line(dest: Destination, now: number, logged: Destination["logged"]): void {
    dest.logged = logged;
    dest.lastLineMs = now;
    if (logged === "healthy") {
      dest.failedAttempts = 0;
      dest.gaveUp = 0;
      dest.briefFailures = 0;
    }
  }

  /**
   * Healthy, said so (or never said otherwise) longer than `quietMs` ago, and no brief failure left to tell
   * of: nothing left to follow.
   */
  #done(dest: Destination, now: number): boolean {
    return (
      !dest.failing &&
      dest.logged === "healthy" &&
      dest.briefFailures === 0 &&
      (dest.lastLineMs === undefined || now - dest.lastLineMs >= this.options.quietMs)
    );
  }

  #changed(listenerId: string, dest: Destination, state: "failing" | "recovered" | "forgotten"): void {
    this.#failing += state === "failing" ? 1 : -1;
    this.#bus.emit("destination.changed", { listenerId, kind: dest.kind, state, failing: this.#failing });
  }

  /** Forgets the destinations with nothing left to follow, and those without an attempt for `forgetAfterMs`. */
  #sweep(now: number): void {
    this.#lastSweepMs = now;
    for (const [id, dest] of this.#destinations) {
      const idle = now - dest.lastAttemptMs;
      if (idle < this.options.forgetAfterMs) {
        if (this.#done(dest, now)) this.#destinations.delete(id);
        continue;
      }
      this.#destinations.delete(id);
      if (dest.failing) this.#changed(id, dest, "forgotten");
      if (dest.logged === "failing") {
        this.#logger.info(
          { listenerId: id, listenerKind: dest.kind, destination: "forgotten" },
          `${kindNames[dest.kind]} ${id} had no delivery attempt for ${inWords(idle)} (deleted, inactive, or no events for it): no longer followed`,
        );
      }
    }
  }
}
