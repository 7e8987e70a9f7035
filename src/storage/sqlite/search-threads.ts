/**
 * The SQLite store's search threads (search-worker.ts): a few worker threads, started on first use,
 * each running one read at a time (an event search, a deliveries list) on a read-only connection of its
 * own. A read waits for a free thread before it takes the store's lock, and holds the lock only while
 * the writes it must see are made (held outbox writes, the search index's backlog) and the thread takes
 * its snapshot; the query itself (1.5 s for a word every one of a million events holds, counted) runs
 * while the server goes on storing and answering.
 */
import { Worker } from "node:worker_threads";
import { StoreUnavailableError } from "../health.ts";
import type {
  SearchQuery,
  SearchReply,
  SearchRequest,
  SearchResults,
  SearchWorkerData,
} from "./search-worker.ts";

type Result = SearchResults[SearchQuery["kind"]];

/** Searches run side by side at most; more wait for a thread. One per core of a small server. */
const defaultThreads = 2;

/**
 * A read that runs longer on its thread is stopped, and answers 503 `store_unavailable`: as
 * PostgreSQL's statement timeout bounds a search there, so that no search holds a thread, which every
 * account shares, without end (a million events' worst search takes 1.5 to 2 s).
 */
const defaultReadTimeoutMs = 30_000;

/**
 * A thread with no read for this long is stopped: each holds about 24 MB of the server's memory (its
 * isolate, its modules and its connection's cache), and the next read after a quiet spell waits for a
 * new one's start (150 to 450 ms here) instead.
 */
const defaultIdleMs = 60_000;

interface Pending {
  begun: (err?: Error) => void;
  done: (result: Result | Error) => void;
}

class SearchThread {
  readonly worker: Worker;
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  /** Why the thread stopped, once it did: a read started after that fails with it at once. */
  failure: Error | undefined;
  get failed(): boolean {
    return this.failure !== undefined;
  }
  /** Stopped for being idle: its exit fails nothing. */
  stopping = false;
  /** Fails what the thread runs with `err`, and stops it (a read past its time). */
  readonly abort: (err: Error) => void;
  /**
   * Resolves once the thread has loaded its modules and opened the store: a read waits for it before it
   * takes the store's lock, which a thread's start (about 150 ms) would otherwise hold.
   */
  readonly ready: Promise<void>;

  constructor(data: SearchWorkerData, onFail: (thread: SearchThread) => void) {
    this.worker = new Worker(new URL("./search-worker.ts", import.meta.url), { workerData: data });
    this.worker.unref();
    let ready!: (err?: Error) => void;
    this.ready = new Promise<void>((resolve, reject) => {
      ready = (err) => (err ? reject(err) : resolve());
    });
    // Awaited by the read that started the thread; a later failure rejects nothing else.
    this.ready.catch(() => undefined);
    this.worker.on("message", (reply: SearchReply) => {
      if ("ready" in reply) return ready();
      const pending = this.#pending.get(reply.id);
      if (!pending) return;
      if ("begun" in reply) return pending.begun();
      this.#pending.delete(reply.id);
      const outcome = "error" in reply ? new Error(`A search thread: ${reply.error}`) : reply.result;
      pending.begun(outcome instanceof Error ? outcome : undefined);
      pending.done(outcome);
    });
    // A thread that dies of an error emits "error", then "exit": it fails once, and is replaced once.
    const fail = (err: Error) => {
      if (this.failure) return;
      this.failure = err;
      ready(err);
      for (const p of this.#pending.values()) {
        p.begun(err);
        p.done(err);
      }
      this.#pending.clear();
      onFail(this);
    };
    this.abort = (err) => {
      fail(err);
      void this.worker.terminate();
    };
    this.worker.on("error", (err) =>
      fail(new StoreUnavailableError("a search thread stopped", { cause: err })),
    );
    this.worker.on("exit", (code) => fail(new StoreUnavailableError(`a search thread stopped (${code})`)));
  }

  /**
   * Starts a read: `begun` resolves once its snapshot is taken (or rejects if it could not be), and
   * `result` with what it found.
   */
  start(query: SearchQuery): { begun: Promise<void>; result: Promise<Result> } {
    // Stopped between the read's taking it and its turn at the lock (a crash, the store's close): posted
    // to, it would never answer, and the read would hold the lock, and every store operation, for ever.
    if (this.failure) {
      const failed = Promise.reject(this.failure);
      failed.catch(() => undefined);
      return { begun: failed, result: failed };
    }
    const id = this.#nextId++;
    let begun!: Pending["begun"];
    let done!: Pending["done"];
    const begunP = new Promise<void>((resolve, reject) => {
      let settled = false;
      begun = (err) => {
        if (settled) return;
        settled = true;
        if (err) reject(err);
        else resolve();
      };
    });
    const result = new Promise<Result>((resolve, reject) => {
      done = (outcome) => (outcome instanceof Error ? reject(outcome) : resolve(outcome));
    });
    // The caller awaits `begun` first; a failed search rejects both, and `result` is awaited only after.
    result.catch(() => undefined);
    this.#pending.set(id, { begun, done });
    this.worker.postMessage({ id, ...query } satisfies SearchRequest);
    return { begun: begunP, result };
  }
}

