/**
 * What the executor pool's rooms share: the pool's settings and state, and the operations one room
 * calls on another. Each room (lifecycle.ts, dispatch.ts, limits.ts, failures.ts, messages.ts) is given
 * this core and holds no other room; pool.ts builds the rooms and points each operation at the room
 * that holds it, so every call from one room into another is listed here. Plain functions (model.ts,
 * fork.ts, the helpers of limits.ts) are imported where they are used.
 */
import path from "node:path";
import type { ChildInit, ToChild } from "../child/protocol.ts";
import type { BuiltComponent, InvokeResult, LateWork } from "../types.ts";
import type { Grants } from "./grants.ts";
import {
  type Batch,
  type Call,
  type Child,
  type ExecutorLogger,
  type ExecutorPoolOptions,
  LOG_ENTRY_CHARS,
  type Owner,
  REALM_IDLE_MS,
  type Reason,
  type SourceState,
  type SpareSlot,
} from "./model.ts";
import type { ScratchLimit } from "./scratch.ts";

/** The pool's options with their defaults applied. */
export interface PoolSettings {
  /** Absolute. */
  dataDir: string;
  memoryMb: number;
  defaultTimeoutMs: number;
  /** What each executor process is started with; its scratch folder is filled in per process. */
  limits: ChildInit;
  idleMs: number;
  /** A source realm idle this long is stopped while its process keeps another (REALM_IDLE_MS). */
  realmIdleMs: number;
  /** As the operator gave them; `Lifecycle` keeps those this Node knows (v8-flags.ts). */
  v8Flags: readonly string[];
  /** `MALLOC_ARENA_MAX` of each executor process; 0: unset. */
  mallocArenaMax: number;
  extraCaCertsFile: string | undefined;
  /** Owners whose process starts no realm ahead (`ExecutorPoolOptions.inspectOnly`). */
  inspectOnly: ReadonlySet<string>;
}

export function poolSettings(options: ExecutorPoolOptions): PoolSettings {
  const memoryMb = options.memoryMb ?? 256;
  const defaultTimeoutMs = options.defaultTimeoutMs ?? 30_000;
  return {
    dataDir: path.resolve(options.dataDir),
    memoryMb,
    defaultTimeoutMs,
    limits: {
      scratchDir: "",
      maxEmitBytes: options.maxEmitBytes ?? 1024 * 1024,
      maxEmitsPerInvocation: options.maxEmitsPerInvocation ?? 1000,
      maxRunEmitBytes: options.maxRunEmitBytes ?? 64 * 1024 * 1024,
      maxLogsPerInvocation: options.maxLogsPerInvocation ?? 1000,
      maxLogEntryChars: LOG_ENTRY_CHARS,
      memoryMb,
      lateWorkLimitMs: defaultTimeoutMs,
      realmsPerOwner: options.realmsPerOwner ?? 16,
      ...(options.realmYoungMb ? { realmYoungMb: options.realmYoungMb } : {}),
      ...(options.egress ? { egress: options.egress } : {}),
      ...(options.pipedreamApi ? { pipedreamApi: { bodyLimit: options.pipedreamApi.bodyLimit } } : {}),
    },
    idleMs: options.idleMs ?? 10 * 60_000,
    realmIdleMs: options.realmIdleMs ?? REALM_IDLE_MS,
    v8Flags: options.v8Flags ?? [],
    mallocArenaMax: options.mallocArenaMax ?? 2,
    extraCaCertsFile: options.extraCaCertsFile,
    inspectOnly: new Set(options.inspectOnly ?? []),
  };
}

/** The settings, state and cross-room operations of one pool. */
export interface PoolCore {
  readonly settings: PoolSettings;
  readonly logger: ExecutorLogger | undefined;
  /** Every owner the pool has seen, by id. */
  readonly owners: Map<string, Owner>;
  /** Every process started and not yet gone. */
  readonly children: Set<Child>;
  readonly grants: Grants;
  readonly scratch: ScratchLimit;
  /** Set when `close` begins: nothing new starts after that. */
  closed: boolean;

  // lifecycle.ts: processes
  /** The owner's process if it may read `dirs`; else a new one granted every dir the owner needed so far. */
  readyChild(owner: Owner, dirs: string[]): Promise<Child>;
  send(child: Child, message: ToChild): void;
  /** SIGKILLs a child; the first reason given is the one reported. */
  kill(child: Child, reason: Reason): void;
  /** Stops a retired process once it has nothing left to run. */
  stopIfRetired(child: Child): void;
  /** Starts a process for `owner`, or a spare (with `spare`) whose `owner` is a stand-in. */
  spawn(owner: Owner, spare?: SpareSlot): Child;

  // spares.ts: processes started ahead
  /** A waiting spare, made `owner`'s process, when one waits and the owner has no process. */
  takeSpare(owner: Owner): Child | undefined;
  /** Creates a spare's folder once its uid is known, before the fork. */
  prepareSpare(child: Child): Promise<void>;
  /** The path `child` reads the component's entry file by. */
  entryPath(child: Child, component: BuiltComponent): string;
  /** A process that started as a spare answered: the spare it was is replaced now. */
  spareAnswered(child: Child): void;
  /** A spare-born process ended; `released` settles once its scratch folder is released. */
  spareGone(child: Child, released: Promise<void>): void;

  // dispatch.ts: queues and batches
  /** Sends the source's queued calls, as a batch or as the batch waiting behind the running one. */
  pump(source: SourceState): void;
  /** Resolves a call, keeping the source's db bookkeeping in step with the writes it returned. */
  settle(source: SourceState, call: Call, result: InvokeResult, child?: Child): void;
  /** A batch is over: the batch waiting behind it starts, queued calls go on. */
  endBatch(batch: Batch): void;

  // limits.ts: timeouts, memory, scratch
  /** (Re)starts the kill timer of the batch's running call. */
  arm(batch: Batch): void;
  /** The RSS cap: the biggest realm is shed first, then the process killed. */
  checkMemory(child: Child, pid: number, now: number): void;
  /** Measured scratch mode: stops an owner whose scratch folder is over the limit. */
  measureScratch(child: Child, sourceId?: string): void;

  // failures.ts: realms and processes that end
  /** A source's realm is gone: its running call fails, calls behind it go to the next realm. */
  realmGone(child: Child, sid: string, reason: Reason): void;
  /** An inspection's realm died while loading the component. */
  inspectionGone(child: Child, q: number, reason: Reason): void;
  /** The process is gone: what it ran fails or goes to a new process, the culprit is blamed. */
  gone(child: Child, code: number | null, signal: NodeJS.Signals | null): void;
  /** Passes work a source did after its invocation returned to `onLateWork`. */
  reportLate(child: Child, sourceId: string, cpuMs: number, error?: LateWork["error"]): void;

  // messages.ts: what a child says
  onMessage(child: Child, raw: unknown): void;
}
