/**
 * The commit of one run: what it produced — `$logs`, warnings and its error on `$errors`, emits, db
 * writes, dedupe state and usage (the invocation, its compute time, the bytes it stored) — stored in one
 * transaction of the group committer, or, when the run failed, only its logs, its error and its usage;
 * the stored events and the finished invocation are announced on the bus once it landed. A commit the
 * store refused drops the source's cached state.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../../clock.ts";
import type { Config } from "../../config.ts";
import type { SerializedError } from "../../errors.ts";
import { randomString } from "../../ids.ts";
import { withParsedBody } from "../../runtime/child/component/http-body.ts";
import type {
  ComponentMeta,
  HttpResponse,
  InvocationKind,
  InvokeResult,
  LogEntry,
} from "../../runtime/types.ts";
import { isStoreUnavailable } from "../../storage/health.ts";
import type { Span } from "../../tracing.ts";
import { usageDay } from "../accounts/quotas.ts";
import type { Bus } from "../bus.ts";
import type { SourceLeases } from "../cluster/source-leases.ts";
import type { Committer } from "../events/committer.ts";
import type { EventRecorder } from "../events/recorder.ts";
import type { EventRecord, SourceRecord } from "../types.ts";
import { leaseLost } from "./run-lease.ts";
import { endCommitSpan, startCommitSpan } from "./run-span.ts";
import type { SourceDb, SourceDbs } from "./source-db.ts";
import { StoredBytes } from "./stored-bytes.ts";
import { type PutError, type PutEvent, type RoutingBound, storeEmits } from "./stored-emits.ts";

export type Trigger = "http" | "timer" | "manual" | "subscription" | "hook" | "options";

export interface RunOutcome {
  ok: boolean;
  /** Stored emits of the default and named channels. */
  emits: EventRecord[];
  logs: LogEntry[];
  error?: SerializedError;
  response?: HttpResponse;
  returnValue?: unknown;
  durationMs: number;
  /** The component's HTTP interface holds the response (`customResponse`): a run that never responded gets 204. */
  customResponse: boolean;
}

const platformVersion = "fount-0.1";

/** The event `run` sees (an endpoint event gets its parsed body). */
export function eventOf(invocation: Extract<InvocationKind, { kind: "run" }>): unknown {
  return invocation.parseBody ? withParsedBody(invocation.event) : invocation.event;
}

/** What a commit writes through and announces on. */
export interface RunCommitDeps {
  committer: Committer;
  recorder: EventRecorder;
  bus: Bus;
  clock: Clock;
  logger: FastifyBaseLogger;
  leases?: SourceLeases;
  /** The runner's cache of each source's db, dropped when a commit is refused. */
  dbs: SourceDbs;
  config: Pick<Config, "maxRunRoutedBytes" | "maxListenersPerEmitter">;
}

export class RunCommits {
  readonly #d: RunCommitDeps;
  readonly #routing: RoutingBound;

