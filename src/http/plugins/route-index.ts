/** Remembers every route's path and methods so that an unmatched request can get 405 instead of 404. */
import type { FastifyInstance } from "fastify";

/**
 * Pipedream Connect's routes that one of Fount's patterns matches (`GET /v1/components/:key` matches
 * `/v1/components/configure`): Fount does not implement them, so they answer 404 whatever the method,
 * as docs/pipedream-compatibility.md says, rather than a 405 that suggests another method would work.
 */
const unimplemented = /^\/v1\/components\/(?:configure|props)\/?$/;

export class RouteIndex {
  readonly #routes: Array<{ pattern: RegExp; methods: Set<string> }> = [];

  attach(app: FastifyInstance): void {
    app.addHook("onRoute", (route) => {
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      const pattern = new RegExp(
        `^${route.url
          .replace(/\/+$/, "")
          .split("/")
          .map((part) =>
            part.startsWith(":")
              ? "[^/]+"
              : part === "*"
                ? ".*"
                : part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"),
          )
          .join("/")}/?$`,
      );
      this.#routes.push({ pattern, methods: new Set(methods) });
    });
  }

  /** The methods allowed on a concrete path (empty when no route has that path). */
  allowed(path: string): string[] {
    if (unimplemented.test(path)) return [];
    const out = new Set<string>();
    for (const r of this.#routes) if (r.pattern.test(path)) for (const m of r.methods) out.add(m);
    return [...out];
  }
}
