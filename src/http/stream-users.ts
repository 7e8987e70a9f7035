/**
 * Each user's live streams on this node, in one record: how many are open, the replay turns they hold
 * and the streams waiting for one, and each open stream's access check. A user's first stream makes the
 * record and the end of their last one removes it, so nothing is kept of users who have left. The
 * limits are the stream hub's (`maxStreamsPerUser`, `maxReplaysPerUser`) and `FOUNT_SSE_REPLAY_WAIT_MS`,
 * counted per node, in memory (docs/streams.md, *Slow and vanished clients*).
 */
import type { ServerResponse } from "node:http";
import { AppError } from "../errors.ts";
import { Turns } from "../turns.ts";

/** What bounds one user's streams on this node, read at each use (tests change the hub's options). */
export interface StreamUserLimits {
  /** Streams open at once (FOUNT_SSE_MAX_STREAMS). */
  maxStreams: number;
  /** Streams replaying stored events at once (FOUNT_SSE_MAX_REPLAYS). */
  maxReplays: number;
  /** How long a stream waits for a replay turn before it is told to come back later (ms). */
  replayWaitMs: number;
  /** How often each open stream checks its access again (ms). */
  recheckMs: number;
}

/** What a wait for a replay turn came to: the turn (with its release), the client gone, or no turn in time. */
export type ReplayTurn = { release: () => void } | "left" | "busy";

/** One stream of a user, counted from `StreamUsers.admit` until its response closes. */
export interface UserStream {
  /** Whether its response has closed (the client left, or the stream ended). */
  readonly closed: boolean;
  /**
   * Takes one of the user's replay turns, waiting up to `replayWaitMs` for one, first come first served.
   * The release passes the turn on (once, however often called); the response's close releases it too.
   */
  replayTurn(): Promise<ReplayTurn>;
  /** Runs `check` every `recheckMs` and whenever the user's access is revoked (`checkNow`), until the close. */
  watch(check: () => void): void;
}

/** One user's streams on this node. */
interface UserStreams {
  open: number;
  /** Replay turns, taken and waited for (`maxReplays`). */
  replays: Turns;
  /** The open streams' access checks. */
  checks: Set<() => void>;
  /** Checked at once within the last second (`checkNow`), and whether asked again meanwhile. */
  quiet: NodeJS.Timeout | undefined;
  again: boolean;
}

/** A revocation's checks of one user's streams (or everyone's) run at most this often (ms). */
const checkAtMostEveryMs = 1_000;

export class StreamUsers {
  readonly #users = new Map<string, UserStreams>();
  readonly #limits: () => StreamUserLimits;
  /** Every user's streams were checked at once within the last second (a revocation naming no user). */
  #quietAll: NodeJS.Timeout | undefined;
  #againAll = false;
  /** Ends the waits for a turn when the server closes. */
  readonly #closing = new AbortController();

  constructor(limits: () => StreamUserLimits) {
    this.#limits = limits;
  }

  /** Users with at least one stream (open, or waiting) on this node. */
  get size(): number {
    return this.#users.size;
  }

  /** Whether `userId` has a record here: a stream open or waiting. */
  has(userId: string): boolean {
    return this.#users.has(userId);
  }

  /**
   * Counts a stream of `userId` until `res` closes; 429 `rate_limited` when the user has `maxStreams`
   * open. A response already closed (the client left while the request was read) is not counted.
   */
  admit(userId: string, res: ServerResponse): UserStream {
    const { maxStreams } = this.#limits();
    const found = this.#users.get(userId);
    if ((found?.open ?? 0) >= maxStreams)
      throw new AppError("rate_limited", `At most ${maxStreams} streams may be open at once`, {
        headers: { "retry-after": "10" },
      });
    if (res.destroyed) return { closed: true, replayTurn: async () => "left", watch: () => undefined };
    const user: UserStreams = found ?? {
      open: 0,
      replays: new Turns(
        () => this.#limits().maxReplays,
        () => this.#forgetIfIdle(userId, user),
      ),
      checks: new Set(),
      quiet: undefined,
      again: false,
    };
    this.#users.set(userId, user);
    user.open++;
    let closed = false;
    const endings: Array<() => void> = [];
    res.once("close", () => {
      closed = true;
      user.open--;
      for (const end of endings) end();
      this.#forgetIfIdle(userId, user);
    });
    return {
      get closed() {
        return closed;
      },
      replayTurn: async () => {
        const turn = closed ? "left" : await this.#replayTurn(user, res);
        if (typeof turn === "object") endings.push(turn.release);
        return turn;
      },
      watch: (check) => {
        if (closed) return;
        user.checks.add(check);
        const every = setInterval(check, this.#limits().recheckMs).unref();
        endings.push(() => {
          clearInterval(every);
          user.checks.delete(check);
        });
      },
    };
  }

  /**
   * Runs the access checks of `userId`'s streams at once (undefined: every user's), for a revocation: at
   * most once a second for each (or for everyone), however many sessions the user ends in that second;
   * one asked for meanwhile runs when the second is over.
   */
  checkNow(userId?: string): void {
    if (userId === undefined) {
      if (this.#quietAll) {
        this.#againAll = true;
        return;
      }
      for (const user of [...this.#users.values()]) for (const check of [...user.checks]) check();
      this.#quietAll = setTimeout(() => {
        this.#quietAll = undefined;
        if (this.#againAll) {
          this.#againAll = false;
          this.checkNow();
        }
      }, checkAtMostEveryMs).unref();
      return;
    }
    const user = this.#users.get(userId);
    // No stream of the user here: nothing to check.
    if (!user) return;
    if (user.quiet) {
      user.again = true;
      return;
    }
    for (const check of [...user.checks]) check();
    user.quiet = setTimeout(() => {
      user.quiet = undefined;
      if (user.again && this.#users.get(userId) === user) {
        user.again = false;
        this.checkNow(userId);
      }
    }, checkAtMostEveryMs).unref();
  }

  /** The server closes: streams waiting for a turn are told to come back (another node may take them). */
  close(): void {
    this.#closing.abort();
    if (this.#quietAll) clearTimeout(this.#quietAll);
    for (const user of this.#users.values()) if (user.quiet) clearTimeout(user.quiet);
  }

  async #replayTurn(user: UserStreams, res: ServerResponse): Promise<ReplayTurn> {
    // Holds no page and no live events while it waits: the stream opens on the hub once its turn comes.
    const left = new AbortController();
    const leave = () => left.abort();
    res.once("close", leave);
    try {
      const release = await user.replays.take(
        this.#limits().replayWaitMs,
        AbortSignal.any([left.signal, this.#closing.signal]),
      );
      if (release) return { release };
      return left.signal.aborted ? "left" : "busy";
    } finally {
      res.off("close", leave);
    }
  }

  /** Drops the user's record once nothing of theirs is open, replaying, waiting or checked. */
  #forgetIfIdle(userId: string, user: UserStreams): void {
    if (user.open > 0 || !user.replays.idle || user.checks.size > 0) return;
    if (user.quiet) clearTimeout(user.quiet);
    if (this.#users.get(userId) === user) this.#users.delete(userId);
  }
}
