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
import { principal } from "./conventions.ts";

/** Searches of one account running at once, by the store's driver. */
export const maxSearchesPerAccount = { sqlite: 1, postgres: 4 } as const;

/** How long a search waits for one of its account's turns before its 429. */
export const searchTurnWaitMs = 10_000;

/** Each account's turns taken, and the searches waiting for one, first come first served. */
const accounts = new Map<string, { running: number; waiting: Array<() => void> }>();

/**
 * Takes one of the caller's turns, waiting up to `searchTurnWaitMs` for one (a console's next search
 * while its last one still runs), or throws 429; resolves with the release (once, however often called).
 */
export async function takeSearchTurn(request: FastifyRequest): Promise<() => void> {
  const id = principal(request).user.id;
  const max = maxSearchesPerAccount[request.server.fount.store.driver];
  let account = accounts.get(id);
  if (!account) {
    account = { running: 0, waiting: [] };
    accounts.set(id, account);
  }
  const turns = account;
  if (turns.running >= max) {
    const turn = await new Promise<boolean>((resolve) => {
      const take = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        turns.waiting.splice(turns.waiting.indexOf(take), 1);
        resolve(false);
      }, searchTurnWaitMs);
      turns.waiting.push(take);
    });
    if (!turn)
      throw new AppError(
        "rate_limited",
        `At most ${max} ${max === 1 ? "search" : "searches"} of one account run at once on this server, and this one waited ${searchTurnWaitMs / 1000} s for its turn; retry when one has answered`,
      );
  } else turns.running++;
  let released = false;
  return () => {
    if (released) return;
    released = true;
    // The turn passes to the next waiting search, or is given back.
    const next = turns.waiting.shift();
    if (next) return next();
    turns.running--;
    if (turns.running === 0) accounts.delete(id);
  };
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