  constructor(deps: RunCommitDeps) {
    this.#d = deps;
    this.#routing = {
      maxRoutedChars: deps.config.maxRunRoutedBytes,
      maxListeners: deps.config.maxListenersPerEmitter,
    };
  }

  /**
   * Commits a run's result (`dbAfter`: the db its writes left, from SourceDbs.apply). `leaseGen`: the run
   * lease's generation it ran under (several nodes); `counted`: the quota check counted it already;
   * `run`: the run's span (traces on), whose child the commit's span is.
   */
  commit(
    source: SourceRecord,
    meta: ComponentMeta,
    invocation: InvocationKind,
    trigger: Trigger,
    result: InvokeResult,
    dbAfter: SourceDb | undefined,
    startedMs: number,
    leaseGen: number | undefined,
    counted = false,
    run?: Span,
  ): Promise<RunOutcome> {
    const stored: EventRecord[] = [];
    /** Set when the commit stored none of the emits (`fan_out_too_large`): the run failed. */
    let refused: SerializedError | undefined;
    const outcome = (): RunOutcome => ({
      ok: !result.error && !refused,
      emits: stored.filter((e) => e.channel !== "$errors" && e.channel !== "$logs"),
      logs: result.logs,
      error: refused ?? result.error,
      response: result.response,
      returnValue: result.returnValue,
      durationMs: result.durationMs,
      customResponse: meta.props.some((p) => p.type === "$.interface.http" && !!p.customResponse),
    });
    if (invocation.kind === "options" || invocation.kind === "props") return Promise.resolve(outcome());
    // Parsed only when an error is stored: most runs never need the original event again.
    const original = () => (invocation.kind === "run" ? eventOf(invocation) : { hook: invocation.hook });
    const span = run ? startCommitSpan(run, source.id) : undefined;
    const committed = this.#d.committer
      .submit(
        async (tx) => {
          stored.length = 0;
          refused = undefined;
          if (leaseGen !== undefined && this.#d.leases)
            await tx.assertSourceLease(source.id, this.#d.leases.nodeId, leaseGen);
          const now = this.#d.clock.now();
          // What the commit stores, events and delivery copies, for the daily stored-bytes quota.
          const bytes = new StoredBytes(tx, source.id);
          const put: PutEvent = async (channel, event, extra, eventChars) => {
            const record = await this.#d.recorder.store(tx, {
              emitterId: source.id,
              channel,
              event,
              meta: extra,
              nowMs: now,
              trace: span?.trace,
              retention: source.retention ?? null,
            });
            stored.push(record);
            await bytes.add(record, eventChars);
          };
          const error: PutError = (code, err) =>
            put("$errors", this.#errorEvent(source, original(), trigger, { ...err, code }, startedMs));
          for (const log of result.logs)
            await put("$logs", { level: log.level, message: log.message, ts: log.ts });
          for (const warning of result.warnings) await error(warning.code, warning);
          if (result.error) {
            await error(result.error.code, result.error);
          } else {
            // Set when routing the emits would copy too much (stored-emits.ts): the run fails whole.
            refused = await storeEmits(tx, source.id, meta, result.emits, put, error, this.#routing, bytes);
            if (!refused && dbAfter) await tx.putSourceDb(source.id, dbAfter.data, dbAfter.version);
          }
          await tx.addUsage(source.createdBy, usageDay(now), {
            invocations: counted ? 0 : 1,
            computeMs: Math.ceil(result.durationMs),
            storedBytes: bytes.total,
          });
          return outcome();
        },
        () => {
          for (const e of stored) this.#d.bus.emit("event.stored", e);
          this.#d.bus.emit("invocation.finished", {
            sourceId: source.id,
            trigger,
            ok: !result.error && !refused,
            errorCode: (refused ?? result.error)?.code,
            durationMs: result.durationMs,
          });
        },
      )
      .then((o) => {
        if (!dbAfter) return o;
        // The store holds the db now, and the runner's cache may let it go when full; or the run failed
        // at its commit, and the cache (and the executor's copy) hold writes the store never took.
        if (refused) this.#d.dbs.drop(source.id);
        else this.#d.dbs.committed(source.id, dbAfter.version);
        return o;
      })
      .catch((err) => {
        if (isStoreUnavailable(err)) {
          // The store is out of reach (logged once by app/services.ts). The cached db is kept: the executor's copy
          // holds the same writes, and invocations already handed over build on it; dropping ours would
          // let their results land on an empty db. They reach the store with the next commit that writes the db.
          this.#d.logger.debug({ err, sourceId: source.id }, "commit of an invocation failed");
          throw err;
        }
        // The store refused the commit: the cached db and clock may hold writes that never landed.
        this.#d.dbs.drop(source.id);
        this.#d.recorder.ids.forget(source.id);
        const lost = leaseLost(err, this.#d.leases, source.id, leaseGen, this.#d.logger);
        if (lost) throw lost;
        this.#d.logger.error({ err, sourceId: source.id }, "commit of an invocation failed");
        throw err;
      });
    if (span)
      void committed.then(
        (o) =>
          endCommitSpan(
            span.span,
            o.emits.map((e) => e.id),
          ),
        (err) => endCommitSpan(span.span, undefined, err),
      );
    return committed;
  }

  #errorEvent(
    source: SourceRecord,
    original: unknown,
    trigger: Trigger,
    err: SerializedError,
    startedMs: number,
  ): unknown {
    const ts = new Date(this.#d.clock.now()).toISOString();
    return {
      original_event: original ?? null,
      original_context: {
        id: randomString(27),
        ts: new Date(startedMs).toISOString(),
        source_id: source.id,
        deployment_id: source.id,
        source_type: trigger,
        verified: false,
        owner_id: source.ownerId,
        platform_version: platformVersion,
      },
      error: {
        code: err.code,
        message: err.message,
        name: err.name,
        cellId: null,
        ts,
        stack: err.stack ?? null,
      },
    };
  }
}
