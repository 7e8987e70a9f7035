/**
 * `GET /metrics`: Prometheus text format, for the node that answers (src/metrics.ts). It carries counts
 * and timings, never tenants' names or data. Open like the health probes unless FOUNT_METRICS_TOKEN is
 * set, which Prometheus then sends as a bearer token. With FOUNT_METRICS_PORT it is served on a listener
 * of its own (FOUNT_METRICS_HOST, default HOST) and not on the API's port, so an operator can keep it on
 * an address only the scraper reaches (docs/operations.md).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import http from "node:http";
import type { FastifyInstance } from "fastify";
import { AppError } from "../../errors.ts";
import { clientErrorHandler } from "../plugins/errors.ts";

/**
 * Counts every answered API request by its route pattern (not its URL, which would make a series per
 * ID). Added on the root instance, so that it sees the routes of every plugin.
 */
export function countRequests(app: FastifyInstance): void {
  const { metrics } = app.fount;
  app.addHook("onResponse", (request, reply, done) => {
    metrics.httpRequest(
      request.method,
      request.routeOptions.url ?? "unmatched",
      reply.statusCode,
      reply.elapsedTime / 1000,
    );
    done();
  });
}

/**
 * Whether an Authorization header carries the token. Digests are compared, so the time taken says
 * nothing of the token, its length included; the scheme is case-insensitive (RFC 9110).
 */
function tokenCheck(token: string | undefined): (authorization: string | undefined) => boolean {
  if (token === undefined) return () => true;
  const digest = (text: string) => createHash("sha256").update(text).digest();
  const expected = digest(token);
  return (authorization) => {
    const m = /^bearer +(.*)$/i.exec(authorization ?? "");
    return timingSafeEqual(digest(m ? m[1]! : "\0no token"), expected) && m !== null;
  };
}

const refused = () => new AppError("unauthorized", "Send the metrics token as Authorization: Bearer <token>");

export async function metricsRoutes(app: FastifyInstance): Promise<void> {
  const { metrics, config } = app.fount;
  const allowed = tokenCheck(config.metricsToken);
  if (config.metricsPort === undefined) {
    app.get("/metrics", { config: { public: true }, schema: { hide: true } }, async (request, reply) => {
      if (!allowed(request.headers.authorization)) throw refused();
      const text = await metrics.registry.metrics();
      return reply.type(metrics.registry.contentType).send(text);
    });
    return;
  }

  // A listener of its own, which answers GET /metrics and nothing else.
  const server = http.createServer((req, res) => {
    const answer = (status: number, type: string, body: string) => {
      res.writeHead(status, { "content-type": type, "cache-control": "no-store" });
      res.end(body);
    };
    const json = (err: AppError) =>
      answer(err.status, "application/json; charset=utf-8", JSON.stringify(err));
    const path = (req.url ?? "/").split("?")[0];
    if (path !== "/metrics") return json(new AppError("not_found", "Only /metrics is served on this port"));
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.setHeader("allow", "GET, HEAD");
      return json(new AppError("method_not_allowed"));
    }
    if (!allowed(req.headers.authorization)) return json(refused());
    metrics.registry.metrics().then(
      (text) => answer(200, metrics.registry.contentType, req.method === "HEAD" ? "" : text),
      (err: Error) => {
        app.log.error({ err }, "metrics could not be collected");
        json(new AppError("internal"));
      },
    );
  });
  // Requests Node's parser refuses get a catalogue answer, as on the other ports.
  server.on("clientError", clientErrorHandler);
  app.addHook("onReady", async () => {
    await new Promise<void>((resolve, reject) => {
      server.once("error", (err: NodeJS.ErrnoException) => {
        reject(
          new Error(
            `cannot listen for metrics on ${config.metricsHost}:${config.metricsPort} (FOUNT_METRICS_HOST, FOUNT_METRICS_PORT): ${err.code === "EADDRINUSE" ? "already in use" : err.message}`,
          ),
        );
      });
      server.listen(config.metricsPort, config.metricsHost, () => resolve());
    });
  });
  app.addHook("onClose", async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
}
