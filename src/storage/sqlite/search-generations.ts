/**
 * The event search's FTS5 index in generations (docs/architecture.md, "The search index in
 * generations"), written only by the store's worker thread (store-worker.ts).
 *
 * Deleting a row from an FTS5 table costs about as much as adding it (it tokenizes the old text again to
 * write its delete markers: 74 µs against 110 µs a ~250-byte event here), and a window larger than 100
 * deletes one old event for every new one, so a window of 100,000 paid both for every event. The index is
 * therefore kept in tables of about `rowsPerGeneration` entries each, by rowid range (new rows take the
 * rowid past the greatest, so a generation's range is a stretch of time): an event deleted from the store
 * is not deleted from the index at all (a search joins each match to its row, so a gone row is never
 * found), and a generation whose rows are all gone is dropped whole, a table at a time. A generation
 * that stopped losing rows with fewer than half of its entries still having one (a window of 100,
 * rewritten in place, keeps its first rowids for ever) has those rows moved into the newest generation
 * and is then dropped, so the index holds at most about twice the entries of the events kept, and
 * moving a row costs no more than deleting one did; one still losing rows is being pruned, and waited
 * for. A generation that is no longer the newest has its FTS5 segments merged into one, once.
 *
 * Where each rowid's entry is, live or left behind by a deleted row: its range's generation (the one with
 * the greatest `lo` at most the rowid; the first generation takes every rowid below its own), unless
 * `text_moved` names another. The newest generation takes new rowids and is never moved from; once it
 * holds `rowsPerGeneration` entries a new one begins past its greatest rowid. SQLite gives a new row the
 * rowid past the greatest one left (`events` has no AUTOINCREMENT), so a deleted row's rowid can come
 * back once every row after it is gone too; its new text then replaces the old entry where it is.
 */
import type { DatabaseSync, StatementSync } from "node:sqlite";
import { indexedChars } from "../event-search.ts";
import { inWriteTransaction } from "./sql.ts";

/**
 * The FTS5 options of every generation's table. `detail = none` keeps only which rowids hold each
 * trigram, not where in the text: an insert costs about 40 % less CPU, the index a quarter to a half
 * fewer bytes, and a search matches trigrams covering each word, then checks the word against the
 * event's text (event-search.ts). `columnsize = 0`: the text's length is kept for ranking only, which a
 * search does not do. docs/architecture.md, "The index's trigrams without their positions".
 */
const generationOptions = "tokenize = 'trigram', detail = none, columnsize = 0";

/**
 * The index file's layout: a file whose `search_index_of.format` differs (or has none, from before) is
 * made anew when the store opens (search-indexer.ts), every event read again.
 */
export const indexFileFormat = 2;

/** The index file's own tables, made with the file (search-indexer.ts); generations come as needed. */
export const indexFileSchema = `
  CREATE TABLE search_index_of (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    token TEXT NOT NULL,
    format INTEGER NOT NULL
  );
  CREATE TABLE text_generations (
    gen INTEGER PRIMARY KEY,
    lo INTEGER NOT NULL,
    entries INTEGER NOT NULL DEFAULT 0,
    optimized INTEGER NOT NULL DEFAULT 0
  );
  CREATE TABLE text_moved (event_rowid INTEGER PRIMARY KEY, gen INTEGER NOT NULL);
  CREATE INDEX text_moved_gen ON text_moved (gen);`;

/** The FTS5 table of a generation. */
export function generationTable(gen: number): string {
  return `events_text_${gen}`;
}

/** Rowids a compaction moves per transaction, so that indexing batches and searches get their turns. */
const moveChunk = 1000;

/** The text an entry holds: the first `indexedChars` of the event's JSON (SQLite counts characters). */
const indexedText = (column: string) => `substr(${column}, 1, ${indexedChars})`;

/**
 * Characters a batch reads at most (the row that reaches it is its last, and it takes one row at least),
 * beside its rows: a batch of 1,000 events of 64 KiB took 5 s, in which the worker neither checkpointed
 * the store's WAL nor took a search's batch. About 160 ms at 80 ms a MiB.
 */
export const batchChars = 2 * 1024 * 1024;

