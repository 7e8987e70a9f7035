/**
 * What an executor process says, handled. Its messages are untrusted (it runs the owner's code): each
 * is checked for shape and may concern only that process's own batches, calls and inspections. Results
 * are copied by results.ts; requests to Pipedream's API go to api-relay.ts.
 */
import { definitionTooLargeMessage, jsonBytesOver, maxDefinitionBytes } from "../child/guards/json-size.ts";
import type { FromChild, ItemResult } from "../child/protocol.ts";
import type { ApiRelay } from "./api-relay.ts";
import type { PoolCore } from "./core.ts";
import { reniceExecutor, syntaxLocation } from "./fork.ts";
import { type Child, ComponentInvalidError, failed, isObject, type Reason, unsettledCall } from "./model.ts";
import { copyResult, httpResponse, serialized } from "./results.ts";

/** Handles the messages of the pool's processes. */
export class ChildMessages {
  private readonly core: PoolCore;
  private readonly apiRelay: ApiRelay | undefined;

  constructor(core: PoolCore, apiRelay: ApiRelay | undefined) {
    this.core = core;
    this.apiRelay = apiRelay;
  }

  onMessage(child: Child, raw: unknown): void {
    if (!isObject(raw)) return;
    const msg = raw as FromChild;
    switch (msg.t) {
      case "ready":
        if (!child.started && child.pid !== undefined) reniceExecutor(child.pid);
        child.started = true;
        // Idle time counts from when it can take work: a start slower than `idleMs` (a loaded host, a
        // short FOUNT_EXECUTOR_IDLE_S) stopped the process before its first call, three times in a row.
        child.lastActive = Date.now();
        child.startWaiters?.resolve();
        break;
      case "got":
      case "started":
        this.onStart(child, msg.sid, msg.t);
        break;
      case "results":
        // A quick run's `started` comes with its results (runner/state.ts).
        if (msg.started === "got" || msg.started === "started") this.onStart(child, msg.sid, msg.started);
        this.onResults(child, msg);
        break;
      case "respond": {
        const call = unsettledCall(child, msg.q, msg.sid);
        const response = httpResponse(msg.response);
        if (!call || call.responded || !response) return;
        call.responded = true;
        try {
          call.onRespond?.(response);
        } catch (err) {
          this.core.logger?.warn({ err, sourceId: call.req.sourceId }, "onRespond callback threw");
        }
        break;
      }
      case "inspected":
        void this.onInspected(child, msg);
        break;
      case "inspecting": {
        const inspection = child.inspections.get(msg.q);
        if (!inspection) break;
        clearTimeout(inspection.timer);
        inspection.timer = setTimeout(inspection.expire, inspection.limit);
        break;
      }
      case "fatal": {
        const known = ["process_exit", "unhandled_rejection", "out_of_memory"];
        const code = known.includes(msg.code) ? msg.code : "executor_crash";
        const reason: Reason = { code, message: String(msg.message).slice(0, 2000) };
        if (typeof msg.q === "number") reason.q = msg.q;
        if (typeof msg.stack === "string") reason.stack = msg.stack.slice(0, 16 * 1024);
        if (typeof msg.sid === "string") this.core.realmGone(child, msg.sid, reason);
        else if (typeof msg.inspect === "number") this.core.inspectionGone(child, msg.inspect, reason);
        else this.core.kill(child, reason);
        break;
      }
      case "realm":
        child.realmsStarted++;
        break;
      case "api":
        this.apiRelay?.onRequest(child, msg.id, msg.request);
        break;
      case "dropped": {
        if (typeof msg.sid !== "string") return;
        // A batch already on its way finds no realm and no db: hand its calls to the next one.
        if (child.batches.has(msg.sid))
          this.core.realmGone(child, msg.sid, {
            code: "executor_crash",
            message: "A source sharing this source's realm stopped it",
          });
        else child.dbVersions.delete(msg.sid);
        break;
      }
      case "late": {
        if (typeof msg.sid !== "string") return;
        this.core.reportLate(child, msg.sid, 0, {
          code: "late_emit",
          message:
            "$emit was called after the invocation had returned (by a timer or promise it left running); the event was not stored. Await such work inside run.",
        });
        break;
      }
      case "usage": {
        if (typeof msg.sid !== "string") return;
        const ms = typeof msg.ms === "number" && msg.ms > 0 ? Math.min(msg.ms, 3_600_000) : 0;
        if (msg.stopped === true) {
          const message = `Work left running after the invocation returned kept the CPU busy for over ${this.core.settings.defaultTimeoutMs} ms and was stopped`;
          this.core.realmGone(child, msg.sid, { code: "late_work_stopped", message });
          this.core.reportLate(child, msg.sid, ms, { code: "late_work_stopped", message });
        } else if (ms > 0) this.core.reportLate(child, msg.sid, ms);
        break;
      }
    }
  }

