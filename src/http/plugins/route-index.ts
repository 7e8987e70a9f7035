/** Remembers every route's path and methods so that an unmatched request can get 405 instead of 404. */
import type { FastifyInstance } from "fastify";

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
    const out = new Set<string>();
    for (const r of this.#routes) if (r.pattern.test(path)) for (const m of r.methods) out.add(m);
    return [...out];
  }
}
