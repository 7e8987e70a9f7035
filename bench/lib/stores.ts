/**
 * Which store each part of `npm run bench` runs on: parts marked `eachStore` run once per store of the
 * run (their figures then named with the store), the others once, on the run's first store.
 */
import type { BenchStore } from "../parts/context.ts";

/** The store names `--store` takes; `both` is the default. */
export function benchStores(choice: string, pgUrl: string): BenchStore[] | undefined {
  const sqlite: BenchStore = { driver: "sqlite" };
  const postgres: BenchStore = { driver: "postgres", url: pgUrl };
  const choices: Record<string, BenchStore[]> = {
    sqlite: [sqlite],
    postgres: [postgres],
    both: [sqlite, postgres],
  };
  return Object.hasOwn(choices, choice) ? choices[choice] : undefined;
}

/** How a store is named in the figures of a part run on several. */
export const storeName = { sqlite: "SQLite", postgres: "PostgreSQL" } as const;

/** One part on one store; `label`, when several stores run it, names the store in its figures. */
export interface PartRun {
  name: string;
  store: BenchStore;
  label?: string;
}

/** The runs of the selected parts, in order, each `eachStore` part once per store. */
export function partRuns(
  parts: Record<string, { eachStore?: boolean }>,
  selected: string[],
  stores: BenchStore[],
): PartRun[] {
  return selected.flatMap((name) =>
    parts[name]?.eachStore && stores.length > 1
      ? stores.map((store) => ({ name, store, label: storeName[store.driver] }))
      : [{ name, store: stores[0]! }],
  );
}
