/**
 * The executor pool's shared vocabulary: its options, its errors, and the state it keeps per owner,
 * source, batch and process. Plain data and small pure helpers; the behaviour lives in the sibling rooms.
 */

import type { ChildProcess } from "node:child_process";
import { AppError, type SerializedError } from "../../errors.ts";
import type { ChildInit } from "../child/protocol.ts";
import type {
  BuiltComponent,
  ComponentApiHandler,
  ComponentMeta,
  HttpResponse,
  InvokeRequest,
  InvokeResult,
  LateWork,
} from "../types.ts";

export interface ExecutorLogger {
  warn(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
}

export interface ExecutorPoolOptions {
  /** Scratch folders live in `<dataDir>/scratch/<owner>`; the pool empties `<dataDir>/scratch` when it starts. */
  dataDir: string;
  /**
   * Realms an owner's process runs at most (default 16); past it, sources share realms
   * (docs/isolation.md).
   */
  realmsPerOwner?: number;
  /**
   * V8 flags added to every executor process (`--optimize-for-size`, say: docs/architecture.md has what
   * each measured); those this Node's V8 does not know, or that would widen the sandbox, are dropped
   * with a warning (v8-flags.ts).
   */
  v8Flags?: string[];
  /**
   * glibc malloc arenas of each executor process (`MALLOC_ARENA_MAX` in its environment, which its
   * realms do not see); default 2, 0 leaves glibc's default (8 per core). Every thread that mallocs
   * (the main thread, each realm, V8's and libuv's helpers) otherwise gets an arena of its own, which
   * keeps freed memory (docs/architecture.md, "Cheaper tenants").
   */
  mallocArenaMax?: number;
  /**
   * Young-generation cap of each realm in MiB (worker `resourceLimits.maxYoungGenerationSizeMb`);
   * absent or 0: V8's default. Smaller saves memory per realm and costs scavenges (docs/architecture.md).
   */
  realmYoungMb?: number;
  /** V8 heap cap of each executor process (`--max-old-space-size`); RSS is capped at 2× this + 128 MiB. */
  memoryMb?: number;
  /** Used when a request has no `timeoutMs`, and for `inspect`. */
  defaultTimeoutMs?: number;
  maxEmitBytes?: number;
  maxEmitsPerInvocation?: number;
  /** JSON bytes all the emits of one invocation may hold (default 64 MiB); past it the run fails. */
  maxRunEmitBytes?: number;
  maxLogsPerInvocation?: number;
  /** Run each owner's process under its own uid/gid; needs root. Default: true when running as root. */
  isolateUsers?: boolean;
  /** First uid handed out; two pools on one host need disjoint ranges. */
  uidBase?: number;
  /** Size limit of each owner's scratch folder, in MiB (default 256; runtime/executors/scratch.ts). */
  scratchMb?: number;
  /** How it is enforced; absent: a tmpfs per owner when mounting works, else measured. */
  scratchMode?: "tmpfs" | "measured";
  /** An owner's process with nothing to do for this long is stopped (and started again on demand). */
  idleMs?: number;
  /**
   * A source's realm with nothing to do for this long is stopped (default REALM_IDLE_MS), unless it is
   * the last its process holds: that one goes with the process (`idleMs`).
   */
  realmIdleMs?: number;
  /**
   * Executor processes kept started ahead with no owner (default 0), so that an owner's first call
   * after its process stopped does not wait for node and a realm to start (spares.ts). None when the
   * server is root and `isolateUsers` is off: they would run as root.
   */
  spares?: number;
  /**
   * Owners whose process only inspects code and runs no source (the registry's): it starts no realm
   * ahead, at its start or after an inspection, as none would ever be taken (each costs 50-250 ms of
   * CPU and about 10 MB).
   */
  inspectOnly?: readonly string[];
  /**
   * A PEM file of extra certificate authorities executors trust (self-hosted services with a private
   * CA); handed to Node as NODE_EXTRA_CA_CERTS, which components never see in their env.
   */
  extraCaCertsFile?: string;
  /** Where component code may connect, checked inside each executor (runtime/egress.ts); absent: anywhere. */
  egress?: ChildInit["egress"];
  /**
   * Answers requests component code sends to https://api.pipedream.com (api-relay.ts), with request
   * bodies cut at `bodyLimit` + 1 bytes; absent: such requests go to the network like any other.
   */
  pipedreamApi?: { handler: ComponentApiHandler; bodyLimit: number };
  logger?: ExecutorLogger;
  /**
   * Told about work a source did after its invocation returned: CPU its left-behind timers and
   * promises used (to charge the owner), and what went wrong (a late `$emit`, a crash, a realm
   * stopped for spinning), for the source's `$errors`.
   */
  onLateWork?: (report: LateWork) => void;
}

/** A failure of the executor itself (`executor_stopped`, `executor_crash`) rather than of the component. */
export class ExecutorError extends Error {
  readonly code: string;
  readonly data: Record<string, unknown> | undefined;
  constructor(code: string, message: string, data?: Record<string, unknown>) {
    super(message);
    this.name = "ExecutorError";
    this.code = code;
    this.data = data;
  }
}

/** `inspect` found code that does not load or validate; `data` (= `details`) holds line/column when known. */
export class ComponentInvalidError extends AppError {
  readonly data: Record<string, unknown> | undefined;
  constructor(message: string, data?: Record<string, unknown>) {
    super("component_invalid", message, { details: data });
    this.data = data;
  }
}

/** Invocations per batch message: bounds message size and how much one crash can take down. */
export const MAX_BATCH = 256;
/**
 * On 2 cores with three CPU burners beside other work, starts took over 10 s and deploys failed; with
 * the process still niced while node started, even 30 s were not always enough (it is niced at `ready`).
 */
export const STARTUP_TIMEOUT_MS = 30_000;
/**
 * Executors run this much nicer than the server: tenant code gets the CPU the server's HTTP, IPC and
 * commit work leaves, so a busy component cannot starve the API or other tenants' endpoints, and a
 * waking executor does not preempt the thread every invocation depends on.
 */
export const EXECUTOR_NICE = 10;
export const WATCH_INTERVAL_MS = 500;
/** After asking a process over its RSS cap to stop its biggest realm, this long before it is killed. */
export const SHED_GRACE_MS = 1500;
/**
 * Sources whose db and realm a child keeps; the least recently used realm is stopped past this, and
 * its db re-sent when the source runs again. A live realm costs about 10 MB (docs/architecture.md).
 */
export const MAX_CACHED_DBS = 16;
/**
 * A realm with nothing to do for this long is stopped (and started again on demand), while its process
 * keeps another: the last realm of a process stays as long as the process. Starting a realm costs about
 * 100 ms of CPU against 1 to 3 ms for a hit to a running one, so a tenant hit less often than this paid
 * a start per hit; on a loaded node with hundreds of tenants hits then came further apart than this,
 * every hit started a realm, and the node crawled (issue 29, docs/architecture.md, "Many tenants").
 */
export const REALM_IDLE_MS = 60_000;
/** Realms that die in a row before running anything, after which the source's first call fails. */
export const MAX_REALM_RESTARTS = 3;
export const LOG_ENTRY_CHARS = 8 * 1024;
export const OUTPUT_LINES_PER_WINDOW = 20;
export const OUTPUT_WINDOW_MS = 10_000;
export const OOM_PATTERN = /JavaScript heap out of memory|Reached heap limit|Allocation failed/;

export interface Call {
  q: number;
  req: InvokeRequest;
  onRespond: ((response: HttpResponse) => void) | undefined;
  resolve: (result: InvokeResult) => void;
  responded: boolean;
}

export interface SourceState {
  owner: Owner;
  sourceId: string;
  queue: Call[];
  /** Realms that died in a row before any call of theirs started; past a few, the first call fails. */
  restarts: number;
  /** The batch the child runs (or will run first): its messages concern this one. */
  batch: Batch | null;
  /**
   * A batch sent to the same child behind `batch`, before that one answered: the child starts it as
   * soon as `batch` ends, without waiting for the server. It takes no db copy (the child's own copy is
   * then authoritative), so one is sent only when the caller knows of no change the child lacks.
   */
  waiting: Batch | null;
  /**
   * The db version the caller reaches once it has applied every successful write we returned: the
   * newest dbVersion seen, plus one per successful invocation with writes since (see `dbVersion`
   * in the class comment).
   */
  version: number;
  /** The newest db snapshot a request brought. */
  snapshot: { v: number; data: Record<string, unknown> } | undefined;
  /**
   * Writes we returned that the snapshot does not hold yet, with the version they lead to; they are
   * layered over the snapshot when a child needs the db again (after a restart).
   */
  overlay: Map<string, { value: unknown; v: number }>;
}

export interface Batch {
  source: SourceState;
  calls: Call[];
  child: Child | null;
  /** Index of the first call without a result: the one running. */
  next: number;
  /** When the running call started, as far as the parent knows. */
  started: number;
  /** The child confirmed it read the batch; before that none of its calls can have started. */
  received: boolean;
  /** The child said the first call entered component code (its module loaded); before that it ran nothing. */
  entered: boolean;
  timer: NodeJS.Timeout | undefined;
}

export interface Inspection {
  q: number;
  component: BuiltComponent;
  resolve: (meta: ComponentMeta) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  /** Fails the inspection at its time limit, which runs from when its realm began loading. */
  expire: () => void;
  limit: number;
}

export interface Owner {
  id: string;
  uid: number | undefined;
  /** Folder name under `<dataDir>/scratch`. */
  scratchName: string;
  /** Every readDir this owner's components needed; a new process is granted all of them. */
  dirs: Set<string>;
  child: Child | null;
  sources: Map<string, SourceState>;
}

export interface Reason {
  code: string;
  message: string;
  /** The invocation or inspection that caused it, when known. */
  q?: number;
  /** Blame the only running call when `q` is unknown (an OOM or an exit nobody reported). */
  blameSole?: boolean;
  stack?: string;
  quiet?: boolean;
}

/** What a spare process (spares.ts) holds: started before its owner was known, taken by one later. */
export interface SpareSlot {
  /**
   * `<dataDir>/spares/<n>`, the one folder besides the runner and its scratch that it may read: empty
   * until an owner takes it, then holding links to that owner's folders only (spares.ts).
   */
  folder: string;
  /** An owner took it: from then on it is that owner's process like any other. */
  taken: boolean;
  /** Its replacement was started (once its first call or inspection answered). */
  replaced?: boolean;
}

export interface Child {
  /** For a spare not yet taken, a stand-in of its own that no call reaches (spares.ts). */
  owner: Owner;
  /** Set when the process started as a spare. */
  spare?: SpareSlot;
  proc: ChildProcess | undefined;
  pid: number | undefined;
  allowed: Set<string>;
  ready: Promise<void>;
  started: boolean;
  startWaiters: { resolve: () => void; reject: (err: Error) => void } | undefined;
  retiring: boolean;
  gone: boolean;
  goneWaiters: Array<() => void>;
  killReason: Reason | undefined;
  /** The owner's scratch folder once prepared, and whether it went over its limit (measured mode). */
  scratch?: { dir: string; measuring: boolean; over: boolean };
  batches: Map<string, Batch>;
  inspections: Map<number, Inspection>;
  /** Version of the db copy the child holds per source, least recently used first. */
  dbVersions: Map<string, number>;
  /** When each source's last batch on this child ended: idle realms are stopped after REALM_IDLE_MS. */
  realmIdleSince: Map<string, number>;
  /** Realms (worker threads) the process has started. */
  realmsStarted: number;
  /** When the pool asked the process to stop its biggest realm for being over the RSS cap. */
  shedAt: number | undefined;
  stderrTail: string;
  lastActive: number;
  output: { windowStart: number; count: number; dropped: number };
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function failed(code: string, message: string, extra: Partial<SerializedError> = {}): InvokeResult {
  return {
    emits: [],
    logs: [],
    dbWrites: {},
    warnings: [],
    error: { code, message, ...extra },
    durationMs: 0,
  };
}

export function newBatch(source: SourceState, calls: Call[]): Batch {
  return {
    source,
    calls,
    child: null,
    next: 0,
    started: 0,
    received: false,
    entered: false,
    timer: undefined,
  };
}

/** Identifies the set of folders a component needs to read. */
export function dirsKey(component: BuiltComponent): string {
  return component.readDirs.join("\0");
}

/**
 * Whether the batch's running call is in component code: the child read the batch and either said its
 * first call entered (module loaded) or already returned results for earlier calls.
 */
export function inCode(batch: Batch): boolean {
  return batch.received && (batch.entered || batch.next > 0);
}

/**
 * The call numbered `q` that `child` was sent and has not answered yet. A child only ever reaches its
 * own calls: the number alone would let one tenant's code answer another tenant's HTTP request.
 */
export function unsettledCall(child: Child, q: unknown, sid: unknown): Call | undefined {
  // The runner names the source whose realm sent the message, so one source cannot answer another's.
  const batch = typeof sid === "string" ? child.batches.get(sid) : undefined;
  if (!batch) return undefined;
  for (let i = batch.next; i < batch.calls.length; i++) if (batch.calls[i]!.q === q) return batch.calls[i];
  return undefined;
}

export function stoppedError(): ExecutorError {
  return new ExecutorError("executor_stopped", "The executor pool is closed");
}
