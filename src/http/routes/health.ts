/** Liveness and readiness probes. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { executorAccessProblem } from "../../runtime/executor-access.ts";

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
      try {
        await app.fount.store.ping();
      } catch {
        return reply.code(503).send({ status: "storage unreachable" });
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
