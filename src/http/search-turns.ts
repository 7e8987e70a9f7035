/**
 * How many event searches (a page with `q` or `where`, a search across sources, an export, a bulk
 * replay's reading) one account runs at once on this node; the rest wait their turn, then answer 429.
 * A search is priced by
 * the time it holds the store, not by requests: on SQLite two search threads serve every account, and
 * one account's dozen costly searches in flight held another's 110 ms search for 11.6 s (a review). One
 * at a time there, so that an account never holds both threads; on PostgreSQL, whose backends run
 * searches beside each other within a statement timeout, a few. Counted per node, in memory.
 */
import type { FastifyRequest } from "fastify";
import { AppError } from "../errors.ts";
import { type Release, TurnsByKey } from "../turns.ts";
import { principal } from "./conventions.ts";

/** Searches of one account running at once, by the store's driver. */
export const maxSearchesPerAccount = { sqlite: 1, postgres: 4 } as const;

/** How long a search waits for one of its account's turns before its 429. */
export const searchTurnWaitMs = 10_000;

/** Each account's turns, by the store's driver. */
const accounts = {
  sqlite: new TurnsByKey(maxSearchesPerAccount.sqlite),
  postgres: new TurnsByKey(maxSearchesPerAccount.postgres),
};

/**
 * Takes one of the caller's turns, waiting up to `searchTurnWaitMs` for one (a console's next search
 * while its last one still runs), or throws 429; resolves with the release (once, however often called).
 */
export async function takeSearchTurn(request: FastifyRequest): Promise<Release> {
  const id = principal(request).user.id;
  const driver = request.server.fount.store.driver;
  const max = maxSearchesPerAccount[driver];
  const release = await accounts[driver].take(id, searchTurnWaitMs);
  if (release) return release;
  throw new AppError(
    "rate_limited",
    `At most ${max} ${max === 1 ? "search" : "searches"} of one account run at once on this server, and this one waited ${searchTurnWaitMs / 1000} s for its turn; retry when one has answered`,
  );
}

/** Runs `search` in one of the caller's turns (`takeSearchTurn`). */
export async function inSearchTurn<T>(request: FastifyRequest, search: () => Promise<T>): Promise<T> {
  const release = await takeSearchTurn(request);
  try {
    return await search();
  } finally {
    release();
  }
}
