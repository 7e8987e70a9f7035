/**
 * Messages between the executor pool (parent) and an executor process (child), sent over the
 * `serialization: "json"` IPC channel. Inside the child, runner.ts relays them to and from each
 * source's realm (a worker thread running realm.ts) and stamps what a realm says with its source.
 * Type-only: every side imports it with `import type`, so the child reads no project file outside
 * its own folder.
 */
import type { SerializedError } from "../../errors.ts";
import type {
  ComponentApiRequest,
  ComponentApiResponse,
  ComponentMeta,
  DynamicPropRef,
  HttpResponse,
  InvocationKind,
  InvokeResult,
  PropValues,
} from "../types.ts";
import type { EgressRules } from "./guards/egress-guard.ts";

/** Limits and paths the parent hands a child as its only argv entry (its environment is empty). */
export interface ChildInit {
  scratchDir: string;
  maxEmitBytes: number;
  maxEmitsPerInvocation: number;
  /** JSON bytes of all the emits of one invocation (events and meta); the emit that crosses it fails the run. */
  maxRunEmitBytes: number;
  maxLogsPerInvocation: number;
  maxLogEntryChars: number;
  /** Where component code may connect (guards/egress-guard.ts); absent: anywhere. */
  egress?: EgressRules;
  /**
   * Requests to https://api.pipedream.com are answered by this server's API over IPC
   * (realm/pipedream-api.ts), with bodies cut at `bodyLimit` + 1 bytes; absent: they go to the network.
   */
  pipedreamApi?: { bodyLimit: number };

  /** Heap cap of each realm (worker `resourceLimits.maxOldGenerationSizeMb`). */
  memoryMb: number;
  /** Young-generation cap of each realm (`resourceLimits.maxYoungGenerationSizeMb`); absent: V8's default. */
  realmYoungMb?: number;
  /**
   * A realm whose code keeps its thread busy this long while none of its invocations runs (a loop
   * in a timer left behind) is stopped; the time it used is charged either way.
   */
  lateWorkLimitMs: number;
  /**
   * Realms the process runs for sources at most; past it, a source shares a realm with others of
   * the owner (docs/isolation.md). Absent: 16.
   */
  realmsPerOwner?: number;
  /**
   * Started as a spare, before its owner was known (executors/spares.ts): its spare realm waits for
   * the first message however long it takes, instead of being stopped after a while.
   */
  spare?: boolean;
  /** The owner runs no source (the registry's): no realm is started ahead, only one per inspection. */
  spareRealms?: false;
}

/** What the invocations of one batch share; deduplicated per batch so props cross the pipe once. */
export interface BatchConfig {
  entryFile: string;
  props: PropValues;
  dbProps: string[];
  httpProps: Array<{ name: string; endpoint: string; customResponse: boolean }>;
  /** Props with values in `props` that the definition does not declare (InvokeRequest.dynamicProps). */
  dynamicProps?: DynamicPropRef[];
}

export interface BatchItem {
  /** Invocation number, unique in the pool. */
  q: number;
  /** Index into `BatchMessage.cfgs`. */
  c: number;
  inv: InvocationKind;
}

/**
 * Queued invocations of one source, run one after another in this order. A batch that arrives while
 * another batch of its source runs waits behind it.
 */
export interface BatchMessage {
  t: "batch";
  sid: string;
  cfgs: BatchConfig[];
  items: BatchItem[];
  /** Present when the child's copy of the source's db is missing or older than the server's. */
  db?: { v: number; data: Record<string, unknown> };
}

export type ToChild =
  | { t: "inspect"; q: number; entryFile: string }
  | BatchMessage
  /**
   * Drop the cached db of a source (the parent bounds how many it keeps): its realm is stopped, or,
   * when the realm is shared, the source leaves it.
   */
  | { t: "forget"; sid: string }
  /**
   * Stop a source's realm now (its invocation timed out), or an inspection's (`q`). Its later
   * messages are ignored, and batches for it that carry no db are dropped until one does: the
   * parent hands their calls to the next batch, with the db.
   */
  | { t: "stop"; sid?: string; q?: number }
  /**
   * The process is over its RSS cap: stop the realm holding the most memory (heap and Buffers) and
   * report it as out of memory with `message`.
   */
  | { t: "shed"; message: string }
  /** The API's answer to the component's request `id` (the runner's number; it hands the realm its own). */
  | { t: "api"; id: number; response: ComponentApiResponse };

export type ItemResult = InvokeResult & { q: number };

export type FromChild =
  | { t: "ready"; pid: number }
  /**
   * The source's oldest unanswered batch starts (sent before running it), so the parent knows which
   * calls may have started. `got`, `started` and `results` always concern that batch.
   */
  | { t: "got"; sid: string }
  /**
   * The batch's first call is about to enter component code (its module is loaded). Before this, that
   * call has run nothing of its own, so the parent may hand it to a replacement process. It implies
   * `got`: a batch whose first module is already loaded gets this message alone.
   */
  | { t: "started"; sid: string }
  /** The inspection's realm started loading the component: its time limit runs from here. */
  | { t: "inspecting"; q: number }
  | { t: "inspected"; q: number; meta?: ComponentMeta; error?: SerializedError }
  /**
   * Results of a batch, in item order. `done` ends the batch. While a batch runs long the child also
   * flushes what it has, naming the item it is running in `running` and for how many ms in `since`.
   */
  | {
      t: "results";
      sid: string;
      results: ItemResult[];
      running?: number;
      since?: number;
      done: boolean;
      /**
       * Set by the runner alone: the batch's `got` or `started`, which the realm said just before and
       * which, in the same turn of the runner's event loop, goes with its results rather than apart.
       */
      started?: "got" | "started";
      /**
       * With `done`: the realm thread's CPU time (µs) as it sent the results, the mark the runner charges
       * work left behind after the batch from (runner/usage.ts). Never relayed to the pool.
       */
      cpu?: number;
    }
  /** The first `http.respond()` of an invocation when it says `immediate: true`, sent at once (`sid` stamped by the runner). */
  | { t: "respond"; q: number; response: HttpResponse; sid?: string }
  /**
   * Something fatal happened: `process.exit()`, an uncaught exception, an unhandled rejection, a
   * heap over its cap. With `sid` (or `inspect`) only that source's (or inspection's) realm died and
   * the process goes on; without, the process is about to die.
   */
  | {
      t: "fatal";
      code: string;
      message: string;
      stack?: string;
      q?: number;
      sid?: string;
      inspect?: number;
    }
  /** Code a finished invocation `q` left behind called `$emit`; the event was not stored. */
  | { t: "late"; sid: string; q: number }
  /**
   * CPU time (ms) a realm used while none of its invocations ran (work left behind after `run`),
   * charged to the owner; `stopped` when it ran past `lateWorkLimitMs` and the realm was stopped.
   */
  | { t: "usage"; sid: string; ms: number; stopped?: boolean }
  /**
   * The realm of source `sid`, idle, stopped because of another source sharing it: its db copy is
   * gone (the next batch must carry it); nothing of `sid` is to blame.
   */
  | { t: "dropped"; sid: string }
  /** The process started a realm (a worker thread): counted for `ExecutorPool.stats()`. */
  | { t: "realm" }
  /**
   * Component code sent a request to https://api.pipedream.com; the pool answers it with `api`.
   * `id` is the realm's own number, which the runner replaces by one unique in the process.
   */
  | { t: "api"; id: number; request: ComponentApiRequest };
