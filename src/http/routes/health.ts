/**
 * Liveness and readiness probes. A node whose database is lost stays live (restarting it would not
 * bring the database back, and it recovers by itself) but is not ready, so that a load balancer sends
 * its traffic to nodes that can serve it.
 */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { executorAccessProblem } from "../../runtime/executor-access.ts";
import { isStoreUnavailable, type StoreUnavailableError } from "../../storage/health.ts";

export async function healthRoutes(app: FastifyInstance): Promise<void> {
  const ok = Type.Object({ status: Type.String() });
  app.get(
    "/healthz",
    {
      config: { public: true },
      schema: { tags: ["health"], summary: "Liveness", security: [], response: { 200: ok } },
    },
    async () => ({ status: "ok" }),
  );
  app.get(
    "/readyz",
    {
      config: { public: true },
      schema: {
        tags: ["health"],
        summary: "Readiness: the store answers and executors can run",
        security: [],
        response: { 200: ok, 503: ok },
      },
    },
    async (_request, reply) => {
      const { store, accounts } = app.fount;
      if (accounts.bootstrapPending)
        return reply.code(503).send({ status: "starting: creating the first admin" });
      // Known lost: no round trip (the probe in the driver tells when it is back).
      if (!store.health.available) {
        return reply.code(503).send({ status: `storage unreachable: ${store.health.reason}` });
      }
      try {
        await store.ping();
      } catch (err) {
        const reason = isStoreUnavailable(err) ? `: ${(err as StoreUnavailableError).reason}` : "";
        return reply.code(503).send({ status: `storage unreachable${reason}` });
      }
      // Executors under uids of their own must still reach the data dir (a chmod after start).
      const { config } = app.fount;
      if (config.executorIsolateUsers ?? process.getuid?.() === 0) {
        const problem = executorAccessProblem(config.dataDir);
        if (problem) return reply.code(503).send({ status: `executors cannot run: ${problem}` });
      }
      return { status: "ready" };
    },
  );
}
