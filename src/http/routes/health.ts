/** Liveness and readiness probes. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";

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
        summary: "Readiness: the store answers",
        security: [],
        response: { 200: ok, 503: ok },
      },
    },
    async (_request, reply) => {
      try {
        await app.fount.store.ping();
        return { status: "ready" };
      } catch {
        return reply.code(503).send({ status: "storage unreachable" });
      }
    },
  );
}