export class SearchThreads {
  readonly #data: SearchWorkerData;
  readonly #max: number;
  readonly #idle: SearchThread[] = [];
  readonly #all = new Set<SearchThread>();
  readonly #waiting: Array<{ resolve: (thread: SearchThread) => void; reject: (err: Error) => void }> = [];
  /** The stop timer of each idle thread. */
  readonly #idleTimers = new Map<SearchThread, NodeJS.Timeout>();
  readonly #idleMs: number;
  readonly #readTimeoutMs: number;
  #closed = false;

  constructor(
    storeFile: string,
    indexFile: string,
    options: {
      threads?: number | undefined;
      idleMs?: number | undefined;
      readTimeoutMs?: number | undefined;
    } = {},
  ) {
    this.#data = { storeFile, indexFile };
    this.#max = Math.max(1, options.threads ?? defaultThreads);
    this.#idleMs = options.idleMs ?? defaultIdleMs;
    this.#readTimeoutMs = options.readTimeoutMs ?? defaultReadTimeoutMs;
  }

  /** Threads running now, busy or idle. */
  get running(): number {
    return this.#all.size;
  }

  /**
   * Runs a read on a free thread. `snapshot(begin)` is called once a thread is free: it must call
   * `begin` (which resolves once the thread took its snapshot) while whatever the read should see is
   * committed, typically under the store's lock, and let go of that afterwards.
   */
  async read<K extends SearchQuery["kind"]>(
    query: Extract<SearchQuery, { kind: K }>,
    snapshot: (begin: () => Promise<void>) => Promise<void>,
  ): Promise<SearchResults[K]> {
    const thread = await this.#acquire();
    try {
      let result: Promise<Result> | undefined;
      await snapshot(async () => {
        const started = thread.start(query);
        result = started.result;
        await started.begun;
      });
      if (!result) throw new Error("A search thread's read was never begun");
      const limit = this.#readTimeoutMs;
      const timer = setTimeout(
        () => thread.abort(new StoreUnavailableError(`the search took longer than ${limit / 1000} s`)),
        limit,
      );
      try {
        return (await result) as SearchResults[K];
      } finally {
        clearTimeout(timer);
      }
    } finally {
      this.#release(thread);
    }
  }

  async #acquire(): Promise<SearchThread> {
    if (this.#closed) throw new StoreUnavailableError("the store is closed");
    const idle = this.#idle.pop();
    if (idle) {
      clearTimeout(this.#idleTimers.get(idle));
      this.#idleTimers.delete(idle);
      return idle;
    }
    if (this.#all.size < this.#max) {
      const thread = this.#spawn();
      await thread.ready;
      return thread;
    }
    return new Promise((resolve, reject) => this.#waiting.push({ resolve, reject }));
  }

  #release(thread: SearchThread): void {
    if (thread.failed || this.#closed) return;
    const next = this.#waiting.shift();
    if (next) {
      next.resolve(thread);
      return;
    }
    this.#idle.push(thread);
    const timer = setTimeout(() => {
      this.#idleTimers.delete(thread);
      const at = this.#idle.indexOf(thread);
      if (at < 0) return;
      this.#idle.splice(at, 1);
      this.#all.delete(thread);
      // Stopped on purpose: its exit is not a failure to replace.
      thread.stopping = true;
      void thread.worker.terminate();
    }, this.#idleMs);
    timer.unref();
    this.#idleTimers.set(thread, timer);
  }

  /** A thread that stopped is replaced on the next search; one waiting for a thread gets a new one. */
  #forget(thread: SearchThread): void {
    if (thread.stopping) return;
    this.#all.delete(thread);
    const at = this.#idle.indexOf(thread);
    if (at >= 0) this.#idle.splice(at, 1);
    const next = this.#waiting.shift();
    if (next && !this.#closed) {
      const fresh = this.#spawn();
      fresh.ready.then(() => next.resolve(fresh), next.reject);
    }
  }

  /** Starts a thread, counted among the running ones until it stops. */
  #spawn(): SearchThread {
    const thread = new SearchThread(this.#data, (t) => this.#forget(t));
    this.#all.add(thread);
    return thread;
  }

  async close(): Promise<void> {
    this.#closed = true;
    const threads = [...this.#all];
    this.#all.clear();
    this.#idle.length = 0;
    for (const timer of this.#idleTimers.values()) clearTimeout(timer);
    this.#idleTimers.clear();
    for (const w of this.#waiting.splice(0)) w.reject(new StoreUnavailableError("the store is closed"));
    await Promise.all(threads.map((t) => t.worker.terminate()));
  }
}
