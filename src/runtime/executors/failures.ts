/**
 * What happens when a realm or an executor process ends before its work is done: the call it was
 * running fails with the reason (blamed on the culprit when one is known, else on the only call
 * running), calls that never started go to the next realm or process in order, inspections fail, and
 * work a source did after its invocation returned is reported to `onLateWork`.
 */
import type { LateWork } from "../types.ts";
import type { PoolCore } from "./core.ts";
import { deathReason } from "./limits.ts";
import {
  type Child,
  ComponentInvalidError,
  ExecutorError,
  failed,
  inCode,
  MAX_REALM_RESTARTS,
  type Reason,
} from "./model.ts";

/** Settles what a realm or process that ended leaves behind. */
export class Failures {
  private readonly core: PoolCore;
  private readonly onLateWork: ((report: LateWork) => void) | undefined;

  constructor(core: PoolCore, onLateWork: ((report: LateWork) => void) | undefined) {
    this.core = core;
    this.onLateWork = onLateWork;
  }

  /**
   * A source's realm is gone (stopped at a timeout, or dead): the child's db copy went with it. The
   * call it was running fails; calls behind it never started and go to the next realm, with the db.
   */
  realmGone(child: Child, sid: string, reason: Reason): void {
    child.dbVersions.delete(sid);
    const batch = child.batches.get(sid);
    if (!batch) {
      // Nothing of the source was running: what killed the realm is work left behind after `run`.
      if (reason.code !== "late_work_stopped" && reason.code !== "timeout") {
        const error = { code: reason.code, message: `After the invocation returned: ${reason.message}` };
        this.reportLate(child, sid, 0, reason.stack ? { ...error, stack: reason.stack } : error);
      }
      return;
    }
    child.batches.delete(sid);
    clearTimeout(batch.timer);
    const { source } = batch;
    const waiting = source.waiting;
    if (waiting?.child === child) {
      source.waiting = null;
      batch.calls.push(...waiting.calls);
    }
    const first = batch.calls[batch.next];
    let culprit = reason.q ?? (batch.received ? first?.q : undefined);
    let started = inCode(batch) || (batch.received && first !== undefined && first.q === culprit);
    if (!started && first && ++source.restarts >= MAX_REALM_RESTARTS) {
      // Realms that die before running anything, again and again: fail rather than loop.
      culprit = first.q;
      started = true;
    }
    if (!this.core.closed) {
      const firstNotStarted = started ? batch.next + 1 : batch.next;
      source.queue.unshift(...batch.calls.slice(firstNotStarted));
      batch.calls.length = Math.min(batch.calls.length, firstNotStarted);
    }
    const othersMessage = `The source's realm stopped before this invocation finished: ${reason.message}`;
    for (const call of batch.calls.slice(batch.next)) {
      const mine = call.q === culprit;
      const extra = mine && reason.stack ? { stack: reason.stack } : {};
      this.core.settle(
        source,
        call,
        mine ? failed(reason.code, reason.message, extra) : failed("executor_crash", othersMessage),
      );
    }
    batch.next = batch.calls.length;
    child.lastActive = Date.now();
    this.core.endBatch(batch);
    this.core.stopIfRetired(child);
  }

  /** An inspection's realm died while loading the component. */
  inspectionGone(child: Child, q: number, reason: Reason): void {
    const inspection = child.inspections.get(q);
    if (!inspection) return;
    child.inspections.delete(q);
    clearTimeout(inspection.timer);
    inspection.reject(new ComponentInvalidError(`The component failed while loading: ${reason.message}`));
    this.core.stopIfRetired(child);
  }

  /** Passes work a source did after its invocation returned to `onLateWork`. */
  reportLate(child: Child, sourceId: string, cpuMs: number, error?: LateWork["error"]): void {
    const report: LateWork = { ownerId: child.owner.id, sourceId, cpuMs };
    if (error) report.error = error;
    try {
      this.onLateWork?.(report);
    } catch (err) {
      this.core.logger?.warn({ err, sourceId }, "onLateWork callback threw");
    }
  }

  /** The process is gone: fail what it was running, blame the culprit, let queued calls go to a new one. */
  gone(child: Child, code: number | null, signal: NodeJS.Signals | null): void {
    if (child.gone) return;
    child.gone = true;
    this.core.children.delete(child);
    const released = child.scratch
      ? this.core.scratch.detach(child.scratch.dir, child.scratch.over)
      : Promise.resolve();
    if (child.spare) this.core.spareGone(child, released);
    const { owner } = child;
    if (owner.child === child) owner.child = null;
    const reason = deathReason(child, code, signal, this.core.settings.memoryMb);
    const running: number[] = [];
    for (const batch of child.batches.values()) {
      const call = batch.received ? batch.calls[batch.next] : undefined;
      if (call) running.push(call.q);
    }
    running.push(...child.inspections.keys());
    const culprit = reason.q ?? (reason.blameSole && running.length === 1 ? running[0] : undefined);
    const others = reason.code === "executor_stopped" ? "executor_stopped" : "executor_crash";
    const othersMessage =
      others === "executor_stopped"
        ? "The executor pool was closed before this invocation finished"
        : `The executor process stopped before this invocation finished: ${reason.message}`;

    const batches = [...child.batches.values()];
    child.batches.clear();
    for (const batch of batches) {
      clearTimeout(batch.timer);
      // A batch waiting behind this one never started: its calls are handled as this one's last.
      const waiting = batch.source.waiting;
      if (waiting?.child === child) {
        batch.source.waiting = null;
        batch.calls.push(...waiting.calls);
      }
      // Calls behind the running one never started: they go to the replacement process, in order,
      // so a neighbour's crash costs them only a restart. The running call cannot be retried safely.
      if (others !== "executor_stopped" && !this.core.closed) {
        // The running call has started once it entered component code; a first call still loading
        // its module has run nothing (the replacement loads it anew), unless it is the culprit.
        const first = batch.calls[batch.next];
        const started = inCode(batch) || (batch.received && first !== undefined && first.q === culprit);
        const firstNotStarted = started ? batch.next + 1 : batch.next;
        const notStarted = batch.calls.slice(firstNotStarted);
        batch.calls.length = Math.min(batch.calls.length, firstNotStarted);
        batch.source.queue.unshift(...notStarted);
      }
      for (const call of batch.calls.slice(batch.next)) {
        const mine = call.q === culprit;
        const extra = mine && reason.stack ? { stack: reason.stack } : {};
        this.core.settle(
          batch.source,
          call,
          mine ? failed(reason.code, reason.message, extra) : failed(others, othersMessage),
        );
      }
      batch.next = batch.calls.length;
    }
    for (const inspection of child.inspections.values()) {
      clearTimeout(inspection.timer);
      const loading =
        reason.code === "timeout" ? reason.message : `The component failed while loading: ${reason.message}`;
      inspection.reject(
        inspection.q === culprit && others !== "executor_stopped"
          ? new ComponentInvalidError(loading)
          : new ExecutorError(
              others,
              others === "executor_stopped" ? "The executor pool was closed" : othersMessage,
            ),
      );
    }
    child.inspections.clear();
    child.startWaiters?.reject(
      new ExecutorError(others, `The executor process could not start: ${reason.message}`),
    );
    if (!reason.quiet && !this.core.closed) {
      const tail = child.stderrTail.slice(-1000);
      this.core.logger?.warn(
        { ownerId: owner.id, pid: child.pid, code, signal, reason: reason.code, stderr: tail },
        reason.message,
      );
    }
    for (const waiter of child.goneWaiters) waiter();
    for (const batch of batches) this.core.endBatch(batch);
  }
}