  /** The source's oldest batch arrived (`got`), or its first call is about to run (`started`). */
  private onStart(child: Child, sid: unknown, t: "got" | "started"): void {
    const batch = child.batches.get(String(sid));
    if (!batch) return;
    if (!batch.received) {
      batch.received = true;
      batch.started = Date.now();
      this.core.arm(batch);
    }
    // A loaded module lets the child say both at once.
    if (t === "started") batch.entered = true;
  }

  private onResults(child: Child, msg: Extract<FromChild, { t: "results" }>): void {
    const batch = typeof msg.sid === "string" ? child.batches.get(msg.sid) : undefined;
    if (!batch || !Array.isArray(msg.results)) return;
    batch.source.restarts = 0;
    const now = Date.now();
    for (const raw of msg.results) {
      const call = batch.calls[batch.next];
      if (!call || !isObject(raw) || raw.q !== call.q) break;
      batch.next++;
      this.core.settle(
        batch.source,
        call,
        copyResult(raw as unknown as ItemResult, this.core.settings.limits),
        child,
      );
    }
    if (msg.done === true) {
      for (const call of batch.calls.slice(batch.next)) {
        this.core.settle(
          batch.source,
          call,
          failed("executor_crash", "The executor returned no result for this invocation"),
        );
      }
      batch.next = batch.calls.length;
      this.core.endBatch(batch);
      return;
    }
    const since = typeof msg.since === "number" && msg.since >= 0 ? msg.since : 0;
    batch.started = msg.running === batch.calls[batch.next]?.q ? now - since : now;
    child.lastActive = now;
    this.core.arm(batch);
  }

  private async onInspected(child: Child, msg: Extract<FromChild, { t: "inspected" }>): Promise<void> {
    const inspection = child.inspections.get(msg.q);
    if (!inspection) return;
    child.inspections.delete(msg.q);
    clearTimeout(inspection.timer);
    child.lastActive = Date.now();
    if (child.spare) this.core.spareAnswered(child);
    this.core.stopIfRetired(child);
    // The runner refuses a definition over the bound before sending it; its process also runs the
    // owner's code, so the answer is checked again (a walk that stops at the bound) and let go at once.
    if (jsonBytesOver(msg, maxDefinitionBytes)) {
      inspection.reject(
        new ComponentInvalidError(definitionTooLargeMessage(), { limit_bytes: maxDefinitionBytes }),
      );
      return;
    }
    if (isObject(msg.meta) && typeof msg.meta.name === "string" && Array.isArray(msg.meta.props)) {
      inspection.resolve(msg.meta);
      return;
    }
    const error = serialized(msg.error, "component_invalid");
    let data = error.data;
    let message = error.message;
    if (error.name === "SyntaxError" && !data?.line) {
      // An ESM SyntaxError's stack has no position; `node --check` prints it.
      const where = await syntaxLocation(inspection.component, child.owner.uid).catch(() => undefined);
      if (where) {
        data = where;
        message += ` (line ${where.line}${where.column ? `, column ${where.column}` : ""})`;
      }
    }
    inspection.reject(new ComponentInvalidError(message, data));
  }
}
