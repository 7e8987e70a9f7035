/**
 * `GET /metrics`: Prometheus text format, for the node that answers (src/metrics.ts). Open like the
 * health probes unless FOUNT_METRICS_TOKEN is set, which Prometheus then sends as a bearer token; it
 * carries counts and timings, never tenants' names or data.
 */
import { timingSafeEqual } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { AppError } from "../../errors.ts";

/**
 * Counts every answered API request by its route pattern (not its URL, which would make a series per
 * ID). Added on the root instance, so that it sees the routes of every plugin.
 */
export function countRequests(app: FastifyInstance): void {
  const { metrics } = app.fount;
  app.addHook("onResponse", async (request, reply) => {
    metrics.httpRequest(
      request.method,
      request.routeOptions.url ?? "unmatched",
      reply.statusCode,
      reply.elapsedTime / 1000,
    );
  });
}

export async function metricsRoutes(app: FastifyInstance): Promise<void> {
  const { metrics, config } = app.fount;
  const expected = config.metricsToken ? Buffer.from(`Bearer ${config.metricsToken}`) : undefined;
  app.get("/metrics", { config: { public: true }, schema: { hide: true } }, async (request, reply) => {
    if (expected) {
      const given = Buffer.from(request.headers.authorization ?? "");
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw new AppError("unauthorized", "Send the metrics token as Authorization: Bearer <token>");
      }
    }
    const text = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(text);
  });
}