/**
 * Passes a generation must keep all its rows before its segments are merged (a minute at the default
 * 10 s): one filled and then pruned soon after (a bulk load cut back, a window about a generation long)
 * goes whole without the merge's 13 µs an entry.
 */
const optimizeAfterPasses = 6;

/** What a batch of the worker's indexed (`indexBatch`), for the server to forget and move the mark. */
export interface IndexedBatch {
  /** The `[rowid, changes]` pairs of the queue it read. */
  done: Array<[number, number]>;
  /** Where the mark (`indexed_to`) may move: every row up to it was read, or is queued. */
  indexedTo: number;
  /** Whether it took as many rows or characters as it was allowed: more may be waiting. */
  full: boolean;
  /** Every queued rowid of its range up to this one was read (a search's sweep goes on from it). */
  queuedThrough: number;
}

/** What a batch may take besides its rows: characters, and the range of queued rowids it reads. */
export interface BatchLimits {
  /** Characters of text at most (`batchChars` by default). */
  chars?: number;
  /** Queued rowids past this one only (a search sweeping the queue; every one by default). */
  queuedAfter?: number;
  /** Queued rowids up to this one only. */
  queuedUpTo?: number;
}

interface QueuedRow {
  r: number;
  c: number;
  /** Null when the row is gone. */
  j: string | null;
}

interface ScannedRow {
  r: number;
  j: string;
}

interface ReadBatch {
  queued: QueuedRow[];
  scanned: ScannedRow[];
  indexedTo: number;
  full: boolean;
  queuedThrough: number;
}

/** The characters a batch may still read; rows are taken until they are spent. */
class CharBudget {
  #left: number;
  constructor(chars: number) {
    this.#left = chars;
  }
  get spent(): boolean {
    return this.#left <= 0;
  }
  /** Rows of `rows` until the budget is spent (the row that spends it included). */
  take<R extends { j: string | null }>(rows: Iterable<R>): R[] {
    const taken: R[] = [];
    if (this.spent) return taken;
    for (const row of rows) {
      taken.push(row);
      this.#left -= row.j?.length ?? 0;
      if (this.spent) break;
    }
    return taken;
  }
}

interface Generation {
  gen: number;
  lo: number;
  entries: number;
  /** `entries` as stored: only a generation whose count changed is written back. */
  saved: number;
  /** Whether its FTS5 segments were merged into one since it stopped being the newest. */
  optimized: number;
}

export class TextGenerations {
  readonly #index: DatabaseSync;
  readonly #rowsPerGeneration: number;
  /** Ascending by `lo` (and by `gen`); read again at the start of every transaction. */
  #gens: Generation[] = [];
  readonly #statements = new Map<string, StatementSync>();
  /**
   * Each generation's live rows at the last pass (one still losing rows is being pruned), and its
   * passes in a row without losing one.
   */
  readonly #seen = new Map<number, { live: number; steadyPasses: number }>();
  readonly #store: DatabaseSync;
  readonly #queued: StatementSync;
  readonly #mark: StatementSync;
  readonly #scan: StatementSync;
  readonly #alive: StatementSync;
  readonly #countRange: StatementSync;
  readonly #readRange: StatementSync;

