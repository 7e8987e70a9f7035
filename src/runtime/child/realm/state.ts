/**
 * What the parts of a realm share: its channel to the runner (taken before the sandbox hides it), the
 * settings the runner started it with (worker data), and whose code runs now, kept across awaits by an
 * AsyncLocalStorage: an invocation's, an inspection's, or none (a timer left behind by a finished one).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import workerThreads from "node:worker_threads";
import type { Invocation } from "../component/invocation.ts";
import type { ChildInit, FromChild } from "../protocol.ts";

/** The realm's channel to the runner; realm.ts stops the thread first when there is none. */
export const port = workerThreads.parentPort;
export const init = workerThreads.workerData as ChildInit;

type Context = { inv: Invocation } | { inspect: number };
export const als = new AsyncLocalStorage<Context>();
/** Invocations whose code is running now, and inspections in progress: who to blame for a fatal error. */
export const running = new Set<Invocation>();
export const inspecting = new Set<number>();

/** Posts a message to the runner. */
export function send(message: FromChild): void {
  port!.postMessage(message);
}

/** The invocation whose code runs now, if any. */
export function currentInvocation(): Invocation | undefined {
  const ctx = als.getStore();
  return ctx && "inv" in ctx ? ctx.inv : undefined;
}
