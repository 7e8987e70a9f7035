/** What every bench part is given: the run's settings, a logger, and cleanups that always run. */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { FountProcess, HelperChild } from "../lib/processes.ts";

/** Schemas made by this process, so that two made in the same millisecond differ. */
let schemas = 0;

/** A new, empty schema for one bench server on PostgreSQL. */
export async function createSchema(url: string): Promise<string> {
  const schema = `fount_bench_${process.pid}_${Date.now().toString(36)}_${(schemas++).toString(36)}`;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA "${schema}"`);
  } finally {
    await client.end();
  }
  return schema;
}

export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** `url` with the connection's search path set to `schema`: a server's DATABASE_URL. */
export function urlWithSchema(url: string, schema: string): string {
  const u = new URL(url);
  u.searchParams.set("options", `-c search_path=${schema}`);
  return u.toString();
}

export interface BenchSettings {
  /** Seconds of each measured load run. */
  durationS: number;
  /** Seconds of each warm-up run. */
  warmupS: number;
  /** Connections of the HTTP load runs. */
  connections: number;
  /** Offered emits per second in the webhook part. */
  webhookRate: number;
  sseClients: number;
  /** Events per second in the SSE part. */
  sseRate: number;
  /** Tenants of the many-tenants run (one source each, one hit per second each). */
  tenants: number;
  /** Where the Fount servers write `--cpu-prof` profiles; unset means no profiling. */
  cpuProfDir?: string;
  /** The servers' store: a fresh SQLite file, or a fresh schema of this PostgreSQL URL. */
  store: BenchStore;
  /** The PostgreSQL of parts that compare both stores (`cluster`), whatever `store` is. */
  pgUrl: string;
  /** history-retention: the large window's size (default 100,000) and the events pruned (1,000,000). */
  retentionEvents?: number | undefined;
  pruneEvents?: number | undefined;
  /**
   * history-retention: the windows' alternating slices in seconds (default 2). SQLite's search index
   * does a window's indexing up to a second after its emits, so with short slices part of each slice's
   * work lands in the other window's next slice.
   */
  retentionSliceS?: number | undefined;
}

/** Where a bench server keeps its data. */
export type BenchStore = { driver: "sqlite" } | { driver: "postgres"; url: string };

/** The component every part deploys: an HTTP source that emits the request body, stamped. */
export function emitterCode(name: string, stamp: boolean): string {
  // `emitted_at` is taken inside run, so emit-to-receipt latency starts when the component emits.
  const emit = stamp ? "{ ...event.body, emitted_at: Date.now() }" : "event.body";
  return `export default {
  name: ${JSON.stringify(name)},
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(event) {
    this.$emit(${emit});
  },
};
`;
}

/** A ~200-byte JSON body, like a small webhook payload. */
export const payload = {
  type: "order.created",
  id: "ord_000000123456",
  amount: 4999,
  currency: "usd",
  customer: { id: "cus_9f8e7d6c5b4a", email: "jane.doe@example.com", name: "Jane Doe" },
  items: [{ sku: "SKU-0001", qty: 2, price: 1999 }],
  note: "bench payload",
};
export const payloadText = JSON.stringify(payload);

export class PartContext {
  readonly settings: BenchSettings;
  readonly #cleanups: Array<() => Promise<void>> = [];
  readonly #log: (message: string) => void;

  constructor(settings: BenchSettings, log: (message: string) => void) {
    this.settings = settings;
    this.#log = log;
  }

  log(message: string): void {
    this.#log(message);
  }

  /**
   * A Fount server that is stopped when the part ends, whatever happens; on the run's store by default,
   * with `env` added to its environment.
   */
  async fount(
    store: BenchStore = this.settings.store,
    extraEnv: Record<string, string> = {},
    cgroup?: string,
  ): Promise<FountProcess> {
    const env: Record<string, string> = { ...extraEnv };
    if (store.driver === "postgres") env.DATABASE_URL = await this.#schemaUrl(store.url);
    return this.#start(env, cgroup);
  }

  /**
   * `nodes` Fount servers on one fresh PostgreSQL schema, as docs/operations.md says nodes share a
   * store: the same DATABASE_URL and FOUNT_ENCRYPTION_KEY, each its own data dir and FOUNT_NODE_ID.
   * The first creates the schema and the admin before the others join.
   */
  async cluster(nodes: number, pgUrl: string, cgroups: string[] = []): Promise<FountProcess[]> {
    const shared = await this.clusterEnv(pgUrl);
    const first = await this.node(shared, 1, cgroups[0]);
    const others = await Promise.all(
      Array.from({ length: nodes - 1 }, (_, i) => this.node(shared, i + 2, cgroups[i + 1])),
    );
    return [first, ...others];
  }

  /** What the nodes of one cluster share: a fresh schema and one FOUNT_ENCRYPTION_KEY. */
  async clusterEnv(pgUrl: string): Promise<Record<string, string>> {
    return {
      DATABASE_URL: await this.#schemaUrl(pgUrl),
      FOUNT_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
    };
  }

  /** Node `n` (`bench-n<n>`) of the cluster sharing `shared`, in `cgroup` when given. */
  node(shared: Record<string, string>, n: number, cgroup?: string): Promise<FountProcess> {
    return this.#start({ ...shared, FOUNT_NODE_ID: `bench-n${n}` }, cgroup);
  }

  /** A fresh schema, dropped when the part ends, as a DATABASE_URL. */
  async #schemaUrl(pgUrl: string): Promise<string> {
    const schema = await createSchema(pgUrl);
    this.#cleanups.push(() => dropSchema(pgUrl, schema));
    return urlWithSchema(pgUrl, schema);
  }

  async #start(env: Record<string, string>, cgroup?: string): Promise<FountProcess> {
    const dir = this.settings.cpuProfDir;
    const server = await FountProcess.start({
      nodeArgs: dir ? ["--cpu-prof", `--cpu-prof-dir=${dir}`] : [],
      env,
      cgroup,
    });
    this.#cleanups.push(() => server.stop());
    return server;
  }

  /** Runs `cleanup` when the part ends (before what was set up earlier is cleaned up). */
  defer(cleanup: () => Promise<void> | void): void {
    this.#cleanups.push(async () => cleanup());
  }

  async helper(script: string, args: string[] = []): Promise<HelperChild> {
    const child = await HelperChild.start(script, args);
    this.#cleanups.push(() => child.stop());
    return child;
  }

  /** Runs the cleanups, last first; never throws. */
  async cleanup(): Promise<void> {
    while (this.#cleanups.length > 0) {
      try {
        await this.#cleanups.pop()!();
      } catch (err) {
        this.#log(`cleanup failed: ${(err as Error).message}`);
      }
    }
  }
}