  constructor(index: DatabaseSync, store: DatabaseSync, rowsPerGeneration: number) {
    this.#index = index;
    this.#rowsPerGeneration = rowsPerGeneration;
    this.#store = store;
    this.#queued = store.prepare(
      `SELECT q.event_rowid AS r, q.changes AS c, ${indexedText("e.event_json")} AS j
         FROM events_text_queue q LEFT JOIN events e ON e.rowid = q.event_rowid
        WHERE q.event_rowid > ? AND q.event_rowid <= ? ORDER BY q.event_rowid LIMIT ?`,
    );
    this.#mark = store.prepare("SELECT indexed_to AS lo, read_to AS hi FROM events_text_mark WHERE id = 1");
    this.#scan = store.prepare(
      `SELECT rowid AS r, ${indexedText("event_json")} AS j FROM events
        WHERE rowid > ? AND rowid <= ? ORDER BY rowid LIMIT ?`,
    );
    this.#alive = store.prepare(`SELECT ${indexedText("event_json")} AS j FROM events WHERE rowid = ?`);
    this.#countRange = store.prepare("SELECT count(*) AS n FROM events WHERE rowid >= ? AND rowid < ?");
    this.#readRange = store.prepare(
      `SELECT rowid AS r, ${indexedText("event_json")} AS j FROM events
        WHERE rowid >= ? AND rowid < ? ORDER BY rowid LIMIT ?`,
    );
  }

  /** A prepared statement on the index file, kept for the next use. */
  #run(sql: string): StatementSync {
    let statement = this.#statements.get(sql);
    if (!statement) {
      statement = this.#index.prepare(sql);
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  /** Reads the generations (another process on the store may have changed them), making the first. */
  #load(): void {
    this.#gens = this.#run(
      "SELECT gen, lo, entries, entries AS saved, optimized FROM text_generations ORDER BY lo",
    ).all() as unknown as Generation[];
    if (this.#gens.length === 0) this.#begin(0, 0);
  }

  #begin(gen: number, lo: number): Generation {
    this.#index.exec(
      `CREATE VIRTUAL TABLE ${generationTable(gen)} USING fts5(event_json, ${generationOptions})`,
    );
    this.#run("INSERT INTO text_generations (gen, lo, entries) VALUES (?, ?, 0)").run(gen, lo);
    const made = { gen, lo, entries: 0, saved: 0, optimized: 0 };
    this.#gens.push(made);
    return made;
  }

  #newest(): Generation {
    return this.#gens[this.#gens.length - 1]!;
  }

  /** The generation whose range holds `rowid`. */
  #rangeOf(rowid: number): number {
    let at = 0;
    let hi = this.#gens.length - 1;
    while (at < hi) {
      const mid = (at + hi + 1) >> 1;
      if (this.#gens[mid]!.lo <= rowid) at = mid;
      else hi = mid - 1;
    }
    return at;
  }

  /** The generation holding `rowid`'s entry (or that will). */
  #home(rowid: number): Generation {
    const newest = this.#newest();
    if (rowid >= newest.lo) return newest;
    const moved = this.#run("SELECT gen FROM text_moved WHERE event_rowid = ?").get(rowid) as
      | { gen: number }
      | undefined;
    if (moved) {
      const gen = this.#gens.find((g) => g.gen === moved.gen);
      if (gen) return gen;
    }
    return this.#gens[this.#rangeOf(rowid)]!;
  }

  /** Removes `rowid`'s entry from `gen`, if it holds one. */
  #remove(gen: Generation, rowid: number): void {
    const removed = this.#run(`DELETE FROM ${generationTable(gen.gen)} WHERE rowid = ?`).run(rowid).changes;
    if (Number(removed) > 0) gen.entries--;
  }

  /** Puts `text` as `rowid`'s entry in `gen`, replacing the one there. */
  #put(gen: Generation, rowid: number, text: string): void {
    this.#remove(gen, rowid);
    this.#run(`INSERT INTO ${generationTable(gen.gen)} (rowid, event_json) VALUES (?, ?)`).run(rowid, text);
    gen.entries++;
  }

  #saveEntries(): void {
    const save = this.#run("UPDATE text_generations SET entries = ? WHERE gen = ?");
    for (const g of this.#gens) {
      if (g.entries !== g.saved) save.run(g.entries, g.gen);
      g.saved = g.entries;
    }
  }

  /**
   * A new generation once the newest is full, beginning past the greatest rowid it holds: not past the
   * row that filled it, since a deleted row's entry may lie past that one (its rowid not yet given
   * again), and each rowid's entry must stay in the generation its range names.
   */
  #beginIfFull(): void {
    const newest = this.#newest();
    if (newest.entries < this.#rowsPerGeneration) return;
    const last = this.#run(
      `SELECT rowid AS r FROM ${generationTable(newest.gen)} ORDER BY rowid DESC LIMIT 1`,
    ).get() as { r: number } | undefined;
    this.#begin(newest.gen + 1, Math.max(newest.lo, (last?.r ?? newest.lo) + 1));
  }

  /**
   * What a batch indexes, read in one snapshot of the store: up to `limit` rows and `chars` characters
   * (`BatchLimits`), queued rowids of its range first, then, once those are all read, rows past the mark
   * (`indexed_to`, migration 022) up to `read_to`. `indexedTo` is where the mark may move: the last row
   * read past it, or `read_to` once every row up to it was read.
   */
  #read(limit: number, limits: BatchLimits): ReadBatch {
    const budget = new CharBudget(limits.chars ?? batchChars);
    const after = limits.queuedAfter ?? Number.MIN_SAFE_INTEGER;
    const upTo = limits.queuedUpTo ?? Number.MAX_SAFE_INTEGER;
    this.#store.exec("BEGIN");
    try {
      const queued = budget.take(this.#queued.iterate(after, upTo, limit) as Iterable<QueuedRow>);
      const { lo, hi } = this.#mark.get() as { lo: number; hi: number };
      // The queue's range not all read (rows or characters spent): nothing past the mark this time.
      if (queued.length >= limit || budget.spent)
        return { queued, scanned: [], indexedTo: lo, full: true, queuedThrough: queued.at(-1)?.r ?? after };
      const room = limit - queued.length;
      const scanned = budget.take(this.#scan.iterate(lo, hi, room) as Iterable<ScannedRow>);
      const full = scanned.length >= room || budget.spent;
      const indexedTo = full ? (scanned.at(-1)?.r ?? lo) : hi;
      return { queued, scanned, indexedTo, full, queuedThrough: upTo };
    } finally {
      this.#store.exec("COMMIT");
    }
  }

  /**
   * Indexes up to `limit` rows, queued rowids first, with their rows' current text; a queued rowid whose
   * row is gone is left as it is (its generation goes whole, or its few live rows move out, in
   * `maintain`). Answers the `[rowid, changes]` pairs of the queue read, for the server to forget, where
   * the mark may move, and whether the batch was full (more may be waiting).
   */
  indexBatch(limit: number, limits: BatchLimits = {}): IndexedBatch {
    // The index file's write lock is taken before the store is read: another process on the store (a
    // `fount admin` command) indexing the same rowids then reads and writes strictly after or before this
    // batch, so the text the index ends with is the last one read.
    return inWriteTransaction(this.#index, () => {
      this.#load();
      const { queued, scanned, indexedTo, full, queuedThrough } = this.#read(limit, limits);
      // In rowid order, so that the newest generation fills and the next begins as it would row by row.
      const rows = [...queued, ...scanned].sort((a, b) => a.r - b.r);
      for (const [at, { r, j }] of rows.entries()) {
        // Queued and past the mark both (rewritten or given again before it was read): read once, put once.
        if (j === null || rows[at + 1]?.r === r) continue;
        const home = this.#home(r);
        this.#put(home, r, j);
        if (home === this.#newest()) this.#beginIfFull();
      }
      this.#saveEntries();
      return { done: queued.map((row) => [row.r, row.c]), indexedTo, full, queuedThrough };
    });
  }

  /** The bounds of the rowid range of the generation at `at`. */
  #rangeBounds(at: number): { lo: number; hi: number } {
    return {
      lo: at === 0 ? Number.MIN_SAFE_INTEGER : this.#gens[at]!.lo,
      hi: at + 1 < this.#gens.length ? this.#gens[at + 1]!.lo : Number.MAX_SAFE_INTEGER,
    };
  }

  /**
   * How many of the rowids whose entries the generation at `at` holds still have a row: those of its
   * range but for the live ones moved away, and the live ones moved in. A move is kept after its row is
   * gone, for as long as the generation holding its entry: the store may give a gone row's rowid to a
   * new row (a rowid past every remaining one), whose indexing must replace that entry where it is.
   */
  #liveCount(at: number): {
    count: number;
    movedAway: Set<number>;
    movedIn: Array<{ r: number; j: string }>;
  } {
    const gen = this.#gens[at]!;
    const { lo, hi } = this.#rangeBounds(at);
    const textOf = (r: number) => (this.#alive.get(r) as { j: string } | undefined)?.j;
    const away = this.#run(
      "SELECT event_rowid AS r FROM text_moved WHERE event_rowid >= ? AND event_rowid < ? AND gen != ?",
    ).all(lo, hi, gen.gen) as Array<{ r: number }>;
    const movedAway = new Set(away.map((m) => m.r).filter((r) => textOf(r) !== undefined));
    const into = this.#run("SELECT event_rowid AS r FROM text_moved WHERE gen = ?").all(gen.gen) as Array<{
      r: number;
    }>;
    const movedIn = into.flatMap(({ r }) => {
      const j = r < lo || r >= hi ? textOf(r) : undefined;
      return j === undefined ? [] : [{ r, j }];
    });
    const inRange = (
      this.#countRange.get(lo, hi) as {
        n: number;
      }
    ).n;
    return { count: inRange - movedAway.size + movedIn.length, movedAway, movedIn };
  }

  /**
   * Drops each generation but the newest whose rows are all gone. Of one that lost no rows since the last
   * pass (one still losing them is being pruned, and will most likely go whole): moves the rows still
   * there out when fewer than half of its entries have one (at most `moveChunk` a transaction), else,
   * once it has lost none for `optimizeAfterPasses`, merges its FTS5 segments into one (`optimize`: a
   * search then reads each trigram's list from one segment of each generation, not from many small
   * ones; about 13 µs an entry here). Runs on the worker's timer.
   */
  maintain(): void {
    let at = 0;
    for (;;) {
      const done = inWriteTransaction(this.#index, () => {
        this.#load();
        if (at >= this.#gens.length - 1) return true;
        const gen = this.#gens[at]!;
        const { count, movedAway, movedIn } = this.#liveCount(at);
        const last = this.#seen.get(gen.gen);
        const steady = last?.live === count;
        const passes = steady ? last.steadyPasses + 1 : 0;
        this.#seen.set(gen.gen, { live: count, steadyPasses: passes });
        if (count === 0) {
          this.#drop(at);
        } else if (steady && count * 2 < gen.entries) {
          // The rows still here, a chunk of them: moved into the newest generation.
          const { lo, hi } = this.#rangeBounds(at);
          // A batch's characters at most too: a chunk of 1,000 events of 64 KiB held the worker 5 s.
          const moved = new CharBudget(batchChars).take(this.#movable(lo, hi, movedAway, movedIn));
          const newest = this.#newest();
          for (const { r, j } of moved) {
            this.#remove(gen, r);
            this.#put(newest, r, j);
            this.#run("INSERT OR REPLACE INTO text_moved (event_rowid, gen) VALUES (?, ?)").run(
              r,
              newest.gen,
            );
          }
          // The same generation again, still steady but for the rows moved: what is left of it, if
          // anything, or dropped once empty.
          this.#seen.set(gen.gen, { live: count - moved.length, steadyPasses: passes });
          this.#beginIfFull();
        } else if (passes >= optimizeAfterPasses && !gen.optimized) {
          const table = generationTable(gen.gen);
          this.#index.exec(`INSERT INTO ${table} (${table}) VALUES ('optimize')`);
          this.#run("UPDATE text_generations SET optimized = 1 WHERE gen = ?").run(gen.gen);
          gen.optimized = 1;
          at++;
        } else {
          at++;
        }
        this.#saveEntries();
        return false;
      });
      if (done) return;
    }
  }

  /**
   * The rows a compaction moves out of a generation, `moveChunk` at most: those of its range still there
   * (but for those moved away), then those moved into it. Read as they are taken.
   */
  *#movable(lo: number, hi: number, movedAway: Set<number>, movedIn: ScannedRow[]): Generator<ScannedRow> {
    let n = 0;
    for (const row of this.#readRange.iterate(lo, hi, moveChunk + movedAway.size) as Iterable<ScannedRow>) {
      if (movedAway.has(row.r)) continue;
      yield row;
      if (++n >= moveChunk) return;
    }
    for (const row of movedIn) {
      yield row;
      if (++n >= moveChunk) return;
    }
  }

  /** Drops a generation and its table; its range falls to the generation before it (none of its rows live). */
  #drop(at: number): void {
    const gen = this.#gens[at]!;
    this.#index.exec(`DROP TABLE ${generationTable(gen.gen)}`);
    this.#run("DELETE FROM text_generations WHERE gen = ?").run(gen.gen);
    this.#run("DELETE FROM text_moved WHERE gen = ?").run(gen.gen);
    this.#gens.splice(at, 1);
    this.#seen.delete(gen.gen);
    // Statements on the dropped table are of no more use.
    for (const sql of [...this.#statements.keys()]) {
      if (sql.includes(`${generationTable(gen.gen)} `)) this.#statements.delete(sql);
    }
  }
}
