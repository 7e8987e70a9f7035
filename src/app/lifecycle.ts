/**
 * What the app starts once ready and stops once closed, in order: Fount's own components are published
 * before the server answers, then the timer and delivery loops start; once listening, a node of several
 * tells the others where to forward its sources' hits; at shutdown no new timer runs, in-flight commits
 * land, executors stop, and the store closes last.
 */
import type { AddressInfo } from "node:net";
import os from "node:os";
import type { FastifyInstance } from "fastify";
import type { Config } from "../config.ts";
import { publishRegistryFolder } from "../domain/components/registry.ts";
import type { Isolation } from "./executors.ts";
import type { Wired } from "./services.ts";

/** What starts when the app is ready: the loops (tests drive them by hand) and the registry's publish. */
export interface Loops {
  startScheduler?: boolean;
  startDispatcher?: boolean;
  publishRegistry?: boolean;
}

export function addLifecycle(
  app: FastifyInstance,
  config: Config,
  wired: Wired,
  isolation: Isolation,
  loops: Loops,
): void {
  const { services, scheduler, dispatcher, cluster } = wired;
  const { sessions, store } = services;
  // Fount's own components (the `registry/` folder) are published before the server answers.
  app.addHook("onReady", async () => {
    if (loops.publishRegistry !== false) await publishRegistryFolder(services);
  });
  app.addHook("onReady", async () => {
    if (loops.startScheduler !== false) scheduler.start();
    sessions.startSweeping((err) => app.log.warn({ err }, "could not delete expired console sessions"));
    if (loops.startDispatcher !== false) await dispatcher.start();
    services.pruner.start();
    services.searchIndexer?.start();
  });
  // Several nodes: once listening, this node tells the others where to forward its sources' hits.
  app.addHook("onListen", async () => {
    if (!cluster || config.nodeUrl === "off") return;
    const url = config.nodeUrl ?? listeningUrl(app.server.address());
    if (url) cluster.link.advertise(url);
  });
  // Shutdown order: no new timer runs, in-flight commits land, executors stop, then the store closes.
  app.addHook("onClose", async () => {
    sessions.stop();
    await scheduler.stop();
    // Before the commits drain: its last results and released claims go through the committer and store.
    await dispatcher.stop();
    await wired.lateWork.close();
    await wired.committer.drain();
    await services.pruner.stop();
    await services.searchIndexer?.stop();
    await wired.settlements?.drain();
    await dispatcher.releaseLeftovers();
    await wired.executor.close();
    await cluster?.close();
    await wired.egress?.close();
    isolation.uids?.release();
    await wired.fetchAgent.close();
    await store.close();
  });
}

/**
 * Where other nodes reach this one: the address it listens on, or this machine's first non-loopback
 * IPv4 address when it listens on every address (HOST=0.0.0.0 or ::).
 */
function listeningUrl(address: string | AddressInfo | null): string | undefined {
  if (!address || typeof address === "string") return undefined;
  let host = address.address;
  if (host === "0.0.0.0" || host === "::") {
    const external = Object.values(os.networkInterfaces())
      .flat()
      .find((i) => i?.family === "IPv4" && !i.internal);
    host = external?.address ?? "127.0.0.1";
  }
  return `http://${host.includes(":") ? `[${host}]` : host}:${address.port}`;
}
