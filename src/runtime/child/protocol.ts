/**
 * Messages between the executor pool (parent) and an executor process (child), sent over the
 * `serialization: "json"` IPC channel. Type-only: both sides import it with `import type`, so the
 * child reads no project file outside its own folder.
 */
import type { SerializedError } from "../../errors.ts";
import type { ComponentMeta, HttpResponse, InvocationKind, InvokeResult, PropValues } from "../types.ts";
import type { EgressRules } from "./egress-guard.ts";

/** Limits and paths the parent hands a child as its only argv entry (its environment is empty). */
export interface ChildInit {
  scratchDir: string;
  maxEmitBytes: number;
  maxEmitsPerInvocation: number;
  maxLogsPerInvocation: number;
  maxLogEntryChars: number;
  /** Where component code may connect (egress-guard.ts); absent: anywhere. */
  egress?: EgressRules;
}

/** What the invocations of one batch share; deduplicated per batch so props cross the pipe once. */
export interface BatchConfig {
  entryFile: string;
  props: PropValues;
  dbProps: string[];
  httpProps: Array<{ name: string; endpoint: string; customResponse: boolean }>;
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
  /** Drop the cached db of a source (the parent keeps the number of cached sources bounded). */
  | { t: "forget"; sid: string };

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
  | { t: "inspected"; q: number; meta?: ComponentMeta; error?: SerializedError }
  /**
   * Results of a batch, in item order. `done` ends the batch. While a batch runs long the child also
   * flushes what it has, naming the item it is running in `running` and for how many ms in `since`.
   */
  | { t: "results"; sid: string; results: ItemResult[]; running?: number; since?: number; done: boolean }
  /** The first `http.respond()` of an invocation, sent at once. */
  | { t: "respond"; q: number; response: HttpResponse }
  /** The child is about to die: `process.exit()`, an uncaught exception or an unhandled rejection. */
  | { t: "fatal"; code: string; message: string; stack?: string; q?: number };
